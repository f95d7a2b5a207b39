"""Grading one submission: a trusted pytest run over sandboxed workers, then scores.

The engine never imports the submission. It copies the submission's
``student/`` into a fresh working copy (:mod:`grader.sandbox`), then runs
trusted pytest processes (the public test file and the hidden checks of the
selected problems) with :mod:`grader.plugin`, which routes every call of the
tests to one sandboxed worker per problem and sends the outcomes back over a
pipe. The work is split by concern, each module importing only those below it:

* :mod:`grader.planning`: which check files go to which of the K concurrent
  trusted pytest processes (groups);
* :mod:`grader.groups`: running the groups (the :mod:`grader.protocol` plan
  out, results back) and merging each problem's results from its groups;
* :mod:`grader.scoring`: verdicts and points from the rubric, and each failed
  item's first failure as structured fields;
* :mod:`grader.results`: the records all this produces, which
  :mod:`grader.report` renders.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader import rubric as rubric_mod
from grader.groups import base_plan, run_groups
from grader.protocol import RunResults
from grader.results import ERROR, GradeResult
from grader.sandbox import (
    Limits,
    Sandbox,
    SubmissionError,
    fitted_memory_limit,
    make_working_copy,
    remove_tree,
)
from grader.scoring import score_problem, strip_controls, total, unavailable
from grader.submission import locate
from grader.util import PROFILES, REPO, cuda_available, printable

__all__ = ["STUDENT_RELEASE_CHECKS", "Options", "grade", "hidden_available"]

STUDENT_RELEASE_CHECKS = (
    "public checks only (this is the student release); the course's grader also runs hidden checks "
    "that extend these public tests with more and larger inputs")


@dataclass
class Options:
    profile: str | None = None
    problems: list[str] | None = None
    public_only: bool = False
    sandbox: str = "auto"  # auto | bwrap | rlimits
    call_timeout: float | None = None
    time_limit: float | None = None
    reveal_hidden: bool | None = None
    memory_limit_gib: float | None = None
    rubric: Path = rubric_mod.DEFAULT_RUBRIC
    seed: int | None = None  # hidden checks' inputs; None: a fresh one, recorded in the result
    parallel: int | None = None  # concurrent trusted pytest processes (problem groups); None: auto


def hidden_available() -> bool:
    """Whether this checkout holds the reference and the hidden checks (instructors)."""
    return (REPO / "reference" / "__init__.py").is_file() and (REPO / "grader" / "hidden").is_dir()


def grade(submission: Path | str | None, options: Options | None = None) -> GradeResult:
    """Grade ``submission`` (a folder or zip holding ``student/``; None: this repo's).

    Raises ValueError (or :class:`grader.rubric.RubricError`) for bad options or
    rubric, RuntimeError when the requested sandbox cannot run; whatever the
    submission holds, it gets a result."""
    opts = options or Options()
    rub = rubric_mod.load(opts.rubric)
    profile = opts.profile or rub.settings.profile
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (one of {', '.join(PROFILES)})")
    selected = list(rub.problems)
    if opts.problems:
        unknown = [p for p in opts.problems if p not in {q.name for q in rub.problems}]
        if unknown:
            raise ValueError(f"unknown problems {unknown} (the rubric has {[p.name for p in rub.problems]})")
        selected = [p for p in rub.problems if p.name in opts.problems]
    public_only = opts.public_only or not hidden_available()
    reveal = rub.settings.reveal_hidden if opts.reveal_hidden is None else opts.reveal_hidden
    path = Path(submission).expanduser().resolve() if submission else REPO
    cuda = cuda_available()
    configured = int((opts.memory_limit_gib or rub.settings.memory_limit_gib) * (1 << 30))
    limits = Limits(memory_bytes=fitted_memory_limit(configured), cpu_seconds=int(rub.settings.cpu_limit_seconds))
    sandbox = Sandbox(limits=limits, gpu=cuda, want=opts.sandbox)
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    result = GradeResult(submission=str(path), profile=profile, sandbox=sandbox.describe(), seed=seed, reveal=reveal)
    if limits.memory_bytes < configured:
        result.notes.append(f"worker memory limit lowered to {limits.memory_bytes / (1 << 30):.1f} GiB "
                            f"(from {configured / (1 << 30):g} GiB) to fit this machine's free memory")
    result.checks = (STUDENT_RELEASE_CHECKS if not hidden_available() else
                     "public checks only (--public-only)" if opts.public_only else "public + hidden checks")
    if sandbox.mode != "bwrap":
        result.notes.append(f"sandbox: rlimits only ({sandbox.why})")
    start = time.monotonic()
    run = Path(tempfile.mkdtemp(prefix="grader-"))
    try:
        try:
            folder = locate(path, run / "unpacked")
            work = make_working_copy(folder / "student", run / "work")
        except Exception as e:  # whatever a submission's files do, it gets a result
            why = str(e) if isinstance(e, SubmissionError) else \
                f"its files could not be unpacked or copied ({type(e).__name__}: {e})"
            result.error = printable(why)[:1000]
            result.problems = [unavailable(p, ERROR, f"not graded: {result.error}", cuda) for p in selected]
            return total(result, time.monotonic() - start)
        plan = base_plan(path, work, profile, sandbox, float(opts.call_timeout or rub.settings.call_timeout),
                         float(rub.settings.start_timeout), seed)
        outcomes, errors = run_groups(rub, selected, plan, public_only=public_only, parallel=opts.parallel,
                                      time_limit=opts.time_limit, run=run)
    finally:
        try:
            remove_tree(run)
        except OSError as e:  # never a crash: the result stands, the instructor is told
            result.notes.append(f"the grader could not remove its temporary folder {run}: {e}")
    result.execution_time = time.monotonic() - start
    seccomp = {n: r.seccomp for o in outcomes.values() for n, r in o.problems.items() if r.seccomp}
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe(None if not seccomp else "off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))
    result.notes += errors
    repro = str(path) if path.is_dir() else "FOLDER_HOLDING_YOUR_student"
    for p in selected:
        own = outcomes.get(p.name, RunResults())
        res = score_problem(p, own, cuda, public_only, reveal, repro)
        res.time = round(sum(c.duration for c in res.checks), 3)
        if own.fatal and own.log:
            res.log = own.log  # the trusted run's output: instructors only
        result.problems.append(res)
    strip_controls(result)
    return total(result, result.execution_time)

"""Grading one submission: a trusted pytest run over sandboxed workers, then scores.

The engine never imports the submission. It copies the submission's
``student/`` into a fresh working copy (:mod:`grader.sandbox.isolation`), then runs
trusted pytest processes (the public test file and the hidden checks of the
selected problems) with :mod:`grader.plugin`, which routes every call of the
tests to one sandboxed worker per problem and sends the outcomes back over a
pipe. The work is split by concern, each module importing only those below it:

* :mod:`grader.groups`: which check files go to which of the K concurrent
  trusted pytest processes (groups), running them (the :mod:`grader.protocol`
  plan out, results back) and merging each problem's results from its groups;
* :mod:`grader.scoring`: verdicts and points from the rubric, and each failed
  item's first failure as structured fields;
* :mod:`grader.results`: the records all this produces, which
  :mod:`grader.report.render` renders.

The machine's speed for the time budgets (:mod:`grader.sandbox.budgets`) is
measured once per grade here, and a problem that ends in a grader error is
regraded once, alone, before the result is final: see grader/README.md,
"Budgets". The processes and formats: grader/README.md, "Processes and the
formats between them".
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
from grader.report.progress import GradeProgress
from grader.results import ERROR, GRADER_ERROR, GradeResult, ProblemResult
from grader.sandbox import budgets
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits, fitted_memory_limit
from grader.sandbox.scratch import remove_tree
from grader.sandbox.submission import locate
from grader.sandbox.workcopy import SubmissionError, make_working_copy
from grader.scoring import score_problem, strip_controls, total, unavailable
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
    sandbox: str = "auto"  # auto ($LAB_ISOLATION, else bwrap, else uid) | bwrap | uid | rlimits
    call_cpu: float | None = None  # CPU seconds of one call (None: the rubric's, scaled to this machine)
    cpu_budget: float | None = None  # CPU seconds of every problem (None: from the reference's cost)
    reveal_hidden: bool | None = None
    memory_limit_gib: float | None = None
    rubric: Path = rubric_mod.DEFAULT_RUBRIC
    seed: int | None = None  # hidden checks' inputs; None: a fresh one, recorded in the result
    parallel: int | None = None  # concurrent trusted pytest processes (problem groups); None: auto
    progress: GradeProgress | None = None  # told as each problem starts and finishes; None: silent


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
    costs = budgets.load()
    speed = budgets.machine_speed(costs)
    settings = rub.settings
    configured = int((opts.memory_limit_gib or settings.memory_limit_gib) * (1 << 30))
    # RLIMIT_CPU is a worker's own last line, above any budget it may serve.
    most = max(opts.cpu_budget or 0.0, *(
        budgets.problem_budget(p.check_files(REPO, public_only=public_only), profile, costs,
                               slowdown=settings.slowdown, floor=settings.budget_floor, speed=speed,
                               fixed=p.cpu_budget)[0] for p in selected))
    limits = Limits(memory_bytes=fitted_memory_limit(configured),
                    cpu_seconds=int(most + settings.start_cpu * speed + 60))
    sandbox = Sandbox(limits=limits, gpu=cuda, want=opts.sandbox)
    # Hidden checks never run where the submission could read them: without
    # filesystem isolation (an explicit --sandbox rlimits) only the public ones.
    unisolated = sandbox.mode == "rlimits" and not public_only
    public_only = public_only or unisolated
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    result = GradeResult(submission=str(path), profile=profile, sandbox=sandbox.describe(), seed=seed, reveal=reveal,
                         speed=round(speed, 3))
    if limits.memory_bytes < configured:
        result.notes.append(f"worker memory limit lowered to {limits.memory_bytes / (1 << 30):.1f} GiB "
                            f"(from {configured / (1 << 30):g} GiB) to fit this machine's free memory")
    if speed > 1.05:
        result.notes.append(f"this machine runs the calibration workload {speed:.2f} times slower than the one the "
                            "reference's costs were measured on: every CPU budget is that much larger")
    unmeasured = [p.name for p in selected if not p.gpu and p.cpu_budget is None and any(
        costs.file(profile, f) is None for f in p.check_files(REPO, public_only=public_only))]
    if unmeasured:  # (names problems, never check files: the hidden ones' names are not the students')
        result.notes.append(f"no measured reference cost for some checks of {', '.join(unmeasured)} in the "
                            f"{profile} profile: their budgets are generous guesses (instructors: python -m grader "
                            "calibrate)")
    result.checks = (STUDENT_RELEASE_CHECKS if not hidden_available() else
                     "public checks only (--public-only)" if opts.public_only else
                     "public checks only (hidden checks need filesystem isolation: bubblewrap or the uid mode)"
                     if unisolated else "public + hidden checks")
    start = time.monotonic()
    run = Path(tempfile.mkdtemp(prefix="grader-"))
    if sandbox.mode == "uid":  # the worker's uid reaches its working copy and scratch, lists nothing
        run.chmod(0o711)
    try:
        try:
            folder = locate(path, run / "unpacked")
            work = make_working_copy(folder / "student", run / "work")
            if sandbox.mode == "uid" and (run / "unpacked").exists():  # the worker reads its working copy only
                (run / "unpacked").chmod(0o700)
        except Exception as e:  # whatever a submission's files do, it gets a result
            why = str(e) if isinstance(e, SubmissionError) else \
                f"its files could not be unpacked or copied ({type(e).__name__}: {e})"
            result.error = printable(why)[:1000]
            result.problems = [unavailable(p, ERROR, f"not graded: {result.error}", cuda) for p in selected]
            return total(result, time.monotonic() - start)
        plan = base_plan(path, work, profile, sandbox, call_cpu=float(opts.call_cpu or settings.call_cpu * speed),
                         start_cpu=float(settings.start_cpu * speed), wall_factor=float(settings.wall_factor),
                         seed=seed)

        def attempt(problems: list[rubric_mod.Problem], parallel: int | None, where: Path) -> list[ProblemResult]:
            outcomes, errors = run_groups(rub, problems, plan, public_only=public_only, parallel=parallel,
                                          cpu_budget=opts.cpu_budget, costs=costs, speed=speed, run=where,
                                          progress=opts.progress)
            result.notes.extend(e for e in errors if e not in result.notes)
            _record_seccomp(outcomes, result, sandbox)
            return [_scored(p, outcomes.get(p.name, RunResults()), cuda, public_only, reveal) for p in problems]

        result.problems = attempt(selected, opts.parallel, run)
        faulty = [p for p, res in zip(selected, result.problems, strict=True) if res.status == GRADER_ERROR]
        if faulty:
            first = {res.name: res for res in result.problems if res.status == GRADER_ERROR}
            if opts.progress is not None:
                opts.progress.note(f"regrading {', '.join(first)} alone, after a grader error")
            again = {res.name: res for res in attempt(faulty, 1, run / "regrade")}
            result.problems = [again.get(res.name, res) for res in result.problems]
            for name, res in again.items():
                was = first[name].output.splitlines()[0] if first[name].output else "a grader error"
                outcome = "still a grader error" if res.status == GRADER_ERROR else "graded"
                result.notes.append(f"{name}: regraded alone after a grader error ({was}): {outcome}")
    finally:
        try:
            remove_tree(run)
        except OSError as e:  # never a crash: the result stands, the instructor is told
            result.notes.append(f"the grader could not remove its temporary folder {run}: {e}")
    result.execution_time = time.monotonic() - start
    strip_controls(result)
    return total(result, result.execution_time)


def _scored(p: rubric_mod.Problem, own: RunResults, cuda: bool, public_only: bool, reveal: bool) -> ProblemResult:
    res = score_problem(p, own, cuda, public_only, reveal)
    res.time = round(sum(c.duration for c in res.checks), 3)
    if own.fatal and own.log:
        res.log = own.log  # the trusted run's output: instructors only
    return res


def _record_seccomp(outcomes: dict[str, RunResults], result: GradeResult, sandbox: Sandbox) -> None:
    """The sandbox line with the seccomp state the workers reported at start-up."""
    seccomp = {n: r.seccomp for o in outcomes.values() for n, r in o.problems.items() if r.seccomp}
    if not seccomp:
        return
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe("off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))

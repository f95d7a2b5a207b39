"""Grading one submission: a trusted pytest run over sandboxed workers, then scores.

The engine never imports the submission. It copies the submission's
``student/`` into a fresh working copy (:mod:`grader.sandbox.isolation`), then runs
trusted pytest processes (the public test file and the hidden checks of the
selected problems) with :mod:`grader.plugin`, which routes every call of the
tests to one sandboxed worker per problem and sends the outcomes back over a
pipe. The work is split by concern, each module importing only those below it:

* :mod:`grader.groups`: the phases (public checks, then hidden ones), each
  run as one trusted pytest process (the :mod:`grader.protocol` plan out,
  results back);
* :mod:`grader.scoring`: verdicts and points from the rubric, and each failed
  item's first failure as structured fields;
* :mod:`grader.results`: the records all this produces, which
  :mod:`grader.report` renders.

The machine's speed for the time budgets (:mod:`grader.budgets`) is
measured once per grade here, and a problem that ends in a grader error is
regraded once, alone, before the result is final: see grader/README.md,
"Budgets". The processes and formats: grader/README.md, "Processes and the
formats between them".
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader import budgets
from grader import rubric as rubric_mod
from grader.budgets import Budgets
from grader.feedback import Feedback
from grader.groups import ProblemFiles, group_template, phases, problem_results, run_phase
from grader.imports import NOT_IMPORTED, needed_modules, problem_modules, static_import_errors
from grader.protocol import COLLECT_ERROR, RunResults
from grader.report.progress import GradeProgress
from grader.results import ERROR, GRADER_ERROR, UNFINISHED, UNFINISHED_TEXT, GradeResult
from grader.rubric import is_hidden
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import fitted_memory_limit, grade_memory
from grader.sandbox.scratch import remove_tree
from grader.scoring import STAND_IN_NOTE, score_problem, strip_controls, total, unavailable
from grader.staging.submission import locate
from grader.staging.workcopy import SubmissionError, make_working_copy
from grader.util import PROFILES, REPO, cuda_available, memory_available, printable, torch_support_note

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
    progress: GradeProgress | None = None  # told as each problem starts and finishes; None: silent
    cpu_stand_in: bool = False  # without CUDA, run the GPU problems on the CPU standing in for one (a rehearsal)
    on_update: Callable[[GradeResult], None] | None = None  # told the result as it stands, after each problem
    started: float | None = None  # time.monotonic() when the grade began (the command's start); None: grade()'s
    feedback: Feedback = field(default_factory=Feedback)  # what students read of hidden checks (a limit on probing)


def hidden_available() -> bool:
    """Whether this checkout holds the reference and the hidden checks (instructors)."""
    return (REPO / "reference" / "__init__.py").is_file() and (REPO / "grader" / "hidden").is_dir()


def grade(submission: Path | str | None, options: Options | None = None) -> GradeResult:
    """Grade ``submission`` (a folder or zip holding ``student/``; None: this repo's).

    Raises ValueError (or :class:`grader.rubric.RubricError`) for bad options or
    rubric, RuntimeError when the requested sandbox cannot run; whatever the
    submission holds, it gets a result."""
    opts = options or Options()
    start = time.monotonic() if opts.started is None else opts.started
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
    # Where the GPU problems run: the CUDA device; without one the CPU when
    # asked to stand in for it (a rehearsal of the GPU pipeline); else nowhere.
    gpu_device = "cuda" if cuda else "cpu" if opts.cpu_stand_in else ""
    costs = budgets.load()
    began = time.process_time()
    speed = budgets.machine_speed(costs)
    calibration = time.process_time() - began
    settings = rub.settings
    configured = int((opts.memory_limit_gib or settings.memory_limit_gib) * (1 << 30))
    # Each problem's check files and budget, found once: every phase and report uses these
    # (the RLIMIT_CPU below is set before the sandbox says whether hidden checks may run).
    check_files = {p.name: tuple(p.check_files(REPO, public_only=public_only)) for p in selected}
    cpu_budgets = Budgets(profile, costs, slowdown=settings.slowdown, floor=settings.budget_floor, speed=speed,
                          override=opts.cpu_budget)
    limits = budgets.limits_for(settings, speed=speed, memory_bytes=fitted_memory_limit(configured),
                                cpu_seconds=cpu_budgets.cpu_limit(selected, check_files, settings.start_cpu),
                                call_cpu=opts.call_cpu)
    sandbox = Sandbox(limits=limits, cuda=cuda, want=opts.sandbox)
    # Hidden checks never run where the submission could read them: without
    # filesystem isolation (an explicit --sandbox rlimits) only the public ones.
    unisolated = sandbox.mode == "rlimits" and not public_only
    public_only = public_only or unisolated
    if unisolated:
        check_files = {name: tuple(f for f in files if not is_hidden(f)) for name, files in check_files.items()}
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    result = GradeResult(submission=str(path), profile=profile, sandbox=sandbox.describe(), seed=seed, reveal=reveal,
                         speed=round(speed, 3), calibration_cpu=round(calibration, 3))
    if note := torch_support_note():
        result.operator_warnings.append(note)
    if limits.memory_bytes < configured:
        result.operator_notes.append(f"worker memory limit lowered to {limits.memory_bytes / (1 << 30):.1f} GiB "
                                     f"(from {configured / (1 << 30):g} GiB) to fit this machine's free memory")
    speed_note = (f"this machine runs the calibration workload {speed:.2f} times slower than the one the "
                  "reference's costs were measured on: every CPU budget is that much larger") if speed > 1.05 else ""
    if speed_note:
        result.operator_notes.append(speed_note)
    needed = grade_memory(limits)
    if memory_available() < needed:
        result.operator_warnings.append(
            f"this machine has {memory_available() >> 20} MiB of memory free, and a grade may need {needed >> 20} "
            f"MiB (a worker is promised {limits.growth_bytes >> 20} MiB): a worker the kernel kills for memory "
            "is a grader error here, not the submission's (docs/instructors.md: the memory to give a grader)")
    unmeasured = [p.name for p in selected if not p.gpu and p.cpu_budget is None
                  and cpu_budgets.of(p, check_files[p.name])[2]]
    if unmeasured:  # (names problems, never check files: the hidden ones' names are not the students')
        result.operator_notes.append(
            f"no measured reference cost for some checks of {', '.join(unmeasured)} in the {profile} profile: their "
            "budgets are generous guesses (instructors: python -m grader calibrate)")
    result.checks = (STUDENT_RELEASE_CHECKS if not hidden_available() else
                     "public checks only (--public-only)" if opts.public_only else
                     "public checks only (hidden checks need filesystem isolation: bubblewrap or the uid mode)"
                     if unisolated else "public + hidden checks")
    # Every report shows each problem as not graded yet until its last phase
    # has run: a grade stopped from outside leaves the points it finished.
    result.problems = [unavailable(p, UNFINISHED, UNFINISHED_TEXT, gpu_device) for p in selected]
    if gpu_device == "cpu" and any(p.gpu for p in selected):
        result.notes.append(STAND_IN_NOTE)
    if opts.feedback.note and not public_only:  # how a limit on probing applies to this submission
        result.notes.append(opts.feedback.note)
    _update(opts, result, start)
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
            result.problems = [unavailable(p, ERROR, f"not graded: {result.error}", gpu_device) for p in selected]
            result.wall_time = round(time.monotonic() - start, 3)
            return total(result, _execution_time(start))
        # A module that does not compile (or is not there) costs the problems
        # that need it, found before any check runs; those are not run (grader/imports.py).
        broken = static_import_errors(work / "student", {m for p in selected for m in problem_modules(p.name)})
        not_imported = {p.name: broken[m] for p in selected
                        for m in sorted(needed_modules(p.name, work / "student") & set(broken))[:1]}
        for p in selected:
            if p.name in not_imported:
                result.problems = [unavailable(p, ERROR, f"{NOT_IMPORTED} ({not_imported[p.name]})", gpu_device)
                                   if q.name == p.name else q for q in result.problems]
        graded = [p for p in selected if p.name not in not_imported]
        if not_imported:  # the reports say so at once, not after the first graded problem
            result.import_errors = _import_errors(not_imported, result)
            _update(opts, result, start)
        template = group_template(path, work, profile, sandbox, seed=seed, stand_in=gpu_device == "cpu")
        grading = _Grading(opts, result, graded, check_files, gpu_device, reveal, start)
        all_phases = phases(graded, check_files, gpu_device=gpu_device)
        grading.expect([({p.name for p, _ in part}, any(is_hidden(f) for _, files in part for f in files))
                        for part in all_phases])
        for index, part in enumerate(all_phases):
            hidden = any(is_hidden(f) for _, files in part for f in files)

            def attempt(part: list[ProblemFiles], where: Path, hidden: bool = hidden,
                        index: int = index) -> dict[str, RunResults]:
                outcomes, errors, costs_ = run_phase(
                    part, template, cpu_budgets, hidden=hidden, run=where,
                    progress=opts.progress, on_problem=lambda name, res: grading.arrived(index, name, res))
                result.notes.extend(e for e in errors if e not in result.notes)
                result.costs.extend(costs_)
                for name, res in outcomes.items():  # the phase's results, once its process has ended
                    grading.arrived(index, name, res)
                return outcomes

            # A problem whose modules did not import in an earlier phase runs no more phases.
            cut = [pf for pf in part if pf.problem.name in grading.import_errors()]
            for pf in cut:
                grading.arrived(index, pf.problem.name, RunResults())
            part = [pf for pf in part if pf not in cut]
            if not part:
                continue
            first = attempt(part, run / f"phase-{index}")
            faulty = [pf for pf in part if _grader_error(first.get(pf.problem.name, RunResults()), pf.problem.name)]
            if faulty:
                names = [pf.problem.name for pf in faulty]
                if opts.progress is not None:
                    opts.progress.note(f"regrading {', '.join(names)} alone, after a grader error")
                again = attempt(faulty, run / f"phase-{index}-regrade")
                for name in names:
                    outcome = "still a grader error" if _grader_error(again.get(name, RunResults()), name) else "graded"
                    result.notes.append(f"{name}: regraded alone after a grader error: {outcome}")
        grading.finish()
        result.import_errors = _import_errors({**not_imported, **grading.import_errors()}, result)
        _record_seccomp(grading.outcomes(), result, sandbox)
        if speed_note and any(p.not_run for p in result.problems):  # a budget was spent: its size matters
            result.notes.append(speed_note)
    finally:
        try:
            remove_tree(run)
        except OSError as e:  # never a crash: the result stands, the instructor is told
            result.notes.append(f"the grader could not remove its temporary folder {run}: {e}")
    result.wall_time = round(time.monotonic() - start, 3)
    result.engine_cpu = round(time.process_time(), 3)
    strip_controls(result)
    return total(result, _execution_time(start))


def _execution_time(start: float) -> float:
    """The seconds since ``start``, in whole seconds: what the reports give as
    the run's time (``execution_time``; the JUnit suite's time).

    Whole seconds because the submission steers how long its hidden checks take:
    the duration of the whole run is what every platform already shows a
    student (when the result arrives; a CI job's duration), no finer."""
    return float(round(time.monotonic() - start))


def _update(opts: Options, result: GradeResult, start: float) -> None:
    """Tell ``opts.on_update`` the result as it stands (the reports are rewritten
    from it), its ``execution_time`` the seconds until now."""
    if opts.on_update is None:
        return
    total(result, _execution_time(start))
    opts.on_update(result)


def _grader_error(res: RunResults, name: str) -> bool:
    """Whether one phase's results of problem ``name`` end in a grader error
    (which only facts from outside the worker establish: its process died, its
    record names a fault of the machine, a check could not be collected)."""
    record = res.problems.get(name)
    return (res.fatal or (record is not None and bool(record.fault))
            or any(c.outcome in (GRADER_ERROR, COLLECT_ERROR) for c in res.checks.values()
                   if c.problem in (name, "")))


class _Grading:
    """One grade's problems as their phases' results arrive (from reader
    threads): each problem is scored once its last phase has sent its
    results, and the reports are rewritten after each."""

    def __init__(self, opts: Options, result: GradeResult, selected: list[rubric_mod.Problem],
                 check_files: dict[str, tuple[str, ...]], gpu_device: str, reveal: bool, start: float) -> None:
        self.opts, self.result, self.gpu_device, self.reveal = opts, result, gpu_device, reveal
        self.details = opts.feedback.details
        self.check_files = check_files
        self.start = start
        self.problems = {p.name: p for p in selected}
        self.phases: dict[str, set[int]] = {}  # each problem's phases
        self.hidden: set[int] = set()  # the phases of hidden checks
        self.parts: dict[str, dict[int, RunResults]] = {p.name: {} for p in selected}
        self.lock = threading.Lock()

    def expect(self, phases: list[tuple[set[str], bool]]) -> None:
        """The run's phases: the problems of each, and whether it is one of hidden checks."""
        for i, (names, hidden) in enumerate(phases):
            if hidden:
                self.hidden.add(i)
            for name in names:
                self.phases.setdefault(name, set()).add(i)

    def arrived(self, phase: int, name: str, res: RunResults) -> None:
        """Problem ``name``'s results of ``phase``: they replace any it had
        (its end event's by its process's, an attempt's by a regrade's)."""
        if name not in self.problems:
            return
        with self.lock:
            self.parts[name][phase] = res
            if set(self.parts[name]) >= self.phases.get(name, set()):
                self._score(name)
                _update(self.opts, self.result, self.start)

    def _score(self, name: str) -> None:
        p = self.problems[name]
        parts = [self.parts[name][i] for i in sorted(self.parts[name])]
        merged = problem_results(name, self.check_files[name], parts)
        records = {i in self.hidden: r for i, part in self.parts[name].items() if (r := part.problems.get(name))}
        res = score_problem(p, self.check_files[name], merged, self.gpu_device, self.reveal,
                            public=records.get(False), hidden=records.get(True), details=self.details)
        res.time = round(sum(c.duration for c in res.checks if not c.hidden), 3)
        res.hidden_time = round(sum(c.duration for c in res.checks if c.hidden), 3)
        if merged.fatal and merged.log:
            res.log = merged.log  # the trusted run's output: instructors only
        self.result.problems = [res if q.name == name else q for q in self.result.problems]

    def finish(self) -> None:
        """Score whatever did not arrive (a GPU problem without CUDA, a problem without checks)."""
        with self.lock:
            for name in self.problems:
                if set(self.parts[name]) < self.phases.get(name, set()) or name not in self.phases:
                    self._score(name)

    def import_errors(self) -> dict[str, str]:
        """Each problem a module it needs did not import for (in a worker): where and why."""
        found: dict[str, str] = {}
        with self.lock:
            for name, parts in self.parts.items():
                for i in sorted(parts):  # the first phase's words (a hidden phase's are fixed ones)
                    record = parts[i].problems.get(name)
                    if record is not None and record.import_error:
                        found.setdefault(name, record.import_error)
        return found

    def outcomes(self) -> dict[str, RunResults]:
        return {name: parts[i] for name, parts in self.parts.items() for i in parts}


def _import_errors(by_problem: dict[str, str], result: GradeResult) -> list[str]:
    """One line per module that does not import: where and why, and the
    problems it cost (those not counted here anyway, a GPU problem on a CPU
    machine, are not named)."""
    costs: dict[str, list[str]] = {}
    for p in result.problems:
        if p.name in by_problem and p.status == ERROR:
            costs.setdefault(by_problem[p.name], []).append(p.name)
    return [f"{why}; not graded: {', '.join(names)}" for why, names in costs.items()]


def _record_seccomp(outcomes: dict[str, RunResults], result: GradeResult, sandbox: Sandbox) -> None:
    """The sandbox line with the seccomp state the workers reported at start-up."""
    seccomp = {n: r.seccomp for o in outcomes.values() for n, r in o.problems.items() if r.seccomp}
    if not seccomp:
        return
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe("off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))

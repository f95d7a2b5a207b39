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
from grader.groups import ProblemFiles, group_template, phases, run_phase
from grader.imports import NOT_IMPORTED, needed_modules, problem_modules, static_import_errors
from grader.protocol import COLLECT_ERROR, ProblemRun, WorkerRecord
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
    plan = _plan(submission, opts)
    result = _start_result(plan, opts)
    _update(opts, result, start)
    run = Path(tempfile.mkdtemp(prefix="grader-"))
    if plan.sandbox.mode == "uid":  # the worker's uid reaches its working copy and scratch, lists nothing
        run.chmod(0o711)
    try:
        work = _stage(plan, run, result)
        if work is None:
            result.wall_time = round(time.monotonic() - start, 3)
            return total(result, _execution_time(start))
        not_imported = _not_imported(plan, work, result)
        if not_imported:  # the reports say so at once, not after the first graded problem
            _update(opts, result, start)
        graded = [p for p in plan.selected if p.name not in not_imported]
        grading = _Grading(opts, result, graded, plan.check_files, plan.gpu_device, plan.reveal, start)
        _PhaseRunner(plan, opts, grading, work, run).run(graded)
        _finish(plan, result, grading, not_imported)
    finally:
        try:
            remove_tree(run)
        except OSError as e:  # never a crash: the result stands, the instructor is told
            result.notes.append(f"the grader could not remove its temporary folder {run}: {e}")
    result.wall_time = round(time.monotonic() - start, 3)
    result.engine_cpu = round(time.process_time(), 3)
    strip_controls(result)
    return total(result, _execution_time(start))


@dataclass(frozen=True)
class Plan:
    """What one grade runs, decided before any file of the submission is read."""

    path: Path  # the submission (resolved), or this checkout
    profile: str  # the hypothesis profile
    selected: tuple[rubric_mod.Problem, ...]  # the problems graded, in the rubric's order
    check_files: dict[str, tuple[str, ...]]  # each problem's existing check files that run
    public_only: bool  # no hidden checks run (asked for, the student release, or no filesystem isolation)
    unisolated: bool  # hidden checks dropped because the sandbox has no filesystem isolation
    reveal: bool  # the reports show hidden checks' details
    gpu_device: str  # where GPU problems run: "cuda", "cpu" (standing in for it) or "" (nowhere)
    speed: float  # how many times slower than the machine that measured budgets.toml (>= 1)
    calibration: float  # the CPU seconds measuring ``speed`` took
    configured_memory: int  # the workers' address-space limit asked for (bytes), before fitting this machine
    budgets: Budgets  # each problem's CPU budget on this machine
    sandbox: Sandbox  # its mode and every worker's limits
    seed: int  # the hidden checks' inputs


def _plan(submission: Path | str | None, opts: Options) -> Plan:
    """The grade's :class:`Plan`: the rubric read, the machine's speed
    measured, the sandbox probed; ValueError for bad options."""
    rub = rubric_mod.load(opts.rubric)
    profile = opts.profile or rub.settings.profile
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (one of {', '.join(PROFILES)})")
    selected = _selected(rub, opts.problems)
    public_only = opts.public_only or not hidden_available()
    cuda = cuda_available()
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
    if unisolated:
        check_files = {name: tuple(f for f in files if not is_hidden(f)) for name, files in check_files.items()}
    return Plan(
        path=Path(submission).expanduser().resolve() if submission else REPO, profile=profile,
        selected=tuple(selected), check_files=check_files, public_only=public_only or unisolated,
        unisolated=unisolated, reveal=settings.reveal_hidden if opts.reveal_hidden is None else opts.reveal_hidden,
        # Where the GPU problems run: the CUDA device; without one the CPU when
        # asked to stand in for it (a rehearsal of the GPU pipeline); else nowhere.
        gpu_device="cuda" if cuda else "cpu" if opts.cpu_stand_in else "",
        speed=speed, calibration=calibration, configured_memory=configured, budgets=cpu_budgets, sandbox=sandbox,
        seed=opts.seed if opts.seed is not None else secrets.randbits(32))


def _selected(rub: rubric_mod.Rubric, names: list[str] | None) -> list[rubric_mod.Problem]:
    """The rubric's problems ``names`` names (all of them when it names none),
    in the rubric's order; ValueError for a name the rubric does not have."""
    if not names:
        return list(rub.problems)
    unknown = [p for p in names if p not in {q.name for q in rub.problems}]
    if unknown:
        raise ValueError(f"unknown problems {unknown} (the rubric has {[p.name for p in rub.problems]})")
    return [p for p in rub.problems if p.name in names]


def _start_result(plan: Plan, opts: Options) -> GradeResult:
    """The result before any check runs: the notes about this machine, which
    checks run, and every problem not graded yet (until its last phase has
    run: a grade stopped from outside leaves the points it finished)."""
    result = GradeResult(submission=str(plan.path), profile=plan.profile, sandbox=plan.sandbox.describe(),
                         seed=plan.seed, reveal=plan.reveal, speed=round(plan.speed, 3),
                         calibration_cpu=round(plan.calibration, 3))
    _machine_notes(plan, result)
    result.checks = (STUDENT_RELEASE_CHECKS if not hidden_available() else
                     "public checks only (--public-only)" if opts.public_only else
                     "public checks only (hidden checks need filesystem isolation: bubblewrap or the uid mode)"
                     if plan.unisolated else "public + hidden checks")
    result.problems = [unavailable(p, UNFINISHED, UNFINISHED_TEXT, plan.gpu_device) for p in plan.selected]
    if plan.gpu_device == "cpu" and any(p.gpu for p in plan.selected):
        result.notes.append(STAND_IN_NOTE)
    if opts.feedback.note and not plan.public_only:  # how a limit on probing applies to this submission
        result.notes.append(opts.feedback.note)
    return result


def _machine_notes(plan: Plan, result: GradeResult) -> None:
    """The operator's notes and warnings about this machine: its torch, its
    memory, its speed, and the checks whose reference cost was never measured."""
    limits, configured = plan.sandbox.limits, plan.configured_memory
    if note := torch_support_note():
        result.operator_warnings.append(note)
    if limits.memory_bytes < configured:
        result.operator_notes.append(f"worker memory limit lowered to {limits.memory_bytes / (1 << 30):.1f} GiB "
                                     f"(from {configured / (1 << 30):g} GiB) to fit this machine's free memory")
    if speed_note := _speed_note(plan.speed):
        result.operator_notes.append(speed_note)
    needed = grade_memory(limits)
    if memory_available() < needed:
        result.operator_warnings.append(
            f"this machine has {memory_available() >> 20} MiB of memory free, and a grade may need {needed >> 20} "
            f"MiB (a worker is promised {limits.growth_bytes >> 20} MiB): a worker the kernel kills for memory "
            "is a grader error here, not the submission's (docs/instructors.md: the memory to give a grader)")
    unmeasured = [p.name for p in plan.selected if not p.gpu and p.cpu_budget is None
                  and plan.budgets.of(p, plan.check_files[p.name])[2]]
    if unmeasured:  # (names problems, never check files: the hidden ones' names are not the students')
        result.operator_notes.append(
            f"no measured reference cost for some checks of {', '.join(unmeasured)} in the {plan.profile} profile: "
            "their budgets are generous guesses (instructors: python -m grader calibrate)")


def _speed_note(speed: float) -> str:
    """What a grade says of a machine slower than the one that measured the
    reference's costs ("" for one about as fast)."""
    return (f"this machine runs the calibration workload {speed:.2f} times slower than the one the "
            "reference's costs were measured on: every CPU budget is that much larger") if speed > 1.05 else ""


def _stage(plan: Plan, run: Path, result: GradeResult) -> Path | None:
    """The submission's working copy, made in ``run``; None when its files
    cannot be unpacked or copied (``result`` then says why, for every problem)."""
    try:
        folder = locate(plan.path, run / "unpacked")
        work = make_working_copy(folder / "student", run / "work")
        if plan.sandbox.mode == "uid" and (run / "unpacked").exists():  # the worker reads its working copy only
            (run / "unpacked").chmod(0o700)
        return work
    except Exception as e:  # whatever a submission's files do, it gets a result
        why = str(e) if isinstance(e, SubmissionError) else \
            f"its files could not be unpacked or copied ({type(e).__name__}: {e})"
        result.error = printable(why)[:1000]
        result.problems = [unavailable(p, ERROR, f"not graded: {result.error}", plan.gpu_device)
                           for p in plan.selected]
        return None


def _not_imported(plan: Plan, work: Path, result: GradeResult) -> dict[str, str]:
    """The problems a module they need does not compile for (or is not there),
    found before any check runs, with why: they are errors in ``result`` and
    are not run (grader/imports.py)."""
    student = work / "student"
    broken = static_import_errors(student, {m for p in plan.selected for m in problem_modules(p.name)})
    not_imported = {p.name: broken[m] for p in plan.selected
                    for m in sorted(needed_modules(p.name, student) & set(broken))[:1]}
    for p in plan.selected:
        if p.name in not_imported:
            result.problems = [unavailable(p, ERROR, f"{NOT_IMPORTED} ({not_imported[p.name]})", plan.gpu_device)
                               if q.name == p.name else q for q in result.problems]
    if not_imported:
        result.import_errors = _import_errors(not_imported, result)
    return not_imported


class _PhaseRunner:
    """A grade's phases, in order, each one trusted pytest process; the
    problems of a phase that ended in a grader error are regraded alone,
    once, before the next phase starts. ``grading`` gets every problem's
    results as they come; ``work`` is the working copy, ``folder`` the run's."""

    def __init__(self, plan: Plan, opts: Options, grading: _Grading, work: Path, folder: Path) -> None:
        self.plan, self.opts, self.grading, self.folder = plan, opts, grading, folder
        self.result = grading.result
        self.template = group_template(plan.path, work, plan.profile, plan.sandbox, seed=plan.seed,
                                       stand_in=plan.gpu_device == "cpu")

    def run(self, graded: list[rubric_mod.Problem]) -> None:
        """Run the phases of the ``graded`` problems."""
        all_phases = phases(graded, self.plan.check_files, gpu_device=self.plan.gpu_device)
        hidden = [any(is_hidden(f) for _, files in part for f in files) for part in all_phases]
        self.grading.expect([{p.name for p, _ in part} for part in all_phases])
        for index, part in enumerate(all_phases):
            # A problem whose modules did not import in an earlier phase runs no more phases.
            cut = [pf for pf in part if pf.problem.name in self.grading.import_errors()]
            for pf in cut:
                self.grading.arrived(index, pf.problem.name, ProblemRun(pf.problem.name, hidden[index]))
            part = [pf for pf in part if pf not in cut]
            if not part:
                continue
            first = self._attempt(index, part, self.folder / f"phase-{index}", hidden[index])
            faulty = [pf for pf in part if _grader_error(first[pf.problem.name])]
            if faulty:
                self._regrade(index, faulty, hidden[index])

    def _attempt(self, index: int, part: list[ProblemFiles], where: Path, hidden: bool) -> dict[str, ProblemRun]:
        """Run ``part`` of phase ``index`` (its files ``hidden`` checks or not)
        in one trusted pytest process in the folder ``where``; each problem's
        results go to the grading (as they come, then once the process has
        ended) and are returned."""
        ran = run_phase(
            part, self.template, self.plan.budgets, hidden=hidden, run=where, progress=self.opts.progress,
            on_problem=lambda name, res: self.grading.arrived(index, name, res))
        if ran.error and ran.error not in self.result.notes:
            self.result.notes.append(ran.error)
        if ran.cost is not None:
            self.result.costs.append(ran.cost)
        for name, res in ran.runs.items():  # the phase's results, once its process has ended
            self.grading.arrived(index, name, res)
        return ran.runs

    def _regrade(self, index: int, faulty: list[ProblemFiles], hidden: bool) -> None:
        """Run phase ``index``'s ``faulty`` problems again, alone; the notes say how that went."""
        names = [pf.problem.name for pf in faulty]
        if self.opts.progress is not None:
            self.opts.progress.note(f"regrading {', '.join(names)} alone, after a grader error")
        again = self._attempt(index, faulty, self.folder / f"phase-{index}-regrade", hidden)
        for name in names:
            outcome = "still a grader error" if _grader_error(again[name]) else "graded"
            self.result.notes.append(f"{name}: regraded alone after a grader error: {outcome}")


def _finish(plan: Plan, result: GradeResult, grading: _Grading, not_imported: dict[str, str]) -> None:
    """Score what did not arrive, then what needs every phase: the modules
    that did not import, the workers' seccomp state, and this machine's speed
    where a budget was spent (its size then matters)."""
    grading.finish()
    result.import_errors = _import_errors({**not_imported, **grading.import_errors()}, result)
    _record_seccomp(grading.outcomes(), result, plan.sandbox)
    if (speed_note := _speed_note(plan.speed)) and any(p.not_run for p in result.problems):
        result.notes.append(speed_note)


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


def _grader_error(run: ProblemRun) -> bool:
    """Whether one phase's run of a problem ends in a grader error
    (which only facts from outside the worker establish: its process died, its
    record names a fault of the machine, a check could not be collected)."""
    return (bool(run.lost) or (run.worker is not None and bool(run.worker.fault))
            or any(c.outcome in (GRADER_ERROR, COLLECT_ERROR) for c in run.checks if c.problem in (run.problem, "")))


class _Grading:
    """One grade's problems as their phases' runs arrive (from reader
    threads): each problem is scored once its last phase has sent its
    run, and the reports are rewritten after each."""

    def __init__(self, opts: Options, result: GradeResult, selected: list[rubric_mod.Problem],
                 check_files: dict[str, tuple[str, ...]], gpu_device: str, reveal: bool, start: float) -> None:
        self.opts, self.result, self.gpu_device, self.reveal = opts, result, gpu_device, reveal
        self.details = opts.feedback.details
        self.check_files = check_files
        self.start = start
        self.problems = {p.name: p for p in selected}
        self.phases: dict[str, set[int]] = {}  # each problem's phases
        self.parts: dict[str, dict[int, ProblemRun]] = {p.name: {} for p in selected}  # each problem's, by phase
        self.lock = threading.Lock()

    def expect(self, phases: list[set[str]]) -> None:
        """The run's phases: the problems of each."""
        for i, names in enumerate(phases):
            for name in names:
                self.phases.setdefault(name, set()).add(i)

    def arrived(self, phase: int, name: str, run: ProblemRun) -> None:
        """Problem ``name``'s run of ``phase``: it replaces any it had
        (a lost one by its process's, an attempt's by a regrade's); the same run
        again (its end event's, then its process's) is scored once."""
        if name not in self.problems:
            return
        with self.lock:
            if self.parts[name].get(phase) is run:
                return
            self.parts[name][phase] = run
            if set(self.parts[name]) >= self.phases.get(name, set()):
                self._score(name)
                _update(self.opts, self.result, self.start)

    def _score(self, name: str) -> None:
        p = self.problems[name]
        runs = [self.parts[name][i] for i in sorted(self.parts[name])]
        res = score_problem(p, self.check_files[name], runs, self.gpu_device, self.reveal, details=self.details)
        res.time = round(sum(c.duration for c in res.checks if not c.hidden), 3)
        res.hidden_time = round(sum(c.duration for c in res.checks if c.hidden), 3)
        if log := next((r.log for r in runs if r.lost and r.log), ""):
            res.log = log  # the trusted run's output: instructors only
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
                    record = parts[i].worker
                    if record is not None and record.import_error:
                        found.setdefault(name, record.import_error)
        return found

    def outcomes(self) -> dict[str, list[ProblemRun]]:
        """Each problem's runs, in phase order."""
        with self.lock:
            return {name: [parts[i] for i in sorted(parts)] for name, parts in self.parts.items()}


def _import_errors(by_problem: dict[str, str], result: GradeResult) -> list[str]:
    """One line per module that does not import: where and why, and the
    problems it cost (those not counted here anyway, a GPU problem on a CPU
    machine, are not named)."""
    costs: dict[str, list[str]] = {}
    for p in result.problems:
        if p.name in by_problem and p.status == ERROR:
            costs.setdefault(by_problem[p.name], []).append(p.name)
    return [f"{why}; not graded: {', '.join(names)}" for why, names in costs.items()]


def _record_seccomp(outcomes: dict[str, list[ProblemRun]], result: GradeResult, sandbox: Sandbox) -> None:
    """The sandbox line with the seccomp state the workers reported at start-up
    (a problem's is "on" where every phase's was)."""
    records = {name: [r.worker for r in runs if r.worker is not None] for name, runs in outcomes.items()}
    seccomp = {name: state.seccomp for name, found in records.items()
               if found and (state := WorkerRecord.combine(found)).seccomp}
    if not seccomp:
        return
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe("off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))

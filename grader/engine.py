"""Grading one submission: a trusted pytest run over sandboxed workers, then scores.

The engine never imports the submission. It copies the submission's
``student/`` into a fresh working copy (:mod:`grader.sandbox`), then runs
trusted pytest processes (the public test file and the hidden checks of the
selected problems) with :mod:`grader.plugin`, which routes every call of the
tests to one sandboxed worker per problem and sends the outcomes back over a
pipe. The problems (a heavy one split into its check files) are split into K
groups run concurrently, one trusted pytest process each (its own plan,
results pipe and scratch folder), with K = min(cores, check files, memory
slots of :func:`grader.sandbox.worker_slots`) or ``Options.parallel``; each
problem is scored from its groups' results, merged in its files' order.
Verdicts and points are computed here, from the rubric: each check counts
toward one item of its problem (:meth:`grader.rubric.Problem.items_of`), an item
earns its points when all its checks pass, and a problem's score is the sum of
its items'. Each failed item carries its first failure as structured fields
(:class:`Failure`), which the reports render.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader import rubric as rubric_mod
from grader.remote import LOG_CAP
from grader.rubric import Item, Problem, Rubric, function_name, is_hidden
from grader.sandbox import (
    Limits,
    Sandbox,
    SubmissionError,
    fitted_memory_limit,
    make_working_copy,
    printable,
    remove_tree,
    worker_slots,
)
from grader.submission import locate

REPO = Path(__file__).resolve().parent.parent

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
NOT_RUN_GPU, NO_CHECKS = "not run on a GPU", "no checks"
STUDENT_RELEASE_CHECKS = (
    "public checks only (this is the student release); the course's grader also runs hidden checks "
    "that extend these public tests with more and larger inputs")
_IMPORT_ERRORS = {"remote:SyntaxError", "remote:ImportError", "remote:ModuleNotFoundError",
                  "remote:IndentationError", "remote:SystemExit"}


@dataclass
class Check:
    test: str
    outcome: str  # passed | failed | error | skipped | collect-error
    message: str = ""
    example: str = ""
    hidden: bool = False
    gpu: bool = False
    exceptions: list[str] = field(default_factory=list)
    duration: float = 0.0  # seconds, setup to teardown, on the trusted side's clock
    extends: str = ""  # hidden checks: the public test (node id, no parameters) this one extends
    input_kind: dict[str, str] = field(default_factory=dict)  # hidden checks: the kind of input, never values
    item: str = ""  # the rubric item it counts toward ("" when it maps to none or several: all items)


@dataclass
class Failure:
    """The first failure of an item, as fields (reports render them; nothing parses text).

    Every field is computed on the trusted side: the check's node id, the
    rubric, the public tests' source (the property: the first paragraph of the
    docstring of the public test, or of the public test a hidden check
    extends), the hidden check's declared input kind, and the assertion
    message of the trusted test process. ``message`` and ``example`` are empty
    for a hidden check unless revealed (they may hold the hidden inputs).
    """

    test: str  # node id; for a withheld hidden check, its function name only
    hidden: bool
    outcome: str
    property_test: str = ""  # the public test (node id, no parameters) stating the property
    property: str = ""  # that test's docstring summary
    input_kind: dict[str, str] = field(default_factory=dict)
    parameters: list[str] = field(default_factory=list)  # word-like pytest parametrize ids (e.g. "Adam")
    message: str = ""
    example: str = ""
    reproduce: str = ""  # a pytest command line for the public test
    withheld: bool = False


@dataclass
class ItemResult:
    name: str
    score: float
    max_score: float
    status: str  # passed | failed | error | timeout | not run on a GPU | no checks
    checks: int = 0  # how many of its checks ran
    failed: int = 0  # how many of those did not pass
    failure: Failure | None = None
    note: str = ""  # why it was not credited (a gate, the grader's own trouble)


@dataclass
class ProblemResult:
    name: str
    section: str
    score: float
    max_score: float
    status: str
    visibility: str
    output: str
    checks: list[Check] = field(default_factory=list)
    log: str = ""
    time: float = 0.0  # seconds: the sum of its checks' durations (trusted side)
    items: list[ItemResult] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)  # checks no single item holds (they count toward all)


@dataclass
class GradeResult:
    submission: str
    score: float = 0.0
    max_score: float = 0.0
    gpu_points_not_run: float = 0.0
    execution_time: float = 0.0
    sandbox: str = ""
    profile: str = ""
    problems: list[ProblemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""
    checks: str = ""  # which checks ran: public + hidden, or public only and why
    points_without_checks: float = 0.0
    seed: int = 0  # the hidden checks' seed (instructors only: --seed replays this grade)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


#: Seconds each check file took on the reference (grade profile, trusted
#: side's clock, a loaded 2-core machine; only the ratios matter): used only to
#: balance the groups run in parallel, never for a verdict. A file not listed
#: weighs its problem's time limit / 40.
EXPECTED_SECONDS = {
    "grader/hidden/test_optimizers_hidden.py": 140.0, "tests/test_training.py": 35.0,
    "grader/hidden/test_training_hidden.py": 26.0, "tests/test_optimizers.py": 23.0,
    "grader/hidden/test_einops_ops_hidden.py": 6.0, "grader/hidden/test_data_hidden.py": 5.5,
    "tests/test_data.py": 4.6, "grader/hidden/test_model_hidden.py": 3.2, "tests/test_flops.py": 3.2,
    "tests/test_precision.py": 3.1, "tests/test_memory.py": 2.7, "tests/test_einops_ops.py": 2.5,
    "tests/test_views.py": 2.2, "tests/test_model.py": 2.1, "grader/hidden/test_precision_hidden.py": 1.3,
    "grader/hidden/test_views_hidden.py": 1.2, "grader/hidden/test_flops_hidden.py": 1.1,
    "grader/hidden/test_memory_hidden.py": 0.8,
}

#: What the groups are made of: a problem with some of its check files (all of
#: them, unless the problem alone outweighs a group's fair share).
Unit = tuple[Problem, tuple[str, ...]]


def file_cost(p: Problem, f: str) -> float:
    return EXPECTED_SECONDS.get(f, p.time_limit / 40)


def units_of(planned: list[tuple[Problem, list[str]]], k: int) -> list[Unit]:
    """Whole problems (one worker each), except that a problem heavier than
    1/k of the total is split into its files (a second worker start is cheaper
    than one group waiting on it)."""
    total = sum(file_cost(p, f) for p, files in planned for f in files)
    out: list[Unit] = []
    for p, files in planned:
        if k > 1 and len(files) > 1 and sum(file_cost(p, f) for f in files) > total / k:
            out += [(p, (f,)) for f in files]
        else:
            out.append((p, tuple(files)))
    return out


def cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def parallelism(n_units: int, memory_bytes: int, requested: int | None = None) -> int:
    """K, the groups run at once: ``requested`` (when given) or the cores, never
    more than the check files nor the memory slots (each group has one worker at a
    time under ``memory_bytes``, plus its warm spare)."""
    want = requested if requested and requested > 0 else cores()
    return max(1, min(want, n_units, worker_slots(memory_bytes)))


def partition(units: list[Unit], k: int) -> list[list[Unit]]:
    """``units`` in ``k`` groups of about equal expected time (longest first,
    each to the lightest group). Within a group, the rubric's order is kept."""
    groups: list[list[Unit]] = [[] for _ in range(max(1, k))]
    load = [0.0] * len(groups)

    def cost(u: Unit) -> float:
        return sum(file_cost(u[0], f) for f in u[1])

    for u in sorted(units, key=lambda u: -cost(u)):  # stable: ties keep the rubric's order
        i = min(range(len(groups)), key=lambda j: (load[j], j))
        groups[i].append(u)
        load[i] += cost(u)
    order = {(p.name, f): i for i, (p, f) in enumerate(units)}
    return [sorted(g, key=lambda u: order[(u[0].name, u[1])]) for g in groups if g]


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def hidden_available() -> bool:
    """Whether this checkout holds the reference and the hidden checks (instructors)."""
    return (REPO / "reference" / "__init__.py").is_file() and (REPO / "grader" / "hidden").is_dir()


def grade(submission: Path | str | None, options: Options | None = None) -> GradeResult:
    """Grade ``submission`` (a folder or zip holding ``student/``; None: this repo's)."""
    opts = options or Options()
    rub = rubric_mod.load(opts.rubric)
    profile = opts.profile or rub.settings.profile
    if profile not in rubric_mod.PROFILES:
        raise ValueError(f"unknown profile {profile!r} (one of {', '.join(rubric_mod.PROFILES)})")
    selected = list(rub.problems)
    if opts.problems:
        unknown = [p for p in opts.problems if p not in {q.name for q in rub.problems}]
        if unknown:
            raise ValueError(f"unknown problems {unknown} (the rubric has {[p.name for p in rub.problems]})")
        selected = [p for p in rub.problems if p.name in opts.problems]
    public_only = opts.public_only or not hidden_available()
    reveal = rub.settings.reveal_hidden if opts.reveal_hidden is None else opts.reveal_hidden
    path = Path(submission).expanduser().resolve() if submission else REPO
    cuda = _cuda_available()
    configured = int((opts.memory_limit_gib or rub.settings.memory_limit_gib) * (1 << 30))
    limits = Limits(memory_bytes=fitted_memory_limit(configured), cpu_seconds=int(rub.settings.cpu_limit_seconds))
    sandbox = Sandbox(limits=limits, gpu=cuda, want=opts.sandbox)
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    result = GradeResult(submission=str(path), profile=profile, sandbox=sandbox.describe(), seed=seed)
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
            result.problems = [_unavailable(p, ERROR, f"not graded: {result.error}", cuda) for p in selected]
            return _total(result, time.monotonic() - start)
        outcomes, errors = _run_groups(rub, selected, opts, profile, public_only, sandbox, work, run, path,
                                       seed)
    finally:
        try:
            remove_tree(run)
        except OSError as e:  # never a crash: the result stands, the instructor is told
            result.notes.append(f"the grader could not remove its temporary folder {run}: {e}")
    result.execution_time = time.monotonic() - start
    seccomp = {n: s["seccomp"] for o in outcomes.values() for n, s in o["problems"].items() if s.get("seccomp")}
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe(None if not seccomp else "off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))
    result.notes += errors
    repro = str(path) if path.is_dir() else "FOLDER_HOLDING_YOUR_student"
    for p in selected:
        own = outcomes.get(p.name, {"tests": {}, "problems": {}})
        result.problems.append(_timed(_score(p, own, cuda, public_only, reveal, repro), own))
        if own.get("fatal") and own.get("log"):
            result.problems[-1].log = own["log"]  # the trusted run's output: instructors only
    _strip_controls(result)
    return _total(result, result.execution_time)


def _strip_controls(result: GradeResult) -> None:
    """No terminal escape sequence of a submission's messages reaches a report or a terminal."""
    result.notes = [printable(n) for n in result.notes]
    result.error = printable(result.error)
    for p in result.problems:
        p.output, p.log = printable(p.output), printable(p.log)
        for c in p.checks:
            c.message, c.example = printable(c.message), printable(c.example)
        for i in p.items:
            if i.failure is not None:
                i.failure.message, i.failure.example = printable(i.failure.message), printable(i.failure.example)


def _timed(res: ProblemResult, outcome: dict[str, Any]) -> ProblemResult:
    """Fill in the checks' durations and the problem's time from the plugin's records."""
    tests = outcome.get("tests", {})
    for c in res.checks:
        c.duration = float(tests.get(c.test, {}).get("duration", 0.0))
    res.time = round(sum(c.duration for c in res.checks), 3)
    return res


def _unavailable(p: Problem, status: str, output: str, cuda: bool) -> ProblemResult:
    if p.gpu and not cuda:
        status, output = NOT_RUN_GPU, f"{p.name} needs a CUDA device; this machine has none, so it was not run"
    return ProblemResult(p.name, p.section, 0.0, p.points, status, p.visibility, output,
                         items=[ItemResult(i.name, 0.0, i.points, status, note=output) for i in p.items])


def _total(result: GradeResult, elapsed: float) -> GradeResult:
    result.execution_time = round(elapsed, 3)
    result.score = sum(p.score for p in result.problems)
    result.max_score = sum(p.max_score for p in result.problems if p.status not in (NOT_RUN_GPU, NO_CHECKS))
    result.gpu_points_not_run = sum(p.max_score for p in result.problems if p.status == NOT_RUN_GPU) + sum(
        i.max_score for p in result.problems if p.status != NOT_RUN_GPU for i in p.items if i.status == NOT_RUN_GPU)
    result.points_without_checks = sum(p.max_score for p in result.problems if p.status == NO_CHECKS)
    return result


def _merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """One problem's worker record from the groups that ran its files."""
    if len(states) == 1:
        return states[0]
    seccomp = [st["seccomp"] for st in states if st.get("seccomp")]
    log = "".join(st.get("log", "") for st in states)
    return {
        "calls": sum(int(st.get("calls", 0)) for st in states),
        "crashes": [c for st in states for c in st.get("crashes", [])],
        "timeout": "; ".join(st["timeout"] for st in states if st.get("timeout")),
        "seccomp": next((v for v in seccomp if v != "on"), seccomp[0] if seccomp else ""),
        # One problem's log stays within one worker's cap, however many groups ran it.
        "log": log[:LOG_CAP],
        "log_dropped": sum(int(st.get("log_dropped", 0)) for st in states) + max(0, len(log) - LOG_CAP),
        "started": any(st.get("started") for st in states),
    }


def _problem_outcome(name: str, files: list[str], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The results ``_score`` reads for problem ``name``, from its groups' results,
    its checks in the order one process would have run them (its files' order)."""
    out: dict[str, Any] = {"tests": {}, "problems": {}}
    tests = [item for o in parts for item in o.get("tests", {}).items()]
    rank = {f: i for i, f in enumerate(files)}
    out["tests"] = dict(sorted(tests, key=lambda kv: rank.get(kv[1].get("file", ""), len(files))))
    for o in parts:
        if o.get("fatal"):
            out.update(fatal=True, error=o.get("error", ""), log=o.get("log", ""))
    states = [o["problems"][name] for o in parts if name in o.get("problems", {})]
    if states:
        out["problems"][name] = _merge_states(states)
    return out


def _run_groups(rub: Rubric, selected: list[Problem], opts: Options, profile: str, public_only: bool,
                sandbox: Sandbox, work: Path, run: Path,
                path: Path, seed: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Run the selected problems' check files in K concurrent trusted pytest
    processes; return each planned problem's results (a problem absent was not
    run) and the groups' errors."""
    planned = [(p, p.check_files(REPO, public_only=public_only)) for p in selected]
    planned = [(p, files) for p, files in planned if files and not (p.gpu and not sandbox.gpu)]
    if not planned:
        return {}, []
    k = parallelism(sum(len(files) for _, files in planned), sandbox.limits.memory_bytes, opts.parallel)
    groups = partition(units_of(planned, k), k)
    threads = max(1, cores() // len(groups))  # torch threads per process: the groups share the cores
    results: list[dict[str, Any]] = [{} for _ in groups]
    failures: list[BaseException] = []

    def one(i: int) -> None:
        plan: dict[str, tuple[Problem, list[str]]] = {}
        for p, fs in groups[i]:
            plan.setdefault(p.name, (p, []))[1].extend(fs)
        try:
            results[i] = _run_pytest(rub, list(plan.values()), opts, profile, sandbox, work, run / f"group-{i}",
                                     path, threads, seed)
        except BaseException as e:  # re-raised below, in the caller's thread
            failures.append(e)

    if len(groups) == 1:
        one(0)
    else:
        runners = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(groups))]
        for t in runners:
            t.start()
        for t in runners:
            t.join()
    if failures:
        raise failures[0]
    per_problem = {p.name: _problem_outcome(p.name, files, [results[i] for i, g in enumerate(groups)
                                                     if any(q.name == p.name for q, _ in g)])
                   for p, files in planned}
    return per_problem, [r["error"] for r in results if r.get("error")]


def _run_pytest(rub: Rubric, planned: list[tuple[Problem, list[str]]], opts: Options, profile: str,
                sandbox: Sandbox, work: Path, run: Path, path: Path, threads: int, seed: int) -> dict[str, Any]:
    """Run one trusted pytest process over ``planned``; return the plugin's results (or an error)."""
    run.mkdir(parents=True, exist_ok=True)
    scratch = run / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    time_limit = {p.name: float(opts.time_limit or p.time_limit) for p, _ in planned}
    read_fd, write_fd = os.pipe()
    plan = {
        "name": str(path), "repo": str(REPO), "work": str(work), "scratch": str(scratch), "profile": profile,
        "problems": [{"name": p.name, "time_limit": time_limit[p.name], "files": files, "processes": p.processes}
                     for p, files in planned],
        "sandbox": {"mode": sandbox.mode, "gpu": sandbox.gpu, "limits": asdict(sandbox.limits)},
        "call_timeout": float(opts.call_timeout or rub.settings.call_timeout),
        "start_timeout": float(rub.settings.start_timeout), "results_fd": write_fd, "seed": seed,
        # GPU problems hold the device's lock (grader/gpulock.py, taken by grader/plugin.py)
        "gpu_problems": [p.name for p, _ in planned if p.gpu],
    }
    (run / "plan.json").write_text(json.dumps(plan))
    files = [f for _, fs in planned for f in fs]
    argv = [sys.executable, "-m", "pytest", *files, "-p", "grader.plugin", "-q", "--no-header",
            "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--rootdir", str(REPO),
            "-c", str(REPO / "pyproject.toml"), f"--basetemp={scratch / 'pytest'}",
            "--hypothesis-profile", profile, "--tb=no", "-o", "console_output_style=classic",
            f"--timeout={int(max(time_limit.values()) + rub.settings.start_timeout + 60)}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRADER_", "HYPOTHESIS_"))}
    env.update(GRADER_PLAN=str(run / "plan.json"), HYPOTHESIS_PROFILE=profile,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("OMP_NUM_THREADS", str(threads))  # an instructor's explicit setting wins
    chunks: list[bytes] = []

    def collect() -> None:
        with os.fdopen(read_fd, "rb") as f:
            while chunk := f.read(1 << 16):
                chunks.append(chunk)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    hard_limit = sum(time_limit.values()) + rub.settings.start_timeout + 120
    if plan["gpu_problems"]:  # waiting for another grading's GPU problem is not this run hanging
        from grader.gpulock import WAIT_SECONDS

        hard_limit += WAIT_SECONDS
    try:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        os.close(write_fd)
    try:
        out, _ = proc.communicate(timeout=hard_limit)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        killed = True
    reader.join(timeout=30)
    text = out.decode("utf-8", "replace")
    try:
        results = json.loads(b"".join(chunks)) if chunks else None
    except ValueError:
        results = None
    if results is None:
        why = (f"the grader's test run ran past {hard_limit:g} s and was stopped" if killed
               else f"the grader's test run ended without results (exit {proc.returncode})")
        # Its output may hold what the submission said (failure messages of
        # hidden checks): it goes to the instructors' log, never to "error".
        return {"tests": {}, "problems": {}, "error": why, "log": text[-3000:], "fatal": True}
    return results


def _score(p: Problem, outcome: dict[str, Any], cuda: bool, public_only: bool, reveal: bool,
           repro: str) -> ProblemResult:
    files = p.check_files(REPO, public_only=public_only)
    if not files:
        why = f"no check files yet ({', '.join(p.checks)}): not graded"
        return ProblemResult(p.name, p.section, 0.0, p.points, NO_CHECKS, p.visibility, why,
                             items=[ItemResult(i.name, 0.0, i.points, NO_CHECKS, note=why) for i in p.items])
    if p.gpu and not cuda:
        return _unavailable(p, NOT_RUN_GPU, "", cuda)
    if outcome.get("fatal"):
        return _unavailable(p, ERROR, outcome.get("error", "the grader failed")[:3000], cuda)
    state = outcome.get("problems", {}).get(p.name, {})
    checks, collect_errors = [], []
    for nodeid, t in outcome.get("tests", {}).items():
        if t["outcome"] == "collect-error" and any(t["file"].startswith(f) for f in files):
            collect_errors.append(f"{t['file']}: {t['message']}")
        elif t["problem"] == p.name:
            c = Check(nodeid, t["outcome"], t["message"], t["example"], is_hidden(t["file"]), t["gpu"],
                      t["exceptions"], extends=_extends(t.get("extends")),
                      input_kind=_input_kind(t.get("input_kind")))
            found = p.items_of(c.test, c.extends)
            c.item = found[0].name if len(found) == 1 else ""
            checks.append(c)
    log = state.get("log", "") + (f"\n[... {state['log_dropped']} more bytes of output dropped]"
                                  if state.get("log_dropped") else "")
    res = ProblemResult(p.name, p.section, 0.0, p.points, FAILED, p.visibility, "", checks, log)
    if collect_errors:
        why = "the grader could not load its checks (not your fault):\n" + "\n".join(collect_errors)[:3000]
        res.status, res.output = ERROR, why
        res.items = [ItemResult(i.name, 0.0, i.points, ERROR, note="the grader could not load its checks")
                     for i in p.items]
        return res
    res.items = [_score_item(i, [c for c in checks if c.item in (i.name, "")], reveal, repro) for i in p.items]
    for spec, gate in zip(p.items, res.items, strict=True):
        if spec.gate and gate.status != PASSED:
            for other in res.items:
                if other is not gate and other.score:
                    other.score, other.note = 0.0, f"not credited: it needs \"{gate.name}\", which did not pass"
    not_run = [i for i in res.items if i.status == NOT_RUN_GPU]
    res.max_score = p.points - sum(i.max_score for i in not_run)
    res.score = sum(i.score for i in res.items)
    ran = [c for c in checks if c.outcome != "skipped"]
    gpu_skipped = [c for c in checks if c.outcome == "skipped" and c.gpu]
    failed = [c for c in ran if c.outcome != PASSED]
    n_pub, n_hid = sum(not c.hidden for c in ran), sum(c.hidden for c in ran)
    counts = f"{len(ran)} checks ({n_pub} public, {n_hid} hidden)"
    note = f"; {len(gpu_skipped)} GPU checks not run on this machine" if gpu_skipped else ""
    unmapped = res.unmapped = sorted({function_name(c.test) for c in checks if not c.item})
    if not checks:
        res.status, res.output = ERROR, "no checks were collected for this problem"
        return res
    if len(not_run) == len(res.items):
        res.status, res.max_score = NOT_RUN_GPU, p.points
        res.output = f"all {len(gpu_skipped)} checks need a CUDA device: not run"
        return res
    if all(i.status in (PASSED, NOT_RUN_GPU) for i in res.items) and res.score == res.max_score:
        res.status, res.output = PASSED, f"passed all {counts}{note}"
        return res
    names = {n for c in failed for n in c.exceptions}
    if state.get("timeout"):
        res.status = TIMEOUT
    elif state.get("crashes") or names & _IMPORT_ERRORS:
        res.status = ERROR
    lines = [f"{len(failed)} of {counts} failed{note}; {_fmt(res.score)} of {_fmt(res.max_score)} points."]
    if state.get("timeout"):
        lines.append(f"Timeout: {state['timeout']}")
    if state.get("crashes"):
        lines.append(f"The worker crashed: {state['crashes'][0][:1500]}")
    if unmapped:
        lines.append(f"Checks the rubric maps to no single item (they count toward every item): {', '.join(unmapped)}")
    for i in res.items:
        if i.score < i.max_score and i.status != NOT_RUN_GPU:
            lines.append(item_text(i))
    res.output = "\n".join(lines)
    return res


def _score_item(item: Item, checks: list[Check], reveal: bool, repro: str) -> ItemResult:
    """An item earns its points when every check of it that ran passed (and one ran)."""
    ran = [c for c in checks if c.outcome != "skipped"]
    failed = [c for c in ran if c.outcome != PASSED]
    res = ItemResult(item.name, 0.0, item.points, FAILED, len(ran), len(failed))
    if not ran:
        if any(c.gpu for c in checks):
            res.status, res.note = NOT_RUN_GPU, "its checks need a CUDA device: not run"
        else:
            res.status, res.note = ERROR, "none of its checks ran (not your fault: tell the course staff)"
        return res
    if not failed:
        res.status, res.score = PASSED, item.points
        return res
    names = {n for c in failed for n in c.exceptions}
    if "WorkerTimeout" in names:
        res.status = TIMEOUT
    elif names & (_IMPORT_ERRORS | {"WorkerCrashed", "ProtocolError"}):
        res.status = ERROR
    first = next((c for c in failed if not c.hidden), None) or failed[0]
    res.failure = _failure(first, reveal, repro)
    return res


def _fmt(x: float) -> str:
    return f"{x:g}"


# Control characters (bar newline and tab) and ANSI escapes never reach a report:
# a message may quote a string the submission returned.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def _clean(text: str, limit: int) -> str:
    text = _CONTROL.sub("", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _extends(value: Any) -> str:
    """The node id an ``extends`` marker named, if it is a public test's (else "")."""
    if not isinstance(value, str):
        return ""
    value = value.split("[")[0]
    path, _, name = value.partition("::")
    return value if path.startswith("tests/test_") and path.endswith(".py") and name.isidentifier() else ""


def _input_kind(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {_clean(str(k), 40): _clean(str(v), 120) for k, v in list(value.items())[:12]}


_WORD_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _parameters(test: str) -> list[str]:
    """The word-like parts of a node id's parametrize ids ("Adam", "torch.float16"):
    numbers, reprs and pytest's generated ``args3`` could carry values or say nothing."""
    if "[" not in test:
        return []
    ids = test.split("[", 1)[1].rstrip("]")
    return [part for part in ids.split("-") if _WORD_ID.fullmatch(part) and not re.fullmatch(r"[a-z]+\d+", part)]


_DOCS: dict[str, dict[str, str]] = {}


def public_docstring(test: str) -> str:
    """The first docstring line of the public test ``tests/test_x.py::test_y`` (read
    from the trusted source, never imported); "" when it has none."""
    path, _, name = test.split("[")[0].partition("::")
    if not path.startswith("tests/") or ".." in Path(path).parts:
        return ""
    if path not in _DOCS:
        try:
            tree = ast.parse((REPO / path).read_text())
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        _DOCS[path] = {f.name: (ast.get_docstring(f) or "").strip().split("\n\n")[0].replace("\n", " ")
                       for f in tree.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    return _DOCS[path].get(name, "")


def _failure(c: Check, reveal: bool, repro: str) -> Failure:
    prop = c.test.split("[")[0] if not c.hidden else c.extends
    f = Failure(test=c.test, hidden=c.hidden, outcome=c.outcome, property_test=prop,
                property=public_docstring(prop) if prop else "", input_kind=dict(c.input_kind),
                parameters=_parameters(c.test))
    if prop:
        f.reproduce = f"pytest {prop} --impl {repro}"
    if c.hidden and not reveal:
        f.test, f.withheld = function_name(c.test), True
        return f
    f.message, f.example = _clean(c.message, 4000), _clean(c.example, 4000)
    return f


def failure_text(f: Failure) -> str:
    """A failure as the student reads it (several lines)."""
    if f.hidden:
        head = f"A hidden check failed: {f.test}"
        if f.property_test:
            head += f", which extends the public test {function_name(f.property_test)}"
            head += f" ({f.property})" if f.property else ""
        lines = [head + "."]
        kind = ", ".join(f"{k}={v}" for k, v in f.input_kind.items())
        params = ", ".join(f.parameters) if f.withheld else ""
        if kind or params:
            lines.append("Inputs of the kind: " + "; ".join(x for x in (kind, params) if x) + ".")
        if f.withheld:
            lines.append("It runs that property on more or larger inputs than the public tests; the values "
                         "are withheld.")
    else:
        lines = [f"Failed: {f.test}" + (f" ({f.property})" if f.property else "")]
    if f.message:
        lines.append(f.message)
    if f.example:
        lines.append(f.example)
    if f.reproduce:
        lines.append(("Explore with the public test: " if f.hidden else "Reproduce: ") + f.reproduce)
    return "\n".join(lines)


def item_text(i: ItemResult) -> str:
    """One item's result as text: its score, then its first failure or why it earned nothing."""
    head = f"[{_fmt(i.score)}/{_fmt(i.max_score)}] {i.name}: {i.status}"
    if i.status == PASSED and not i.note:
        return f"{head} ({i.checks} checks)"
    if i.failure is not None:
        head += f" ({i.failed} of {i.checks} checks failed)"
    body = [x for x in (i.note, failure_text(i.failure) if i.failure else "") if x]
    return "\n".join([head, *("  " + ln for x in body for ln in x.splitlines())])

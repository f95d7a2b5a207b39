"""Grading one submission: a trusted pytest run over sandboxed workers, then scores.

The engine never imports the submission. It copies the submission's
``student/`` into a fresh working copy (:mod:`grader.sandbox`), then runs one
trusted pytest process (the public test file and the hidden checks of every
selected problem) with :mod:`grader.plugin`, which routes every call of the
tests to one sandboxed worker per problem and sends the outcomes back over a
pipe. Verdicts and points are computed here, from the rubric.
"""

from __future__ import annotations

import json
import os
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
from grader.rubric import Problem, Rubric, is_hidden
from grader.sandbox import Limits, Sandbox, SubmissionError, make_working_copy
from grader.submission import locate

REPO = Path(__file__).resolve().parent.parent

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
NOT_RUN_GPU, NO_CHECKS = "not run on a GPU", "no checks"
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
    points_without_checks: float = 0.0

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
    limits = Limits(memory_bytes=int((opts.memory_limit_gib or rub.settings.memory_limit_gib) * (1 << 30)),
                    cpu_seconds=int(rub.settings.cpu_limit_seconds))
    sandbox = Sandbox(limits=limits, gpu=cuda, want=opts.sandbox)
    result = GradeResult(submission=str(path), profile=profile, sandbox=sandbox.describe())
    if public_only:
        result.notes.append("public checks only (" + ("--public-only" if opts.public_only else
                            "this checkout has no reference/ or hidden checks") + ")")
    if sandbox.mode != "bwrap":
        result.notes.append(f"sandbox: rlimits only ({sandbox.why})")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        run = Path(tmp)
        try:
            folder = locate(path, run / "unpacked")
            work = make_working_copy(folder / "student", run / "work")
        except SubmissionError as e:
            result.error = str(e)
            result.problems = [_unavailable(p, ERROR, f"not graded: {e}", cuda) for p in selected]
            return _total(result, time.monotonic() - start)
        outcome = _run_pytest(rub, selected, opts, profile, public_only, sandbox, work, run, path)
    result.execution_time = time.monotonic() - start
    seccomp = {n: s["seccomp"] for n, s in outcome.get("problems", {}).items() if s.get("seccomp")}
    off = sorted(n for n, v in seccomp.items() if v != "on")
    result.sandbox = sandbox.describe(None if not seccomp else "off" if len(off) == len(seccomp) else
                                      "on" + (f" except {', '.join(off)} (processes allowed)" if off else ""))
    if outcome.get("error"):
        result.notes.append(outcome["error"])
    repro = str(path) if path.is_dir() else "FOLDER_HOLDING_YOUR_student"
    for p in selected:
        result.problems.append(_timed(_score(p, outcome, cuda, public_only, reveal, repro), outcome))
    return _total(result, result.execution_time)


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
    return ProblemResult(p.name, p.section, 0.0, p.points, status, p.visibility, output)


def _total(result: GradeResult, elapsed: float) -> GradeResult:
    result.execution_time = round(elapsed, 3)
    result.score = sum(p.score for p in result.problems)
    result.max_score = sum(p.max_score for p in result.problems if p.status not in (NOT_RUN_GPU, NO_CHECKS))
    result.gpu_points_not_run = sum(p.max_score for p in result.problems if p.status == NOT_RUN_GPU)
    result.points_without_checks = sum(p.max_score for p in result.problems if p.status == NO_CHECKS)
    return result


def _run_pytest(rub: Rubric, selected: list[Problem], opts: Options, profile: str, public_only: bool,
                sandbox: Sandbox, work: Path, run: Path, path: Path) -> dict[str, Any]:
    """Run the trusted pytest process; return the plugin's results (or an error)."""
    planned = [(p, p.check_files(REPO, public_only=public_only)) for p in selected]
    planned = [(p, files) for p, files in planned if files and not (p.gpu and not sandbox.gpu)]
    if not planned:
        return {"tests": {}, "problems": {}}
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
        "start_timeout": float(rub.settings.start_timeout), "results_fd": write_fd,
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
    chunks: list[bytes] = []

    def collect() -> None:
        with os.fdopen(read_fd, "rb") as f:
            while chunk := f.read(1 << 16):
                chunks.append(chunk)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    hard_limit = sum(time_limit.values()) + rub.settings.start_timeout + 120
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
        return {"tests": {}, "problems": {}, "error": f"{why}:\n{text[-3000:]}", "fatal": True}
    return results


def _score(p: Problem, outcome: dict[str, Any], cuda: bool, public_only: bool, reveal: bool,
           repro: str) -> ProblemResult:
    files = p.check_files(REPO, public_only=public_only)
    if not files:
        return ProblemResult(p.name, p.section, 0.0, p.points, NO_CHECKS, p.visibility,
                             f"no check files yet ({', '.join(p.checks)}): not graded")
    if p.gpu and not cuda:
        return _unavailable(p, NOT_RUN_GPU, "", cuda)
    if outcome.get("fatal"):
        return ProblemResult(p.name, p.section, 0.0, p.points, ERROR, p.visibility,
                             outcome.get("error", "the grader failed")[:3000])
    state = outcome.get("problems", {}).get(p.name, {})
    checks, collect_errors = [], []
    for nodeid, t in outcome.get("tests", {}).items():
        if t["outcome"] == "collect-error" and any(t["file"].startswith(f) for f in files):
            collect_errors.append(f"{t['file']}: {t['message']}")
        elif t["problem"] == p.name:
            checks.append(Check(nodeid, t["outcome"], t["message"], t["example"], is_hidden(t["file"]),
                                t["gpu"], t["exceptions"]))
    log = state.get("log", "") + (f"\n[... {state['log_dropped']} more bytes of output dropped]"
                                  if state.get("log_dropped") else "")
    res = ProblemResult(p.name, p.section, 0.0, p.points, FAILED, p.visibility, "", checks, log)
    if collect_errors:
        res.status, res.output = ERROR, "the grader could not load its checks (not your fault):\n" + \
            "\n".join(collect_errors)[:3000]
        return res
    ran = [c for c in checks if c.outcome != "skipped"]
    gpu_skipped = [c for c in checks if c.outcome == "skipped" and c.gpu]
    failed = [c for c in ran if c.outcome != PASSED]
    n_pub, n_hid = sum(not c.hidden for c in ran), sum(c.hidden for c in ran)
    counts = f"{len(ran)} checks ({n_pub} public, {n_hid} hidden)"
    note = f"; {len(gpu_skipped)} GPU checks not run on this machine" if gpu_skipped else ""
    if not checks:
        res.status, res.output = ERROR, "no checks were collected for this problem"
    elif not ran and gpu_skipped:
        res.status, res.output = NOT_RUN_GPU, f"all {len(gpu_skipped)} checks need a CUDA device: not run"
    elif not failed and ran:
        res.status, res.score = PASSED, p.points
        res.output = f"passed all {counts}{note}"
    else:
        names = {n for c in failed for n in c.exceptions}
        if state.get("timeout"):
            res.status = TIMEOUT
        elif state.get("crashes") or names & _IMPORT_ERRORS:
            res.status = ERROR
        lines = [f"{len(failed)} of {counts} failed{note}."]
        if state.get("timeout"):
            lines.append(f"Timeout: {state['timeout']}")
        if state.get("crashes"):
            lines.append(f"The worker crashed: {state['crashes'][0][:1500]}")
        first = next((c for c in failed if not c.hidden), None) or failed[0]
        lines.append(_failure_text(first, reveal, repro))
        res.output = "\n".join(lines)
    return res


def _failure_text(c: Check, reveal: bool, repro: str) -> str:
    if c.hidden and not reveal:
        return ("First failure: a hidden check (it compares your functions with the reference on "
                "inputs the public tests do not use); details are withheld.")
    test = c.test.split("[")[0]
    text = f"First failure: {c.test}\n{c.message.strip()}"
    if c.example:
        text += f"\n{c.example.strip()}"
    text += f"\nReproduce: pytest {test} --impl {repro}"
    return text

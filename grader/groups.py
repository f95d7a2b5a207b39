"""Planning and running a grade's phases: which check files each phase runs
(every problem's public ones, then the hidden ones), each phase as one
trusted pytest process.

**Running.** A phase's process gets its :class:`grader.protocol.GroupSpec`, results pipe and
scratch folder; it loads :mod:`grader.plugin`, which routes
the tests' calls to one sandboxed worker per problem and writes
:class:`grader.protocol.RunResults` back over the pipe. Each problem's CPU
budget is computed here, for the files of it the phase runs
(:class:`grader.budgets.Budgets`). A process that ends without results (a
crash, killed for memory, the hard time limit) yields a ``fatal`` record:
nothing the submission could cause (its code never runs in that process), so
its problems are grader errors rather than failures, and are regraded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from grader.budgets import Budgets, hard_limit_of
from grader.protocol import PLAN_ENV, CheckOutcome, Cost, GroupSpec, ProblemSpec, RunResults, SandboxSpec, WorkerRecord
from grader.report.progress import GradeProgress
from grader.rubric import Problem, is_hidden
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP
from grader.sandbox.scratch import BASETEMP
from grader.util import REPO, memory_available


class ProblemFiles(NamedTuple):
    """A problem with check files of it to run (those that exist): all of
    them, or a phase's (public or hidden)."""

    problem: Problem
    files: tuple[str, ...]


#: Called with each problem's results as its trusted process sends them (from a reader thread).
OnProblem = Callable[[str, RunResults], None]


def phases(selected: list[Problem], check_files: dict[str, tuple[str, ...]], *,
           gpu_device: str) -> list[list[ProblemFiles]]:
    """The run's phases (:func:`by_phase`) of the selected problems' existing
    check files (``check_files``: each problem's), each in the order its trusted process runs them: the
    rubric's, except that the problems whose workers need a sealed fork
    server (the rubric's ``sealed_optim``) come last, so
    that a phase starts one fork server of each kind at most. A GPU problem
    is left out where GPU problems do not run (``gpu_device`` ""; it is "not
    run on a GPU")."""
    planned = [ProblemFiles(p, check_files[p.name]) for p in selected]
    planned = [pf for pf in planned if pf.files and not (pf.problem.gpu and not gpu_device)]
    planned.sort(key=lambda pf: pf.problem.sealed_optim)  # stable: the rubric's order otherwise
    return by_phase(planned)


def run_phase(part: list[ProblemFiles], template: GroupSpec, budgets: Budgets, *, hidden: bool,
              run: Path, progress: GradeProgress | None = None,
              on_problem: OnProblem | None = None) -> tuple[dict[str, RunResults], list[str], list[Cost]]:
    """Run one phase's check files (``part``) in one trusted pytest process;
    return each problem's results (a problem absent was not run), the
    process's error (if any) and its cost.

    ``template`` is the run's group spec without problems (the process gets
    its own copy with its problems, scratch folder and pipe); ``budgets``
    sets each problem's budget; ``hidden``: the phase's files are hidden
    checks; ``run`` is the phase's folder; ``progress``, when given, is
    told the phase's problems and fed its events; ``on_problem``, when
    given, gets each problem's results as they come (from a reader thread).
    """
    if not part:
        return {}, [], []
    if progress is not None:
        progress.assign([p.name for p, _ in part], "hidden checks" if hidden else "")
    try:
        results = run_pytest(replace(template, hidden=hidden), tuple(budgets.spec(p, files) for p, files in part),
                             run, progress=progress.event if progress else None, on_problem=on_problem)
    finally:
        if progress is not None:
            progress.ended()
    per_problem = {p.name: problem_results(p.name, files, [results]) for p, files in part}
    return per_problem, [results.error] if results.error else [], [results.cost] if results.cost is not None else []


def by_phase(planned: list[ProblemFiles]) -> list[list[ProblemFiles]]:
    """The run's phases: every problem's public check files, then every
    problem's hidden ones (one phase where there is one kind only).

    No worker that has seen hidden inputs runs before one whose answers reach
    students' failure messages (a public check's): any channel between two
    workers of one submission (a lock on a shared file, the page cache, the
    machine's load) could otherwise carry a hidden input of one problem into
    a visible message. Nothing of the hidden phase reaches a student-visible
    field, and the engine regrades a phase's grader errors before the next
    phase starts (public checks never run after hidden ones)."""
    public = [ProblemFiles(p, tuple(f for f in files if not is_hidden(f))) for p, files in planned]
    hidden = [ProblemFiles(p, tuple(f for f in files if is_hidden(f))) for p, files in planned]
    return [part for part in ([pf for pf in public if pf.files], [pf for pf in hidden if pf.files]) if part]


def run_pytest(template: GroupSpec, problems: tuple[ProblemSpec, ...], run: Path,
               progress: Callable[[bytes], None] | None = None,
               on_problem: OnProblem | None = None) -> RunResults:
    """Run one trusted pytest process over ``problems``; return the plugin's
    results, or a ``fatal`` record saying why there are none (those problems
    whose results came before it ended keep them). ``progress``, when given,
    gets each progress event line as it comes; ``on_problem`` each problem's
    results."""
    run.mkdir(parents=True, exist_ok=True)
    run.chmod(0o711)  # a uid-isolated worker passes through to its scratch folder, lists nothing
    scratch = run / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    read_fd, write_fd = os.pipe()
    spec = replace(template, scratch=str(scratch), problems=problems, results_fd=write_fd)
    # The spec holds the hidden checks' seed: readable by the grader only.
    with open(os.open(run / "plan.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(spec.to_json())
    files = [f for p in problems for f in p.files]
    # No per-test wall-clock timeout (--timeout=0): on a busy machine a test
    # may take long without any fault of the submission, whose calls are
    # bounded by their CPU limits and wall-clock backstops in grader.sandbox.remote.
    argv = [sys.executable, "-m", "pytest", *files, "-p", "grader.plugin", "-q", "--no-header",
            "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--rootdir", str(REPO),
            "-c", str(REPO / "pyproject.toml"), f"--basetemp={scratch / BASETEMP}",
            "--hypothesis-profile", spec.profile, "--tb=no", "-o", "console_output_style=classic", "--timeout=0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRADER_", "HYPOTHESIS_"))}
    env.update({PLAN_ENV: str(run / "plan.json")}, HYPOTHESIS_PROFILE=spec.profile,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONDONTWRITEBYTECODE="1")
    # One torch thread: the checks' tensors are small, and a thread pool
    # spinning for a CPU the worker holds (or another grade's) costs CPU time
    # and seconds for nothing. An instructor's explicit setting wins.
    env.setdefault("OMP_NUM_THREADS", "1")
    # glibc's malloc: two arenas, and blocks of 256 KiB and more (the oracles'
    # tensors) mapped and unmapped, not kept: a grade must fit a small container.
    env.update(MALLOC_ARENA_MAX="2", MALLOC_MMAP_THRESHOLD_="262144")
    collected = _Events(progress, on_problem)
    reader = threading.Thread(target=collected.read, args=(read_fd,), daemon=True)
    reader.start()
    hard_limit = hard_limit_of(spec.problems)
    try:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        os.close(write_fd)
    peak = _PeakMemory(proc.pid)
    try:
        out, _ = proc.communicate(timeout=hard_limit)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        killed = True
    finally:
        peak.stop()
    reader.join(timeout=30)
    text = out.decode("utf-8", "replace")
    results = collected.results()
    if collected.complete:
        return results
    lost = _no_results(killed, hard_limit, proc, text, peak.bytes)
    if not results.problems:
        return lost
    # The problems that ended keep their results; the run's error names why the others have none
    # (problem_results makes them fatal).
    results.error, results.log = lost.error, lost.log
    return results


class _Events:
    """A trusted pytest process's events (grader/protocol.py), read as they come."""

    def __init__(self, progress: Callable[[bytes], None] | None, on_problem: OnProblem | None) -> None:
        self.progress, self.on_problem = progress, on_problem
        self.checks: dict[str, CheckOutcome] = {}
        self.problems: dict[str, WorkerRecord] = {}
        self.session: RunResults | None = None
        self.complete = False

    def read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            for line in f:
                with contextlib.suppress(Exception):  # an event that cannot be read is dropped
                    self._event(line)

    def _event(self, line: bytes) -> None:
        raw = json.loads(line)
        kind = raw.get("event") if isinstance(raw, dict) else None
        if kind in ("start", "check", "end") and self.progress is not None:
            with contextlib.suppress(Exception):  # progress only informs: it never stops a grade
                self.progress(line)
        if kind == "end" and isinstance(raw.get("results"), dict):
            res = RunResults.from_json(raw["results"])
            self.checks.update(res.checks)
            self.problems.update(res.problems)
            name = raw.get("problem")
            if self.on_problem is not None and isinstance(name, str):
                self.on_problem(name, res)
        elif kind == "session" and isinstance(raw.get("results"), dict):
            self.session = RunResults.from_json(raw["results"])
            self.checks.update(self.session.checks)
            self.complete = True

    def results(self) -> RunResults:
        s = self.session or RunResults()
        return RunResults(checks=dict(self.checks), problems=dict(self.problems), cuda=s.cuda, scratch=s.scratch,
                          session_time=s.session_time, cost=s.cost)


class _PeakMemory:
    """The resident memory of the trusted pytest process, sampled every half
    second (so that a run the kernel killed for memory says how much it held)."""

    def __init__(self, pid: int) -> None:
        from grader.sandbox import proctree

        self.bytes = 0
        self._done = threading.Event()

        def sample() -> None:
            while not self._done.wait(0.5):
                p = proctree.read(pid)
                if p is not None and p.live:
                    self.bytes = max(self.bytes, p.rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def _no_results(killed: bool, hard_limit: float, proc: subprocess.Popen[bytes], text: str,
                peak: int) -> RunResults:
    held = f"; it held {peak / (1 << 20):.0f} MiB at its peak" if peak else ""
    if killed:
        why = f"the grader's test run ran past {hard_limit:g} s and was stopped"
    elif proc.returncode == -signal.SIGKILL:
        free = memory_available()
        why = (f"the grader's test run was killed by SIGKILL from outside (out of memory?{held}; "
               f"{free / (1 << 30):.1f} GiB of memory is available to the grader now)")
    else:
        why = f"the grader's test run ended without results (exit {proc.returncode}{held})"
    # Its output may hold what the submission said (failure messages of
    # hidden checks): it goes to the instructors' log, never to "error".
    return RunResults(error=why, log=text[-3000:], fatal=True)


def merge_records(records: list[WorkerRecord]) -> WorkerRecord:
    """One problem's worker record from the phases that ran its files."""
    if len(records) == 1:
        return records[0]
    seccomp = [r.seccomp for r in records if r.seccomp]
    log = "".join(r.log for r in records)
    return WorkerRecord(
        calls=sum(r.calls for r in records),
        crashes=[c for r in records for c in r.crashes],
        timeouts=[t for r in records for t in r.timeouts],
        cut="; ".join(dict.fromkeys(r.cut for r in records if r.cut)),
        fault="; ".join(dict.fromkeys(r.fault for r in records if r.fault)),
        cpu_used=sum(r.cpu_used for r in records),
        cpu_budget=sum(r.cpu_budget for r in records),
        reference_cpu=sum(r.reference_cpu for r in records),
        seccomp=next((v for v in seccomp if v != "on"), seccomp[0] if seccomp else ""),
        # One problem's log stays within one worker's cap, however many phases ran it.
        log=log[:LOG_CAP],
        log_dropped=sum(r.log_dropped for r in records) + max(0, len(log) - LOG_CAP),
        started=any(r.started for r in records),
        workers=sum(r.workers for r in records),
        peak_bytes=max(r.peak_bytes for r in records),
        import_error=next((r.import_error for r in records if r.import_error), ""),
    )


def problem_results(name: str, files: Sequence[str], parts: list[RunResults]) -> RunResults:
    """Problem ``name``'s results from its phases' processes' results: their
    checks in its files' order, its worker records merged, ``fatal`` when any
    of those processes ended before its results came."""
    out = RunResults()
    checks = [item for o in parts for item in o.checks.items()]
    rank = {f: i for i, f in enumerate(files)}
    out.checks = dict(sorted(checks, key=lambda kv: rank.get(kv[1].file, len(files))))
    for o in parts:
        if o.fatal or (o.error and name not in o.problems):  # its process ended before its results came
            out.fatal, out.error, out.log = True, o.error, o.log
    records = [o.problems[name] for o in parts if name in o.problems]
    if records:
        out.problems[name] = merge_records(records)
    return out


def group_template(name: Path, work: Path, profile: str, sandbox: Sandbox, *, seed: int,
                   stand_in: bool = False) -> GroupSpec:
    """The run's group spec, before a phase's process fills in its problems, scratch folder and pipe."""
    return GroupSpec(name=str(name), repo=str(REPO), work=str(work), scratch="", profile=profile, problems=(),
                     sandbox=SandboxSpec.of(sandbox), results_fd=-1, seed=seed, stand_in=stand_in)


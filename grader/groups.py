"""Planning and running a grade's phases: which check files each phase runs
(every problem's public ones, then the hidden ones), each phase as one
trusted pytest process.

**Running.** A phase's process gets its :class:`grader.protocol.GroupSpec`, results pipe and
scratch folder; it loads :mod:`grader.plugin`, which routes
the tests' calls to one sandboxed worker per problem and sends each
problem's :class:`grader.protocol.ProblemRun` back over the pipe. Each problem's CPU
budget is computed here, for the files of it the phase runs
(:class:`grader.budgets.Budgets`). A process that ends without results (a
crash, killed for memory, the hard time limit) leaves its problems that had
none ``lost``: nothing the submission could cause (its code never runs in
that process), so they are grader errors rather than failures, and are regraded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from grader.budgets import Budgets, hard_limit_of
from grader.protocol import PLAN_ENV, Cost, GroupSpec, ProblemRun, ProblemSpec, SandboxSpec
from grader.report.progress import GradeProgress
from grader.rubric import Problem, is_hidden
from grader.sandbox.isolation import Sandbox
from grader.sandbox.scratch import BASETEMP
from grader.util import REPO, memory_available


class ProblemFiles(NamedTuple):
    """A problem with check files of it to run (those that exist): all of
    them, or a phase's (public or hidden)."""

    problem: Problem
    files: tuple[str, ...]


#: Called with each problem's run as its trusted process sends it (from a reader thread).
OnProblem = Callable[[str, ProblemRun], None]


class PhaseRun(NamedTuple):
    """What one trusted pytest process ended with: each of its problems' runs
    (one ``lost`` where the process ended before sending it), its cost (None
    when it sent none) and, when it ended without all its results, why
    (``error``) and its output's tail (``log``, instructors only)."""

    runs: dict[str, ProblemRun]
    cost: Cost | None
    error: str = ""
    log: str = ""


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
              on_problem: OnProblem | None = None) -> PhaseRun:
    """Run one phase's check files (``part``) in one trusted pytest process
    (:func:`run_pytest`: each problem of ``part``'s run, the process's error
    and its cost).

    ``template`` is the run's group spec without problems (the process gets
    its own copy with its problems, scratch folder and pipe); ``budgets``
    sets each problem's budget; ``hidden``: the phase's files are hidden
    checks; ``run`` is the phase's folder; ``progress``, when given, is
    told the phase's problems and fed its events; ``on_problem``, when
    given, gets each problem's results as they come (from a reader thread).
    """
    if not part:
        return PhaseRun({}, None)
    if progress is not None:
        progress.assign([p.name for p, _ in part], "hidden checks" if hidden else "")
    try:
        return run_pytest(replace(template, hidden=hidden), tuple(budgets.spec(p, files) for p, files in part),
                          run, progress=progress.event if progress else None, on_problem=on_problem)
    finally:
        if progress is not None:
            progress.ended()


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
               on_problem: OnProblem | None = None) -> PhaseRun:
    """Run one trusted pytest process over ``problems``; return each one's run
    as the plugin sent it, or, where the process ended before sending it, a
    ``lost`` one saying why (those whose runs came before it ended keep them).
    ``progress``, when given, gets each progress event line as it comes;
    ``on_problem`` each problem's run."""
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
    error, log = ("", "") if collected.complete else _no_results(killed, hard_limit, proc, text, peak.bytes,
                                                                    hidden=spec.hidden)
    # The problems that ended keep their runs; the others' are lost, and say why.
    runs = {p.name: collected.runs.get(p.name) or ProblemRun(p.name, spec.hidden, lost=error, log=log)
            for p in problems}
    return PhaseRun(runs, collected.cost, error, log)


class _Events:
    """A trusted pytest process's events (grader/protocol.py), read as they come."""

    def __init__(self, progress: Callable[[bytes], None] | None, on_problem: OnProblem | None) -> None:
        self.progress, self.on_problem = progress, on_problem
        self.runs: dict[str, ProblemRun] = {}
        self.cost: Cost | None = None
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
        if kind == "end" and isinstance(raw.get("run"), dict):
            run = ProblemRun.from_json(raw["run"])
            self.runs[run.problem] = run
            if self.on_problem is not None:
                self.on_problem(run.problem, run)
        elif kind == "session" and isinstance(raw.get("cost"), dict):
            self.cost = Cost.from_json(raw["cost"])
            self.complete = True


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
                peak: int, *, hidden: bool) -> tuple[str, str]:
    """Why a trusted pytest process ended without all its results, and its
    output's tail; of a ``hidden`` phase's, why in words only (its figures,
    in the log, are the instructors')."""
    held = f"; it held {peak / (1 << 20):.0f} MiB at its peak" if peak else ""
    if killed:
        why = f"the grader's test run ran past {hard_limit:g} s and was stopped"
        words = "the grader's test run ran past its time limit and was stopped"
    elif proc.returncode == -signal.SIGKILL:
        free = memory_available()
        why = (f"the grader's test run was killed by SIGKILL from outside (out of memory?{held}; "
               f"{free / (1 << 30):.1f} GiB of memory is available to the grader now)")
        words = "the grader's test run was killed by SIGKILL from outside (out of memory?)"
    else:
        why = f"the grader's test run ended without results (exit {proc.returncode}{held})"
        words = "the grader's test run ended without results"
    # Its output may hold what the submission said (failure messages of
    # hidden checks): it goes to the instructors' log, never to "error"; so do
    # a hidden run's figures (the memory it held, its exit status), which
    # what the hidden checks' worker replied can move.
    return (words, f"{why}\n{text[-3000:]}") if hidden else (why, text[-3000:])


def group_template(name: Path, work: Path, profile: str, sandbox: Sandbox, *, seed: int,
                   stand_in: bool = False) -> GroupSpec:
    """The run's group spec, before a phase's process fills in its problems, scratch folder and pipe."""
    return GroupSpec(name=str(name), repo=str(REPO), work=str(work), scratch="", profile=profile, problems=(),
                     sandbox=SandboxSpec.of(sandbox), results_fd=-1, seed=seed, stand_in=stand_in)


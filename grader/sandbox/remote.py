"""RemoteImpl: the implementation under test, reached in sandboxed workers.

:class:`RemoteImpl` implements :class:`tests.harness.Impl` for the grader's
trusted pytest process: the lifecycle of one submission's workers
(:class:`grader.sandbox.workerproc.Worker`), forked by a
:class:`grader.sandbox.forkserver.ForkServer` that imported torch once. Problems
run one after another; each gets a worker of its own at its first call, and
a fresh one wherever a check asks for a process that has run nothing before
(:meth:`fresh_scenario` and the like). One fork server lives at a time: the
plain one, then, for the problems whose workers must not see torch.optim
(``ProblemSpec.sealed_optim``, the rubric's; they run last), a sealed one.
Requests and replies are :mod:`tests.wire` frames (read by :mod:`grader.sandbox.workerproc`, turned into
values or exceptions by :func:`tests.wire.reply_value`); what one call does is
:mod:`grader.sandbox.requests`.

Each problem's CPU budget and each call's CPU limit (read from outside by
:mod:`grader.sandbox.meter`, budgets from :mod:`grader.budgets`), the
wall-clock backstop, and when a timeout, a crash, a spent budget
(:class:`NotRun`) or a fault of the machine (:class:`GraderFault`) cuts a
problem: see grader/README.md, "Budgets". What happened is kept in a
:class:`grader.sandbox.problemstate.ProblemState`. With ``hidden`` (a run of hidden checks) what a student
may read of it is fixed wording: no exit status, signal, CPU or wall seconds
and no text of the worker's, any of which the submission could steer to carry
a hidden input out; the details go to the instructors' log.

A problem whose spec says ``sealed_optim`` has its workers forked by a server with
torch.optim sealed in-process and, in bubblewrap mode, sealed copies of its
sources bound over torch's (:mod:`grader.sandbox.optimseal`; written once per
RemoteImpl, removed by :meth:`RemoteImpl.close`); why, and the uid mode's
Landlock: see grader/README.md, "The trust boundary".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grader.sandbox import proctree, requests
from grader.sandbox.errors import GraderFault, Limit, OutOfTime, WorkerCrashed, WorkerError
from grader.sandbox.forkserver import ForkServer
from grader.sandbox.isolation import Sandbox
from grader.sandbox.optimseal import SealedOptim
from grader.sandbox.problemstate import ProblemSpec, ProblemState
from grader.sandbox.scratch import BASETEMP, remove_tree
from grader.sandbox.workerproc import Worker
from grader.worker.main import ServerConfig
from tests.harness import ImplBase, Interrupted, read_source, scenario_name
from tests.memwatch import process_tree

__all__ = ["RemoteImpl"]

#: A wall-clock backstop is never shorter than this (seconds).
MIN_WALL = 60.0
#: The CPU seconds a forked worker may take to say hello (it confines itself; torch is imported already).
FORK_CPU = 10.0

class RemoteImpl(ImplBase):
    """An :class:`tests.harness.Impl` whose calls run in sandboxed workers.

    ``enter(problem)`` (called by the grader's pytest plugin before each test)
    selects the problem whose worker serves the next calls.
    """

    def __init__(
        self, name: str, sandbox: Sandbox, work: Path, scratch: Path, problems: Sequence[ProblemSpec], *,
        min_wall: float = MIN_WALL, max_crashes: int = 3, max_timeouts: int = 2, hidden: bool = False,
    ) -> None:
        """``problems``: what each problem runs (its budget among it), in the
        order they run; the workers' limits are ``sandbox.limits`` (a call's
        CPU seconds, a fork server's start-up, the wall-clock backstop: a wait
        lasts at most ``wall_factor`` times its CPU limit, and at least
        ``min_wall`` seconds); ``hidden``: this run serves hidden checks (fixed
        wording, see the module docstring). A problem whose spec says
        ``sealed_optim`` gets its workers from a sealed fork server only."""
        self.name = name
        self._sandbox, self._work, self._scratch = sandbox, work, scratch
        self.limits = sandbox.limits
        self.states = {p.name: ProblemState.of(p) for p in problems}
        self.min_wall, self.max_crashes, self.max_timeouts = min_wall, max_crashes, max_timeouts
        self.hidden = hidden
        self.problem: str | None = None
        self._workers: dict[str, Worker] = {}
        self._server: ForkServer | None = None
        self.servers = 0  # fork servers started (each imports torch once)
        self.server_cpu = 0.0  # the CPU seconds their start-ups took
        self._roots: list[proctree.Proc] = []  # every worker started (live_processes)
        self._scratch_error = ""  # set when the scratch folder could not be emptied (_clear_scratch)
        # Written before any worker starts, beside the scratch folder (in the
        # run's private folder: bubblewrap binds the scratch folder alone).
        self._sealed_optim: SealedOptim | None = None
        self._seal_error = ""
        self.seal_cpu = 0.0  # the CPU seconds sealing torch.optim's sources took (the grader's cost)
        if any(p.sealed_optim for p in problems) and sandbox.seals_optim:
            began = time.thread_time()
            try:
                self._sealed_optim = SealedOptim.create(scratch.parent)
            except (OSError, SyntaxError, ValueError) as e:
                self._seal_error = f"torch.optim's sources could not be sealed for its worker ({e})"
            self.seal_cpu = time.thread_time() - began
        # The submission's sources, read once before any worker runs (the
        # worker never answers for them; see Impl.source).
        self._package = work / "student"
        self._sources: dict[str, str] = {}
        for path in sorted(self._package.rglob("*.py")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(self._package).with_suffix("")
                self._sources[".".join(rel.parts)] = path.read_text(encoding="utf-8", errors="replace")

    @property
    def cuda(self) -> bool:
        """Whether its workers may use CUDA."""
        return self._sandbox.cuda

    # ------------------------------------------------------------ lifecycle
    def enter(self, problem: str) -> None:
        if problem != self.problem and self.problem in self._workers:
            self._retire(self.problem)  # problems run in order: free the last one's worker
        if problem != self.problem and self.problem is not None:
            self._clear_scratch()
        self.problem = problem
        self.states[problem].started = True

    def _fork_server(self, sealed: bool, st: ProblemState) -> ForkServer:
        """The live fork server of the kind ``sealed`` asks for: started (after
        the other kind is stopped) when there is none. No code of the
        submission runs in a server, so whatever goes wrong here is the
        machine's or the grader's."""
        server = self._server
        if server is not None and server.config.seal == sealed and server.alive():
            return server
        if server is not None:
            server.kill()
            self._server = None
        if sealed and self._sandbox.seals_optim and self._sealed_optim is None:
            # never a worker with torch.optim's sources open to it
            st.fault = st.fault or self._seal_error or "torch.optim's sealed sources are gone (closed)"
            raise GraderFault(f"{self.problem}: not graded: {st.fault}")
        config = ServerConfig(seal=sealed, wipe=self._sandbox.wipe(), cuda=self._sandbox.cuda,
                              dynamo=sealed and self._sandbox.mode == "uid" and self._sandbox.landlocked)
        wall = requests.wall(self, self.limits.start_cpu)
        try:
            server = ForkServer(self._sandbox, self._work, self._scratch, config, self.limits.reply_bytes,
                                self._sealed_optim if sealed else None)
        except OSError as e:
            st.fault = st.fault or f"the sandbox could not start: {e}"
            raise GraderFault(f"{self.problem}: not graded: {st.fault}") from None
        self._server = server
        self.servers += 1
        try:
            server.wait_ready(Limit(cpu=self.limits.start_cpu, wall=time.monotonic() + wall))
        except WorkerError as e:
            st.note(f"the sandbox's fork server: {e}; its output: "
                    + bytes(server.log[-2000:]).decode("utf-8", "replace"))
            server.kill()
            self._server = None
            if isinstance(e, OutOfTime):
                why = (f"the sandbox did not start within {self.limits.start_cpu:g} CPU s" if e.cpu else
                       f"the sandbox did not start within {wall:.0f} s of wall-clock time "
                       "(the machine is too busy?)" if e.limit.starved else
                       "the sandbox did not start: it waited without using the CPU (the machine's disk too slow?)")
            else:
                why = f"the sandbox could not start: {e}" + (
                    " (is the sandbox's bubblewrap still installed?)" if "status 127" in str(e) else "")
            st.fault = st.fault or why
            raise GraderFault(f"{self.problem}: not graded: {why}") from None
        if server.meter is not None:
            self.server_cpu += server.cpu_at_hello
        return server

    def _worker(self) -> Worker:
        """The current problem's worker: its live one, else a fresh one
        (forked, and ready: its hello read). No code of the submission runs
        before the hello, and a worker cannot reach its server (the seccomp
        filter, on Linux x86_64 and aarch64, refuses ``prlimit64`` on another
        process's limits), so a start that fails is the machine's or the
        grader's: a grader error (the engine regrades the problem alone), and
        the server that failed is replaced at the next start."""
        assert self.problem is not None
        w = self._workers.get(self.problem)
        if w is not None and w.alive():
            return w
        if w is not None:
            self._retire(self.problem)
        st = self.states[self.problem]
        for other in list(self._workers):  # one worker at a time: a spawn ends the server's last one
            self._retire(other)
        server = self._fork_server(st.spec.sealed_optim, st)
        if st.spec.sealed_optim and not server.config.seal:  # never its calls where torch.optim is whole
            st.fault = st.fault or "its worker's torch.optim would not be sealed"
            raise GraderFault(f"{self.problem}: not graded: {st.fault}")
        wall = requests.wall(self, self.limits.start_cpu)
        try:
            w = server.spawn(Limit(cpu=float("inf"), wall=time.monotonic() + wall))
        except (WorkerError, OSError) as e:
            st.note(f"the sandbox could not fork a worker: {e}")
            server.kill()
            self._server = None
            st.fault = st.fault or "the sandbox could not start a worker"
            raise GraderFault(f"{self.problem}: not graded: {st.fault}") from None
        st.workers += 1
        root = proctree.read(w.pid)
        if root is not None:
            self._roots.append(root)
        try:
            hello = w.wait_ready(Limit(cpu=w.meter.read().cpu + FORK_CPU, wall=time.monotonic() + wall))
        except WorkerError as e:
            w.kill()
            st.add_log(w)
            if w.killed_for:  # stopped by the grader for what the submission did (its scratch folder's caps)
                requests.crashed(self, st, f"a worker's start-up: {e}")
                raise WorkerCrashed(f"{self.problem}: {e}") from None
            st.note(f"a worker did not start: {e}")
            server.kill()  # (as when it cannot fork: the next start gets a fresh server)
            self._server = None
            st.fault = st.fault or ("a worker did not start within its wall-clock limit (the machine is too busy?)"
                                    if isinstance(e, OutOfTime) else f"a worker could not start: {e}")
            raise GraderFault(f"{self.problem}: not graded: {st.fault}") from None
        st.seccomp = str(hello.get("seccomp", ""))
        self._workers[self.problem] = w
        return w

    def finish(self, problem: str) -> None:
        """``problem``'s checks are over: retire its worker (its CPU and memory
        read first), so that its record is complete."""
        self._retire(problem)

    def _retire(self, problem: str) -> None:
        w = self._workers.pop(problem, None)
        if w is not None:
            st = self.states[problem]
            st.cpu_used += w.cpu_used()  # read just before the kill: nothing it used is lost
            w.kill()
            st.add_log(w)
            st.peak_bytes = max(st.peak_bytes, w.peak_growth())

    def cpu_used(self, problem: str | None = None, max_age: float = 0.0) -> float:
        """CPU seconds ``problem``'s workers (default: the current problem's) have
        used since each started serving, from readings at most ``max_age`` old."""
        problem = problem or self.problem
        if problem is None:
            return 0.0
        w = self._workers.get(problem)
        return self.states[problem].cpu_used + (w.cpu_used(max_age) if w is not None else 0.0)

    def _clear_scratch(self) -> None:
        """Empty the scratch folder between two problems, so nothing a worker of
        the last problem wrote there reaches a worker of the next one. Every
        worker that ran submission code is gone by now (the last problem's was
        retired). pytest's base folder stays (it holds the next tests'
        ``tmp_path``), emptied; anything that cannot be removed makes the next
        problem's calls fail rather than run beside it."""
        for entry in sorted(self._scratch.iterdir()):
            try:
                if entry.name == BASETEMP and entry.is_dir() and not entry.is_symlink():
                    for child in entry.iterdir():
                        remove_tree(child)
                else:
                    remove_tree(entry)
            except OSError as e:
                self._scratch_error = f"the scratch folder could not be emptied between problems ({e.strerror})"

    def stop_workers(self, reason: str) -> None:
        """Kill every running worker (called by the scratch watch)."""
        for w in list(self._workers.values()):
            if w.alive():
                w.stop(reason)

    def close(self) -> None:
        for p in list(self._workers):
            self._retire(p)
        if self._server is not None:
            self._server.kill()
            self._server = None
        if self._sealed_optim is not None:  # every worker that bound them is gone
            self._sealed_optim.remove()
            self._sealed_optim = None

    # ------------------------------------------------------------ isolation (grader/mfu/check.py)
    # The MFU check times the reference in this process and the submission in
    # its worker; neither may share the machine with anything of the submission
    # (a background thread or CUDA stream of a live worker could slow the
    # reference down, lowering the bar). It calls retire_workers() before each
    # timed reference call and checks live_processes() around both timed calls.

    def retire_workers(self, timeout: float = 30.0) -> None:
        """Kill every worker of this submission, and its sandbox's fork server,
        and return once none of their processes exists. The next call starts
        them afresh.

        Raises RuntimeError when a process is still alive after ``timeout``.
        """
        for problem in list(self._workers):
            self._retire(problem)
        if self._server is not None:
            self._server.kill()
            self._server = None
        deadline = time.monotonic() + timeout
        while True:
            left = self.live_processes()
            if not left:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the submission's processes {left} outlived their worker")
            time.sleep(0.01)

    def live_processes(self, *, besides_current: bool = False) -> list[int]:
        """Pids of the live processes of this submission, read from /proc: every
        worker started (same pid *and* start time), everything below it or in
        its session (a worker leads its own session). Without /proc: the live
        workers. ``besides_current``: not counting the current problem's worker."""
        current = self._workers.get(self.problem) if (besides_current and self.problem) else None
        if not proctree.AVAILABLE:
            return [w.pid for w in self._workers.values() if w is not current and w.alive()]
        table = proctree.snapshot()
        found: set[int] = set()
        for root in self._roots:
            now = table.get(root.pid)
            if now is not None and now.start == root.start:  # (so root.pid is not a recycled pid)
                found |= set(process_tree(root.pid))
                found |= {p.pid for p in table.values() if p.sid == root.pid}
        if current is not None:
            found -= set(process_tree(current.pid))
        return sorted(pid for pid in found if (p := table.get(pid) or proctree.read(pid)) is not None and p.live)

    # ------------------------------------------------------------ Impl
    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        return requests.request(self, {"op": "call", "module": module, "function": function,
                              "args": args, "kwargs": kwargs})

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return requests.request(self, {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs})

    def source(self, module: str) -> str:
        if module in self._sources:
            return self._sources[module]
        if f"{module}.__init__" in self._sources:
            return self._sources[f"{module}.__init__"]
        read_source(self._package, module)  # raises ValueError/FileNotFoundError with the reason
        raise FileNotFoundError(f"no module {module} in student/")

    def _fresh(self) -> None:
        assert self.problem is not None
        self._retire(self.problem)  # the next request forks a fresh worker

    def fresh_scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.problem is not None:
            self._fresh()
        return self.scenario(fn, *args, **kwargs)

    def interrupted_scenario(self, fn: Callable[..., Any], *args: Any, kill_when: Callable[[], bool],
                             timeout: float = 120.0, **kwargs: Any) -> Interrupted:
        """As :meth:`tests.harness.Impl.interrupted_scenario`; ``timeout`` is not
        used here: the call is bounded by its CPU limit like every other."""
        if self.problem is not None:
            self._fresh()
        req = {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs}
        return requests.request(self, req, kill_when=kill_when)

    def measured_scenario(self, fn: Callable[..., Any], *args: Any, warm_up: Callable[..., Any] | None = None,
                          **kwargs: Any) -> tuple[Any, int]:
        if self.problem is not None:
            self._fresh()
        requests.request(self, {"op": "prepare"})  # its memory from now on is what a fresh process's would be
        if warm_up is not None:  # harness code only: the implementation is first imported by the measured call
            requests.request(self, {"op": "scenario", "name": scenario_name(warm_up), "args": (), "kwargs": {}})
        req = {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs}
        return requests.request(self, req, measure=True)

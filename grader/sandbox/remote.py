"""RemoteImpl: the implementation under test, reached in a sandboxed worker.

:class:`RemoteImpl` implements :class:`tests.harness.Impl` for the grader's
trusted pytest process: the lifecycle of the workers
(:class:`grader.sandbox.client.Worker`) of one submission. Each problem gets its
own long-lived worker process (see :mod:`grader.worker.main`), started from a warm
spare so that importing torch overlaps with the previous problem's checks.
Requests and replies are :mod:`tests.wire` frames (decoded by :mod:`grader.sandbox.client`).

Each problem's CPU budget and each call's CPU limit (read from outside by
:mod:`grader.sandbox.meter`, budgets from :mod:`grader.sandbox.budgets`), the
wall-clock backstop, and when a timeout, a crash, a spent budget
(:class:`NotRun`) or a worker that cannot start (:class:`GraderFault`) cuts a
problem: see grader/README.md, "Budgets". What happened is kept in a
:class:`ProblemState`.

:data:`SEALED_OPTIM_PROBLEMS`: whose workers see sealed copies of torch.optim's
sources in bubblewrap mode (:mod:`grader.sandbox.optimseal`; written once per
RemoteImpl, removed by :meth:`RemoteImpl.close`); why, and the uid mode's
Landlock: see grader/README.md, "The trust boundary".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.sandbox import proctree
from grader.sandbox.client import (
    GraderFault,
    KilledForMemory,
    Limit,
    MalformedReply,
    NotRun,
    OutOfTime,
    ProtocolError,
    Worker,
    WorkerCrashed,
    WorkerError,
    WorkerTimeout,
    decode_reply,
    reply_value,
)
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP, worker_slots
from grader.sandbox.meter import StorageWatch
from grader.sandbox.optimseal import SealedOptim
from grader.sandbox.scratch import BASETEMP, remove_tree
from grader.worker.main import WorkerConfig
from tests import wire
from tests.harness import ImplBase, Interrupted, read_source, scenario_name, stubs_fail_fast
from tests.memwatch import MemoryWatch, process_tree

__all__ = ["ProblemState", "RemoteImpl"]

#: A wall-clock backstop is never shorter than this (seconds).
MIN_WALL = 60.0
#: The problems whose workers are kept from torch.optim's files (Sandbox.seals_optim):
#: the ones whose checks compare the submission with torch.optim, which the
#: worker seals in-process too (grader/worker/main.py ``_about_optimizers``).
SEALED_OPTIM_PROBLEMS = frozenset({"optimizers"})


@dataclass
class ProblemState:
    """What happened to one problem's worker(s); read by the report.

    ``cpu_budget`` is the CPU seconds all its calls may use, ``reference_cpu``
    what the reference uses for the same checks on this machine (for the
    report), ``cpu_done`` what its retired workers used. ``cut`` says why its
    remaining checks do not run, ``fault`` what the machine or the grader got
    wrong ("" while all is well).
    """

    cpu_budget: float
    reference_cpu: float = 0.0
    cpu_done: float = 0.0
    started: bool = False
    calls: int = 0
    crashes: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    cut: str = ""
    fault: str = ""
    log: bytearray = field(default_factory=bytearray)
    log_dropped: int = 0
    seccomp: str = ""

    def add_log(self, worker: Worker) -> None:
        room = LOG_CAP - len(self.log)
        self.log += worker.log[: max(room, 0)]
        self.log_dropped += worker.log_dropped + max(len(worker.log) - max(room, 0), 0)


class RemoteImpl(ImplBase):
    """An :class:`tests.harness.Impl` whose calls run in sandboxed workers.

    ``enter(problem)`` (called by the grader's pytest plugin before each test)
    selects the problem whose worker serves the next calls.
    """

    def __init__(
        self, name: str, sandbox: Sandbox, work: Path, scratch: Path, *, problems: dict[str, float],
        reference_cpu: dict[str, float] | None = None, call_cpu: float = 60.0, start_cpu: float = 60.0,
        wall_factor: float = 10.0, min_wall: float = MIN_WALL, max_crashes: int = 3, max_timeouts: int = 2,
        max_reply: int = 512 << 20, config: WorkerConfig | None = None, processes: dict[str, int] | None = None,
    ) -> None:
        """``problems``: each problem's CPU budget (seconds); ``reference_cpu``:
        what the reference uses for the same checks (seconds, reported only);
        ``call_cpu``: CPU seconds of one call; ``start_cpu``: CPU seconds of a
        worker's start-up; ``wall_factor``: a wait's wall-clock backstop is this
        times its CPU limit, and at least ``min_wall`` seconds."""
        self.name = name
        self._sandbox, self._work, self._scratch = sandbox, work, scratch
        self._config = config if config is not None else WorkerConfig()
        self._order = list(problems)
        refs = reference_cpu or {}
        self.states = {p: ProblemState(budget, refs.get(p, 0.0)) for p, budget in problems.items()}
        self.call_cpu, self.start_cpu, self.wall_factor, self.min_wall = call_cpu, start_cpu, wall_factor, min_wall
        self.max_crashes, self.max_timeouts, self.max_reply = max_crashes, max_timeouts, max_reply
        self.problem: str | None = None
        self._workers: dict[str, Worker] = {}
        self._spare: Worker | None = None
        self._processes = processes or {}
        self._isolated: str | None = None  # the problem that runs with no spare (retire_workers)
        self._roots: list[proctree.Proc] = []  # every worker process started (live_processes)
        self._killed: list[proctree.Proc] = []  # their trees as seen just before retire_workers killed them
        self._fresh_used = False
        self._scratch_error = ""  # set when the scratch folder could not be emptied (_clear_scratch)
        # Written before any worker starts, beside the scratch folder (in the
        # run's private folder: bubblewrap binds the scratch folder alone).
        self._sealed_optim: SealedOptim | None = None
        self._seal_error = ""
        if any(self._seals(p) for p in problems):
            try:
                self._sealed_optim = SealedOptim.create(scratch.parent)
            except (OSError, SyntaxError, ValueError) as e:
                self._seal_error = f"torch.optim's sources could not be sealed for its worker ({e})"
        # The submission's sources, read once before any worker runs (the
        # worker never answers for them; see Impl.source).
        self._package = work / "student"
        self._sources: dict[str, str] = {}
        for path in sorted(self._package.rglob("*.py")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(self._package).with_suffix("")
                self._sources[".".join(rel.parts)] = path.read_text(encoding="utf-8", errors="replace")

    # ------------------------------------------------------------ lifecycle
    def enter(self, problem: str) -> None:
        if problem != self.problem and self.problem in self._workers:
            self._retire(self.problem)  # problems run in order: free the last one's worker
        if problem != self.problem:
            self._fresh_used = False
            if self.problem is not None:
                self._clear_scratch()
        self.problem = problem
        self.states[problem].started = True

    def _seals(self, problem: str | None) -> bool:
        """Whether ``problem``'s workers get the sealed torch.optim sources."""
        return self._sandbox.seals_optim and problem in SEALED_OPTIM_PROBLEMS

    def _spawn(self, processes: int = 0, *, sealed: bool = False) -> Worker:
        config = replace(self._config, processes=processes) if processes else self._config
        worker = Worker(self._sandbox, self._work, self._scratch, config, self.max_reply,
                        self._sealed_optim if sealed else None)
        root = proctree.read(worker.proc.pid)
        if root is not None:
            self._roots.append(root)
        return worker

    def _worker(self) -> Worker:
        """The current problem's worker: its live one, else the spare, else a new one."""
        assert self.problem is not None
        w = self._workers.get(self.problem)
        if w is not None and w.alive():
            return w
        sealed = self._seals(self.problem)
        if sealed and self._sealed_optim is None:  # never a worker with torch.optim's sources open to it
            st = self.states[self.problem]
            st.fault = st.fault or self._seal_error or "torch.optim's sealed sources are gone (closed)"
            raise GraderFault(f"{self.problem}: not graded: {st.fault}")
        processes = self._processes.get(self.problem, 0)
        if processes:  # a worker allowed to create processes (the spare is not)
            w = self._spawn(processes, sealed=sealed)
        elif self._spare is not None and self._spare.alive() and self._spare.sealed_optim == sealed:
            w, self._spare = self._spare, None
        else:  # (a spare started for another kind of problem waits for it)
            w = self._spawn(sealed=sealed)
        self._workers[self.problem] = w
        if (self._isolated != self.problem and (self._spare is None or not self._spare.alive())
                and (self._fresh_used or any(not self.states[p].started for p in self._order))
                and self._spare_fits()):
            # Warm up the next problem's worker meanwhile, or the next fresh
            # worker of a problem whose checks ask for them (never while a
            # problem runs isolated: see retire_workers).
            if self._spare is not None:
                self._spare.kill()  # it died while waiting
            upcoming = self.problem if self._fresh_used else \
                next((p for p in self._order if not self.states[p].started), None)
            self._spare = self._spawn(sealed=self._seals(upcoming) and self._sealed_optim is not None)
        return w

    def _spare_fits(self) -> bool:
        """A spare worker only when a second worker's memory limit fits the
        free memory too (else the next problem starts its worker cold)."""
        return self._sandbox.gpu or worker_slots(self._sandbox.limits.memory_bytes, trusted=0) >= 2

    def _retire(self, problem: str) -> None:
        w = self._workers.pop(problem, None)
        if w is not None:
            st = self.states[problem]
            st.cpu_done += w.charged()  # read just before the kill: nothing it used is lost
            w.kill()
            st.add_log(w)

    def cpu_used(self, problem: str | None = None, max_age: float = 0.0) -> float:
        """CPU seconds ``problem``'s workers (default: the current problem's) have
        used since each started serving, from readings at most ``max_age`` old."""
        problem = problem or self.problem
        if problem is None:
            return 0.0
        w = self._workers.get(problem)
        return self.states[problem].cpu_done + (w.charged(max_age) if w is not None else 0.0)

    def _clear_scratch(self) -> None:
        """Empty the scratch folder between two problems, so nothing a worker of
        the last problem wrote there (its hidden inputs, say) can reach a worker
        of the next one, whose failure messages students read. Every worker that
        ran submission code is gone by now (the last problem's was retired; the
        spare has served no request). pytest's base folder stays (it holds the
        next tests' ``tmp_path``), emptied; anything that cannot be removed makes
        the next problem's calls fail rather than run beside it."""
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
        """Kill every running worker, spare included (called by the scratch watch)."""
        for w in [*list(self._workers.values()), self._spare]:
            if w is not None and w.alive():
                w.stop(reason)

    def close(self) -> None:
        for p in list(self._workers):
            self._retire(p)
        if self._spare is not None:
            self._spare.kill()
            self._spare = None
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
        """Kill every worker of this submission (every problem's and the spare)
        and return once none of their processes exists; start no spare for the
        rest of the current problem. The next call starts a fresh worker.

        Raises RuntimeError when a process is still alive after ``timeout``.
        """
        self._isolated = self.problem
        workers = [*self._workers.values(), *([self._spare] if self._spare is not None else [])]
        self._killed += [p for w in workers for p in proctree.below(w.proc.pid)]  # before the kill
        for problem in list(self._workers):
            self._retire(problem)
        if self._spare is not None:
            self._spare.kill()
            self._spare = None
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
        its session (the worker leads its own session), and what retire_workers
        saw below the workers before its kill. (A dead worker leaves nothing
        behind: in bubblewrap its PID namespace dies with it, and elsewhere the
        seccomp filter let it create no process.) Without /proc: the live worker
        processes. ``besides_current``: not counting the current problem's
        worker and everything below it."""
        current = self._workers.get(self.problem) if (besides_current and self.problem) else None
        if not proctree.AVAILABLE:
            workers = [*self._workers.values(), *([self._spare] if self._spare is not None else [])]
            return [w.proc.pid for w in workers if w is not current and w.alive()]
        table = proctree.snapshot()
        found: set[int] = set()
        for root in self._roots:
            now = table.get(root.pid)
            if now is not None and now.start == root.start:  # (so root.pid is not a recycled pid)
                found |= set(process_tree(root.pid))
                found |= {p.pid for p in table.values() if p.sid == root.pid}
        found |= {p.pid for p in self._killed if (q := table.get(p.pid)) is not None and q.start == p.start}
        if current is not None:
            found -= set(process_tree(current.proc.pid))
        return sorted(pid for pid in found if (p := table.get(pid) or proctree.read(pid)) is not None and p.live)

    # ------------------------------------------------------------ Impl
    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        return self._request({"op": "call", "module": module, "function": function,
                              "args": args, "kwargs": kwargs})

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._request({"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs})

    def source(self, module: str) -> str:
        if module in self._sources:
            return self._sources[module]
        if f"{module}.__init__" in self._sources:
            return self._sources[f"{module}.__init__"]
        read_source(self._package, module)  # raises ValueError/FileNotFoundError with the reason
        raise FileNotFoundError(f"no module {module} in student/")

    def _fresh(self) -> None:
        assert self.problem is not None
        self._retire(self.problem)  # the next request takes the spare (or starts a worker)
        self._fresh_used = True

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
        return self._request(req, kill_when=kill_when)

    def measured_scenario(self, fn: Callable[..., Any], *args: Any, warm_up: Callable[..., Any] | None = None,
                          **kwargs: Any) -> tuple[Any, int]:
        if self.problem is not None:
            self._fresh()
        if warm_up is not None:  # harness code only: the implementation is first imported by the measured call
            self._request({"op": "scenario", "name": scenario_name(warm_up), "args": (), "kwargs": {}})
        req = {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs}
        return self._request(req, measure=True)

    def _refuse(self, st: ProblemState) -> None:
        """Raise what a call of a problem that cannot run any more raises."""
        assert self.problem is not None
        if self._scratch_error:
            st.fault = st.fault or self._scratch_error
        if st.fault:
            raise GraderFault(f"{self.problem}: not graded: {st.fault}")
        if st.cut:
            raise NotRun(f"{self.problem}: {st.cut}; this check did not run")

    def _cut(self, st: ProblemState, why: str) -> NotRun:
        st.cut = st.cut or why
        return NotRun(f"{self.problem}: {st.cut}; this check did not run")

    def _budget_spent(self, st: ProblemState) -> NotRun:
        return self._cut(st, f"the problem's CPU budget of {st.cpu_budget:.4g} s ran out")

    def _wall(self, cpu: float) -> float:
        """The wall-clock backstop of a wait whose CPU limit is ``cpu`` seconds."""
        return max(self.min_wall, self.wall_factor * cpu)

    def _start(self, worker: Worker, st: ProblemState) -> None:
        """Wait for ``worker``'s hello within the start-up limits. No code of the
        submission runs before it (the worker imports torch and the harness), so
        whatever goes wrong here is the machine's or the grader's."""
        if worker.hello is not None:
            return
        wall = self._wall(self.start_cpu)
        limit = Limit(cpu=self.start_cpu, wall=time.monotonic() + wall)
        try:
            hello = worker.wait_ready(limit)
        except WorkerError as e:
            self._retire(self.problem or "")
            worker.kill()
            if worker.killed_for:  # stopped by the grader for what the submission did (its scratch folder's caps)
                self._crashed(st, f"a worker's start-up: {e}")
                raise WorkerCrashed(f"{self.problem}: {e}") from None
            if isinstance(e, OutOfTime):
                why = (f"a worker did not start within {self.start_cpu:g} CPU s" if e.cpu else
                       f"a worker did not start within {wall:.0f} s of wall-clock time "
                       "(the machine is too busy?)" if e.limit.starved else
                       "a worker did not start: it waited without using the CPU (the machine's disk too slow?)")
            else:
                why = f"a worker could not start: {e}" + (
                    " (is the sandbox's bubblewrap still installed?)" if "status 127" in str(e) else "")
            st.fault = st.fault or why
            raise GraderFault(f"{self.problem}: not graded: {why}") from None
        st.seccomp = str(hello.get("seccomp", ""))

    def _request(self, req: dict[str, Any], *, kill_when: Callable[[], bool] | None = None,
                 measure: bool = False) -> Any:
        if self.problem is None:
            raise RuntimeError("RemoteImpl: no problem selected (the grader plugin calls enter())")
        st = self.states[self.problem]
        self._refuse(st)
        if st.cpu_budget - self.cpu_used(max_age=0.5) <= 0:
            raise self._budget_spent(st)
        payload = wire.encode(req)  # the test's own arguments: a WireError here is a test bug
        st.calls += 1
        worker = self._worker()
        self._start(worker, st)
        left = st.cpu_budget - self.cpu_used(max_age=0.5)
        cpu = min(self.call_cpu, left)
        limit = Limit(cpu=worker.meter.last.cpu + cpu, wall=time.monotonic() + self._wall(cpu))
        try:
            watch = MemoryWatch(worker.proc.pid) if measure else None
            # What the call stores in files (tmpfs pages, scratch blocks) is held as surely as its memory.
            stored = StorageWatch(worker.proc.pid, self._scratch, self._sandbox.mode == "bwrap",
                                  owner=self._sandbox.uid if self._sandbox.mode == "uid" else None) if measure else None
            if watch is not None and stored is not None:
                watch.start()
                stored.start()
            worker.write_frame(payload, limit)
            if kill_when is not None:
                polls = 0
                while not worker.readable(0.001):
                    if kill_when():  # the test saw its moment: kill, as a crash would
                        worker.kill_tree()
                        self._retire(self.problem)
                        return Interrupted(True)
                    polls += 1
                    if polls % 50 == 0:
                        worker.check(limit, "no reply in time")
            try:
                reply = decode_reply(worker.read_frame(limit), worker)
            finally:
                peak = watch.stop() + stored.stop() if watch is not None and stored is not None else 0
        except OutOfTime as e:
            self._retire(self.problem)
            if e.cpu and cpu < self.call_cpu:  # the problem's budget ran out, not the call's own limit
                raise self._budget_spent(st) from None
            if not e.cpu and e.limit.starved:
                st.fault = st.fault or (f"the machine was too busy: {_describe(req)} waited "
                                        f"{self._wall(cpu):.0f} s for a CPU")
                raise GraderFault(f"{self.problem}: not graded: {st.fault}") from None
            what = (f"a call used more than {cpu:.4g} CPU s" if e.cpu else
                    f"a call waited {self._wall(cpu):.0f} s while hardly using the CPU "
                    "(asleep or blocked)")
            st.timeouts.append(f"{what} ({_describe(req)})")
            if len(st.timeouts) >= self.max_timeouts:
                st.cut = st.cut or f"{len(st.timeouts)} calls ran past their limits"
            raise WorkerTimeout(f"{self.problem}: {what} ({_describe(req)})") from None
        except WorkerCrashed as e:
            self._retire(self.problem)
            if isinstance(e, KilledForMemory) and e.peak < self._sandbox.limits.memory_bytes:
                # Killed below its own limit: the machine ran out of memory, the submission did not overdraw.
                st.fault = st.fault or (f"the machine ran out of memory: {_describe(req)}: {e}; a worker may hold "
                                        f"{self._sandbox.limits.memory_bytes / (1 << 30):.1f} GiB")
                raise GraderFault(f"{self.problem}: not graded: {st.fault}") from None
            self._crashed(st, f"{_describe(req)}: {e}")
            raise type(e)(f"{self.problem}: {_describe(req)}: {e}") from None
        value = self._unpack(reply, req)
        if kill_when is not None:
            return Interrupted(False, value)
        return (value, peak) if measure else value

    def _crashed(self, st: ProblemState, what: str) -> None:
        st.crashes.append(what)
        if len(st.crashes) >= self.max_crashes:
            st.cut = st.cut or f"the worker crashed {len(st.crashes)} times (last: {st.crashes[-1][:300]})"

    def _garbage(self, req: dict[str, Any], what: str) -> ProtocolError:
        assert self.problem is not None
        self._retire(self.problem)
        self._crashed(self.states[self.problem], f"{_describe(req)}: {what}")
        return ProtocolError(f"{self.problem}: {_describe(req)}: {what}")

    def _unpack(self, reply: Any, req: dict[str, Any]) -> Any:
        try:
            with stubs_fail_fast():  # an untouched stub fails its check at once, as in a student's pytest
                return reply_value(reply)
        except MalformedReply as e:
            raise self._garbage(req, str(e)) from None


def _describe(req: dict[str, Any]) -> str:
    if req.get("op") == "scenario":
        return f"scenario {req.get('name')}"
    return f"{req.get('module')}.{req.get('function')}"

"""RemoteImpl: the implementation under test, reached in a sandboxed worker.

:class:`RemoteImpl` implements :class:`tests.harness.Impl` for the grader's
trusted pytest process: the lifecycle of the workers
(:class:`grader.workerproc.Worker`) of one submission. Each problem gets its
own long-lived worker process (see :mod:`grader.worker`), started from a warm
spare so that importing torch overlaps with the previous problem's checks;
each call's deadline, the problem's time limit and crash count are kept in a
:class:`ProblemState`. Requests and replies are length-prefixed
:mod:`tests.wire` frames on dedicated pipes; replies are decoded with
:func:`tests.wire.decode` only, and errors are re-raised as the builtin
exception the worker named (anything else as :class:`RemoteError`).

When the worker times out, crashes or talks garbage, it is killed and the call
raises a :class:`WorkerError` (a ``BaseException``, see
:mod:`grader.workerproc`). After a timeout, or after ``max_crashes`` crashes,
further calls of that problem fail at once: a hang costs that problem, not the
run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader import proctree
from grader.limits import worker_slots
from grader.sandbox import Sandbox
from grader.scratch import BASETEMP, remove_tree
from grader.worker import WorkerConfig
from grader.workerproc import (
    LOG_CAP,
    MalformedReply,
    ProtocolError,
    RemoteError,
    Worker,
    WorkerCrashed,
    WorkerError,
    WorkerTimeout,
    decode_reply,
    reply_value,
)
from tests import wire
from tests.harness import ImplBase, Interrupted, MemoryWatch, read_source, scenario_name

__all__ = ["LOG_CAP", "ProblemState", "ProtocolError", "RemoteError", "RemoteImpl", "WorkerCrashed", "WorkerError",
           "WorkerTimeout"]


@dataclass
class ProblemState:
    """What happened to one problem's worker(s); read by the report."""

    time_limit: float
    deadline: float = 0.0
    started: float = 0.0
    calls: int = 0
    crashes: list[str] = field(default_factory=list)
    timeout: str = ""
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
        call_timeout: float = 60.0, start_timeout: float = 120.0, max_crashes: int = 3,
        max_reply: int = 512 << 20, config: WorkerConfig | None = None, processes: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        self._sandbox, self._work, self._scratch = sandbox, work, scratch
        self._config = config if config is not None else WorkerConfig()
        self._order = list(problems)
        self.states = {p: ProblemState(limit) for p, limit in problems.items()}
        self.call_timeout, self.start_timeout = call_timeout, start_timeout
        self.max_crashes, self.max_reply = max_crashes, max_reply
        self.problem: str | None = None
        self._workers: dict[str, Worker] = {}
        self._spare: Worker | None = None
        self._processes = processes or {}
        self._isolated: str | None = None  # the problem that runs with no spare (retire_workers)
        self._roots: list[proctree.Proc] = []  # every worker process started (live_processes)
        self._killed: list[proctree.Proc] = []  # their trees as seen just before retire_workers killed them
        self._fresh_used = False
        self._scratch_error = ""  # set when the scratch folder could not be emptied (_clear_scratch)
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
        st = self.states[problem]
        if not st.started:
            st.started = time.monotonic()
            st.deadline = st.started + st.time_limit

    def _spawn(self, processes: int = 0) -> Worker:
        config = replace(self._config, processes=processes) if processes else self._config
        worker = Worker(self._sandbox, self._work, self._scratch, config, self.max_reply)
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
        processes = self._processes.get(self.problem, 0)
        if processes:  # a worker allowed to create processes (the spare is not)
            w = self._spawn(processes)
        elif self._spare is not None and self._spare.alive():
            w, self._spare = self._spare, None
        else:
            w = self._spawn()
        self._workers[self.problem] = w
        if (self._isolated != self.problem and (self._spare is None or not self._spare.alive())
                and (self._fresh_used or any(not self.states[p].started for p in self._order))
                and self._spare_fits()):
            # Warm up the next problem's worker meanwhile, or the next fresh
            # worker of a problem whose checks ask for them (never while a
            # problem runs isolated: see retire_workers).
            if self._spare is not None:
                self._spare.kill()  # it died while waiting
            self._spare = self._spawn()
        return w

    def _spare_fits(self) -> bool:
        """A spare worker only when a second worker's memory limit fits the
        free memory too (else the next problem starts its worker cold)."""
        return self._sandbox.gpu or worker_slots(self._sandbox.limits.memory_bytes, trusted=0) >= 2

    def _retire(self, problem: str) -> None:
        w = self._workers.pop(problem, None)
        if w is not None:
            w.kill()
            self.states[problem].add_log(w)

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

    # ------------------------------------------------------------ isolation (grader/mfu.py)
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
        table = proctree.snapshot()
        self._killed += [p for w in workers for p in proctree.descendants(w.proc.pid, table)]  # before the kill
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
                found |= {p.pid for p in proctree.descendants(root.pid, table)}
                found |= {p.pid for p in table.values() if p.sid == root.pid}
        found |= {p.pid for p in self._killed if (q := table.get(p.pid)) is not None and q.start == p.start}
        if current is not None:
            found -= {p.pid for p in proctree.descendants(current.proc.pid, table)}
        return sorted(pid for pid in found if table[pid].live)

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
        if self.problem is not None:
            self._fresh()
        req = {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs}
        return self._request(req, kill_when=kill_when, kill_timeout=timeout)

    def measured_scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
        if self.problem is not None:
            self._fresh()
        req = {"op": "scenario", "name": scenario_name(fn), "args": args, "kwargs": kwargs}
        return self._request(req, measure=True)

    def _request(self, req: dict[str, Any], *, kill_when: Callable[[], bool] | None = None,
                 kill_timeout: float = 0.0, measure: bool = False) -> Any:
        if self.problem is None:
            raise RuntimeError("RemoteImpl: no problem selected (the grader plugin calls enter())")
        st = self.states[self.problem]
        if self._scratch_error:
            raise WorkerCrashed(f"{self.problem}: {self._scratch_error}; its calls are not run")
        if st.timeout:
            raise WorkerTimeout(f"{self.problem}: {st.timeout}; its remaining calls are not run")
        if len(st.crashes) >= self.max_crashes:
            raise WorkerCrashed(f"{self.problem}: the worker crashed {len(st.crashes)} times "
                                f"(last: {st.crashes[-1]}); its remaining calls are not run")
        now = time.monotonic()
        if now >= st.deadline:
            st.timeout = f"the problem's time limit of {st.time_limit:g} s ran out"
            raise WorkerTimeout(f"{self.problem}: {st.timeout}")
        payload = wire.encode(req)  # the test's own arguments: a WireError here is a test bug
        st.calls += 1
        worker = self._worker()
        try:
            hello = worker.wait_ready(min(st.deadline, time.monotonic() + self.start_timeout))
            st.seccomp = str(hello.get("seccomp", ""))
            deadline = min(st.deadline, time.monotonic() + self.call_timeout)
            watch = MemoryWatch(worker.proc.pid) if measure else None
            if kill_when is not None:
                deadline = min(deadline, time.monotonic() + kill_timeout)
            if watch is not None:
                watch.start()
            worker.write_frame(payload, deadline)
            if kill_when is not None:
                while not worker.readable(0.001):
                    if kill_when():  # the test saw its moment: kill, as a crash would
                        worker.kill_tree()
                        self._retire(self.problem)
                        return Interrupted(True)
                    if time.monotonic() >= deadline:
                        raise WorkerTimeout("no reply in time")
            try:
                reply = decode_reply(worker.read_frame(deadline), worker)
            finally:
                peak = watch.stop() if watch is not None else 0
        except WorkerTimeout as e:
            self._retire(self.problem)
            if time.monotonic() >= st.deadline - 0.05:
                what = f"the problem's time limit of {st.time_limit:g} s ran out"
            elif worker.hello is None:
                what = f"the worker did not start within {self.start_timeout:g} s"
            else:
                what = f"a call took longer than {self.call_timeout:g} s"
            st.timeout = f"{what} ({_describe(req)}: {e})"
            raise WorkerTimeout(f"{self.problem}: {st.timeout}") from None
        except WorkerCrashed as e:
            self._retire(self.problem)
            st.crashes.append(f"{_describe(req)}: {e}")
            raise type(e)(f"{self.problem}: {_describe(req)}: {e}") from None
        value = self._unpack(reply, req)
        if kill_when is not None:
            return Interrupted(False, value)
        return (value, peak) if measure else value

    def _garbage(self, req: dict[str, Any], what: str) -> ProtocolError:
        assert self.problem is not None
        self._retire(self.problem)
        self.states[self.problem].crashes.append(f"{_describe(req)}: {what}")
        return ProtocolError(f"{self.problem}: {_describe(req)}: {what}")

    def _unpack(self, reply: Any, req: dict[str, Any]) -> Any:
        try:
            return reply_value(reply)
        except MalformedReply as e:
            raise self._garbage(req, str(e)) from None


def _describe(req: dict[str, Any]) -> str:
    if req.get("op") == "scenario":
        return f"scenario {req.get('name')}"
    return f"{req.get('module')}.{req.get('function')}"

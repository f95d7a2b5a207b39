"""RemoteImpl: the implementation under test, reached in a sandboxed worker.

:class:`RemoteImpl` implements :class:`tests.harness.Impl` for the grader's
trusted pytest process. Each problem gets its own long-lived worker process
(see :mod:`grader.worker`), started from a warm spare so that importing torch
overlaps with the previous problem's checks. Requests and replies are
length-prefixed :mod:`tests.wire` frames on dedicated pipes; replies are decoded
with :func:`tests.wire.decode` only, and errors are re-raised as the builtin
exception the worker named (anything else as :class:`RemoteError`).

When the worker times out, crashes or talks garbage, it is killed and the call
raises a :class:`WorkerError`, which derives from ``BaseException`` on purpose:
``pytest.raises(ValueError)`` (or even ``pytest.raises(Exception)``) cannot be
passed by crashing, and hypothesis does not retry it while shrinking. After a
timeout, or after ``max_crashes`` crashes, further calls of that problem fail at
once: a hang costs that problem, not the run.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import proctree
from grader.sandbox import PidsCgroup, Sandbox, pids_limit
from tests import wire
from tests.harness import ImplBase, Interrupted, MemoryWatch, process_tree, read_source, scenario_name

__all__ = ["ProtocolError", "RemoteError", "RemoteImpl", "WorkerCrashed", "WorkerError", "WorkerTimeout"]

_FRAME = wire.FRAME  # the one frame format (tests/wire.py)
#: Exceptions re-raised as themselves (the worker's list, plus its "NotData").
_BUILTIN = {name: getattr(builtins, name) for name in (
    "NotImplementedError", "ValueError", "TypeError", "KeyError", "IndexError",
    "ZeroDivisionError", "OverflowError", "RuntimeError", "AttributeError",
    "FileNotFoundError", "OSError", "LookupError", "ArithmeticError",
)}
LOG_CAP = 64 << 10


class WorkerError(BaseException):
    """The worker did not answer with data (not an answer of the submission)."""


class WorkerTimeout(WorkerError):
    """A call, or the problem's time limit, ran out."""


class WorkerCrashed(WorkerError):
    """The worker died (exit, signal, rlimit) before answering."""


class ProtocolError(WorkerCrashed):
    """The worker's reply was not a well-formed frame of data."""


class RemoteError(Exception):
    """An exception raised by the submission that is not one of the mapped builtins."""

    def __init__(self, message: str, remote_type: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        code = 128 - code  # bwrap exits 128+N when its child is killed by signal N
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed: memory or time limit?)",
                "SIGSEGV": " (segmentation fault)", "SIGXFSZ": " (file size limit)",
                "SIGBUS": " (a mapped file could not be backed: /tmp full?)"}.get(name, "")
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


class Worker:
    """One worker process and its pipes."""

    def __init__(self, sandbox: Sandbox, work: Path, scratch: Path, config: str, max_reply: int) -> None:
        self.max_reply = max_reply
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        argv, env, cwd = sandbox.command(work, scratch, req_r, rep_w, config)
        # A process cap that holds for root too, where a pids cgroup can be made.
        self.cgroup = PidsCgroup.create(pids_limit(int(json.loads(config).get("processes", 0))))
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        self.log = bytearray()
        self.log_dropped = 0
        self.hello: dict[str, Any] | None = None
        self.killed_for = ""  # why the trusted side killed it (the scratch watch), if it did
        try:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=cwd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.close()
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        os.set_blocking(self.req_w, False)
        self._drain = threading.Thread(target=self._drain_log, daemon=True)
        self._drain.start()

    def _drain_log(self) -> None:
        # Keep the first LOG_CAP bytes; read (and drop) the rest so that a print
        # flood never blocks the worker.
        out = self.proc.stdout
        assert out is not None
        while chunk := out.read1(1 << 16):
            room = LOG_CAP - len(self.log)
            self.log += chunk[: max(room, 0)]
            self.log_dropped += max(len(chunk) - max(room, 0), 0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def readable(self, timeout: float) -> bool:
        return bool(select.select([self.rep_r], [], [], timeout)[0])

    def kill_tree(self) -> None:
        """SIGKILL every process of the sandbox and wait until they are gone,
        so that files are inspected only once nothing can write them any more."""
        pids = process_tree(self.proc.pid) if self.alive() else []
        for pid in reversed(pids):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.kill()
        deadline = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < deadline and _running(pid):
                time.sleep(0.005)

    def stop(self, reason: str) -> None:
        """Kill the worker from another thread (its pipes stay open: the call
        waiting on it sees the end of its reply pipe and reports ``reason``)."""
        self.killed_for = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None
        for fd in (self.req_w, self.rep_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.req_w = self.rep_r = -1
        self._drain.join(timeout=2)

    def _died(self, what: str) -> WorkerCrashed:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        # The signal or exit status only: the submission's output (which could
        # echo hidden inputs just before exiting) stays in the instructors' log.
        if self.killed_for:
            return WorkerCrashed(f"the worker was killed by the grader: {self.killed_for}")
        return WorkerCrashed(f"the worker {_signal_name(code)} {what}")

    def _read(self, n: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout("no reply in time")
            ready, _, _ = select.select([self.rep_r], [], [], left)
            if not ready:
                continue
            b = os.read(self.rep_r, min(n - got, 1 << 20))
            if not b:
                raise self._died("before replying (did the submission exit, crash or run out of memory?)")
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)

    def read_frame(self, deadline: float) -> bytes:
        (n,) = _FRAME.unpack(self._read(_FRAME.size, deadline))
        if n > self.max_reply:
            self.kill()
            raise ProtocolError(f"the worker announced a reply of {n} bytes (limit {self.max_reply})")
        return self._read(n, deadline)

    def write_frame(self, data: bytes, deadline: float) -> None:
        view = memoryview(_FRAME.pack(len(data)) + data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout("the worker stopped reading requests")
            _, ready, _ = select.select([], [self.req_w], [], left)
            if not ready:
                continue
            try:
                view = view[os.write(self.req_w, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._died("while receiving a request") from None

    def wait_ready(self, deadline: float) -> dict[str, Any]:
        if self.hello is None:
            msg = _decode(self.read_frame(deadline), self)
            if type(msg) is not dict or type(msg.get("hello")) is not dict:
                self.kill()
                raise ProtocolError("the worker did not start properly")
            self.hello = msg["hello"]
        return self.hello


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie or a vanished pid does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _decode(data: bytes, worker: Worker) -> Any:
    try:
        return wire.decode(data)
    except Exception as e:  # WireError, but also int-parsing or recursion limits
        worker.kill()
        raise ProtocolError(f"malformed reply from the worker: {type(e).__name__}: {str(e)[:300]}") from None


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
        max_reply: int = 512 << 20, config: str = "{}", processes: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        self._sandbox, self._work, self._scratch, self._config = sandbox, work, scratch, config
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
        self.problem = problem
        st = self.states[problem]
        if not st.started:
            st.started = time.monotonic()
            st.deadline = st.started + st.time_limit

    def _spawn(self, processes: int = 0) -> Worker:
        config = self._config
        if processes:
            config = json.dumps({**json.loads(config), "processes": processes})
        worker = Worker(self._sandbox, self._work, self._scratch, config, self.max_reply)
        root = proctree.read(worker.proc.pid)
        if root is not None:
            self._roots.append(root)
        return worker

    def _worker(self) -> tuple[Worker, bool]:
        assert self.problem is not None
        w = self._workers.get(self.problem)
        if w is not None and w.alive():
            return w, True
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
        return w, False

    def _spare_fits(self) -> bool:
        """A spare worker only when a second worker's memory limit fits the
        free memory too (else the next problem starts its worker cold)."""
        from grader.sandbox import worker_slots

        return self._sandbox.gpu or worker_slots(self._sandbox.limits.memory_bytes, trusted=0) >= 2

    def _retire(self, problem: str) -> None:
        w = self._workers.pop(problem, None)
        if w is not None:
            w.kill()
            self.states[problem].add_log(w)

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
        worker, _warm = self._worker()
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
                reply = _decode(worker.read_frame(deadline), worker)
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
        value = self._unpack(reply, worker, req)
        if kill_when is not None:
            return Interrupted(False, value)
        return (value, peak) if measure else value

    def _garbage(self, req: dict[str, Any], what: str) -> ProtocolError:
        assert self.problem is not None
        self._retire(self.problem)
        self.states[self.problem].crashes.append(f"{_describe(req)}: {what}")
        return ProtocolError(f"{self.problem}: {_describe(req)}: {what}")

    def _unpack(self, reply: Any, worker: Worker, req: dict[str, Any]) -> Any:
        if type(reply) is not dict or type(reply.get("ok")) is not bool:
            raise self._garbage(req, "the worker's reply is not a reply")
        if reply["ok"]:
            if set(reply) != {"ok", "value"}:
                raise self._garbage(req, "the worker's reply has unexpected fields")
            return reply["value"]
        kind, message = reply.get("type"), reply.get("message")
        original, tb = reply.get("original", ""), reply.get("traceback", "")
        if not all(type(v) is str for v in (kind, message, original, tb)):
            raise self._garbage(req, "the worker's error reply is malformed")
        message, tb = message[:5000], tb[-5000:]
        cls = _BUILTIN.get(kind)
        if kind == "NotData":
            raise RemoteError(message, "NotData")
        if cls is None:
            raise RemoteError(f"{original}: {message}\n\nin the submission:\n{tb}", original)
        if cls is KeyError:
            raise KeyError(message)
        raise cls(f"{message}\n\nraised in the submission ({original}):\n{tb}" if tb else message)


def _describe(req: dict[str, Any]) -> str:
    if req.get("op") == "scenario":
        return f"scenario {req.get('name')}"
    return f"{req.get('module')}.{req.get('function')}"

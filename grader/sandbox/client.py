"""One worker process seen from the trusted side: start, pipes, replies.

:class:`Worker` starts a sandboxed worker (grader/worker/main.py, through
:meth:`grader.sandbox.isolation.Sandbox.command`, in its own pids cgroup where one can
be made), drains its output into a capped log, and exchanges
:mod:`tests.wire` frames with it under deadlines. :func:`decode_reply` and
:func:`reply_value` turn a reply into a value or the exception the worker
named (a builtin of :data:`tests.wire.MAPPED_ERRORS`, else
:class:`RemoteError`).

Every wait on the worker is bounded by a :class:`Limit`: the CPU seconds its
process tree may use (read from outside by its :class:`grader.sandbox.meter.Meter`)
and a wall-clock backstop; past either it raises :class:`OutOfTime`, which
says which one ran out and whether the tree was starved of CPU meanwhile.

When the worker times out, crashes or talks garbage the call raises a
:class:`WorkerError`, a ``BaseException`` on purpose; :class:`NotRun` and
:class:`GraderFault` are no verdict on the submission. Why, and what each
costs a problem: see grader/README.md, "Budgets". :mod:`grader.sandbox.remote`
builds the per-problem lifecycle on top of this.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.sandbox import proctree
from grader.sandbox.cgroups import PidsCgroup, pids_limit
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP
from grader.sandbox.meter import Meter
from grader.sandbox.optimseal import SealedOptim
from grader.sandbox.scratch import remove_tree
from grader.sandbox.workcopy import private_copy
from grader.worker.main import WorkerConfig
from tests import wire
from tests.memwatch import process_tree

__all__ = ["GraderFault", "KilledForMemory", "Limit", "MalformedReply", "NotRun", "OutOfTime", "ProtocolError",
           "RemoteError", "Worker", "WorkerCrashed", "WorkerError", "WorkerTimeout", "decode_reply", "oom_kills",
           "reply_value"]

#: Exceptions re-raised as themselves (the one table: tests.wire.MAPPED_ERRORS).
_BUILTIN = {name: getattr(builtins, name) for name in wire.MAPPED_ERRORS}


class WorkerError(BaseException):
    """The worker did not answer with data (not an answer of the submission)."""


class WorkerTimeout(WorkerError):
    """A call ran past its own limit: it used more CPU time than a call may, or
    waited past the backstop while hardly using the CPU (asleep or blocked)."""


class WorkerCrashed(WorkerError):
    """The worker died (exit, signal, rlimit) before answering."""


class ProtocolError(WorkerCrashed):
    """The worker's reply was not a well-formed frame of data."""


class KilledForMemory(WorkerCrashed):
    """The kernel's out-of-memory killer ended the worker (it was SIGKILLed, not
    by the grader, while the machine's OOM-kill count rose). ``peak`` is the
    most resident memory the grader saw it hold (bytes): below its own memory
    limit, the machine was too small (:class:`grader.sandbox.remote.RemoteImpl` makes it
    a grader fault), above it the submission took the memory."""

    def __init__(self, message: str, peak: int) -> None:
        super().__init__(message)
        self.peak = peak


class NotRun(WorkerError):
    """The check did not run (to its end): its problem's CPU budget was spent,
    or the problem was cut short before it. No verdict on this check."""


class GraderFault(WorkerError):
    """A fault of the machine or of the grader, not of the submission: the
    worker could not start, the machine starved it of CPU, the grader could not
    clean up after the last problem. The problem is not graded (and regraded)."""


#: The most a worker's hello may take (it is the grader's own, small frame).
HELLO_BYTES = 1 << 16
#: Seconds between two looks at a worker that has not answered yet.
POLL = 0.05


@dataclass
class Limit:
    """How long a wait on a worker may last: until its process tree has used
    ``cpu`` CPU seconds (a reading of its meter), or until ``wall`` (a
    ``time.monotonic()`` backstop). ``polls`` and ``runnable`` count the looks
    taken while waiting and those that found the tree running or waiting for
    a CPU."""

    cpu: float
    wall: float
    polls: int = 0
    runnable: int = 0

    @property
    def starved(self) -> bool:
        """Whether the tree mostly wanted a CPU while it waited (the machine was
        too busy to run it) rather than sleeping or blocking (its own doing)."""
        return self.polls >= 4 and self.runnable * 2 >= self.polls


class OutOfTime(WorkerTimeout):
    """A wait ran past its :class:`Limit`: its CPU (``cpu`` True) or its
    wall-clock backstop; ``limit`` holds what the waits saw."""

    def __init__(self, message: str, *, cpu: bool, limit: Limit) -> None:
        super().__init__(message)
        self.cpu, self.limit = cpu, limit


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

    def __init__(self, sandbox: Sandbox, work: Path, scratch: Path, config: WorkerConfig, max_reply: int,
                 sealed_optim: SealedOptim | None = None) -> None:
        """``sealed_optim``: the sealed torch.optim sources its sandbox shows
        instead of torch's (see :meth:`grader.sandbox.isolation.Sandbox.command`)."""
        self.max_reply = max_reply
        self.sealed_optim = sealed_optim is not None
        # Its own copy of the files: workers never share an inode (an flock on
        # one would be a channel between a hidden check's worker and another's).
        self.work = private_copy(work)
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        argv, env, cwd = sandbox.command(self.work, scratch, req_r, rep_w, config, sealed_optim)
        credentials = sandbox.credentials()  # uid mode: the worker's own unprivileged uid
        # A process cap that holds for root too, where a pids cgroup can be made.
        self.cgroup = PidsCgroup.create(pids_limit(config.processes))
        if self.cgroup is not None and not credentials:
            argv = self.cgroup.wrap(argv)
        self.log = bytearray()
        self.log_dropped = 0
        self.hello: dict[str, Any] | None = None
        self.killed_for = ""  # why the trusted side killed it (the scratch watch), if it did
        try:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=cwd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, **credentials,
            )
            if self.cgroup is not None and credentials:
                # The worker's uid may not move itself into root's cgroup: the
                # grader moves it, long before it imports the submission (after its hello).
                (self.cgroup.path / "cgroup.procs").write_text(str(self.proc.pid))
        except BaseException:
            if hasattr(self, "proc"):
                self.proc.kill()
            if self.cgroup is not None:
                self.cgroup.close()
            remove_tree(self.work)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        os.set_blocking(self.req_w, False)
        self.meter = Meter(self.proc.pid)
        self.oom_kills_at_start = oom_kills()
        self.cpu_at_hello = 0.0  # the tree's CPU seconds once it said hello: start-up is not the submission's
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

    def charged(self, max_age: float = 0.0) -> float:
        """CPU seconds the tree used since it said hello (0 before), from a
        reading at most ``max_age`` seconds old (0: read now)."""
        if self.hello is None:
            return 0.0
        reading = self.meter.last
        if time.monotonic() - reading.at > max_age and self.alive():
            reading = self.meter.read()
        return max(0.0, reading.cpu - self.cpu_at_hello)

    def check(self, limit: Limit, what: str) -> None:
        """Look at the tree once; raise :class:`OutOfTime` past ``limit``."""
        reading = self.meter.read()
        limit.polls += 1
        limit.runnable += reading.runnable
        if reading.cpu >= limit.cpu:
            raise OutOfTime(what, cpu=True, limit=limit)
        if reading.at >= limit.wall:
            raise OutOfTime(what, cpu=False, limit=limit)

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
            while time.monotonic() < deadline and (p := proctree.read(pid)) is not None and p.live:
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
        if self.proc.poll() is not None:  # nothing of the sandbox reads it any more
            with contextlib.suppress(OSError):
                remove_tree(self.work)

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
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) and oom_kills() > self.oom_kills_at_start:
            return KilledForMemory(f"the worker was killed by the kernel for want of memory (it held "
                                   f"{self.meter.peak_rss / (1 << 20):.0f} MiB at most, as last seen)",
                                   self.meter.peak_rss)
        return WorkerCrashed(f"the worker {_signal_name(code)} {what}")

    def _waiter(self, fd: int, writing: bool, limit: Limit, what: str) -> Callable[[], None]:
        """A ``wait`` for :mod:`tests.wire`'s frame functions: returns once
        ``fd`` is ready; looks at the tree every :data:`POLL` seconds meanwhile
        and raises :class:`OutOfTime` (``what``) past ``limit``."""
        def wait() -> None:
            while True:
                left = limit.wall - time.monotonic()
                if left <= 0:
                    raise OutOfTime(what, cpu=False, limit=limit)
                timeout = min(left, POLL)
                ready = select.select([], [fd], [], timeout)[1] if writing else select.select([fd], [], [], timeout)[0]
                if ready:
                    return
                self.check(limit, what)
        return wait

    def read_frame(self, limit: Limit,
                   died: str = "before replying (did the submission exit, crash or run out of memory?)",
                   max_bytes: int | None = None) -> bytes:
        """The next reply frame's bytes; OutOfTime past ``limit``,
        WorkerCrashed (saying it ``died`` so) at end of file, ProtocolError
        past ``max_bytes`` (default ``max_reply``)."""
        try:
            data = wire.read_frame(self.rep_r, self.max_reply if max_bytes is None else max_bytes,
                                   self._waiter(self.rep_r, False, limit, "no reply in time"))
        except wire.FrameTooLarge as e:
            self.kill()
            raise ProtocolError(f"the worker announced a reply of {e.size} bytes (limit {e.limit})") from None
        if data is None:
            raise self._died(died)
        return data

    def write_frame(self, data: bytes, limit: Limit) -> None:
        """Send one request frame; OutOfTime past ``limit``, WorkerCrashed
        when the worker's end of the pipe is gone."""
        try:
            wire.write_frame(self.req_w, data,
                             self._waiter(self.req_w, True, limit, "the worker stopped reading requests"))
        except OSError:  # BrokenPipeError and the like (WorkerTimeout is no OSError)
            raise self._died("while receiving a request") from None

    def wait_ready(self, limit: Limit) -> dict[str, Any]:
        """The worker's hello (read once, within ``limit``); from then on its CPU
        time counts (:meth:`charged`)."""
        if self.hello is None:
            frame = self.read_frame(limit, "before it was ready (nothing of the submission had run)", HELLO_BYTES)
            msg = decode_reply(frame, self)
            if type(msg) is not dict or type(msg.get("hello")) is not dict:
                self.kill()
                raise ProtocolError("the worker did not start properly")
            self.cpu_at_hello = self.meter.read().cpu
            self.hello = msg["hello"]
        return self.hello


def oom_kills() -> int:
    """How many processes the kernel's out-of-memory killer has ended since boot
    (``/proc/vmstat``; 0 where the kernel does not say)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def decode_reply(data: bytes, worker: Worker) -> Any:
    """``data`` decoded with :func:`tests.wire.decode`; anything it refuses
    kills ``worker`` and raises ProtocolError."""
    try:
        return wire.decode(data)
    except Exception as e:  # WireError, but also int-parsing or recursion limits
        worker.kill()
        raise ProtocolError(f"malformed reply from the worker: {type(e).__name__}: {str(e)[:300]}") from None


class MalformedReply(Exception):
    """A decoded reply that is not a reply (the caller turns it into a ProtocolError)."""


def reply_value(reply: Any) -> Any:
    """The value of a decoded reply ``{"ok": True, "value": ...}``; for an
    error reply, raises the builtin the worker named (one of
    :data:`tests.wire.MAPPED_ERRORS`) or :class:`RemoteError`, with the
    submission's message and traceback (capped). Raises MalformedReply for
    anything else."""
    if type(reply) is not dict or type(reply.get("ok")) is not bool:
        raise MalformedReply("the worker's reply is not a reply")
    if reply["ok"]:
        if set(reply) != {"ok", "value"}:
            raise MalformedReply("the worker's reply has unexpected fields")
        return reply["value"]
    kind, message = reply.get("type"), reply.get("message")
    original, tb = reply.get("original", ""), reply.get("traceback", "")
    if not all(type(v) is str for v in (kind, message, original, tb)):
        raise MalformedReply("the worker's error reply is malformed")
    message, tb = message[:5000], tb[-5000:]
    cls = _BUILTIN.get(kind)
    if kind == "NotData":
        raise RemoteError(message, "NotData")
    if cls is None:
        raise RemoteError(f"{original}: {message}\n\nin the submission:\n{tb}", original)
    if cls is KeyError:
        raise KeyError(message)
    raise cls(f"{message}\n\nraised in the submission ({original}):\n{tb}" if tb else message)

"""One worker seen from the trusted side: its process, pipes, output and replies.

A :class:`Worker` is started by a :class:`grader.sandbox.forkserver.ForkServer`.
A worker is known by its pid on this side and its start time (a pidfd where
the kernel has one): a forked one is never this process's child, so its exit
is read from ``/proc``.

Each worker's output is drained into a capped log; requests and replies are
:mod:`tests.wire` frames exchanged under deadlines. :func:`decode_reply`
decodes a reply (a worker whose reply does not decode is killed);
:func:`tests.wire.reply_value` turns it into a value or the exception the
worker named (a builtin of :data:`tests.wire.BUILTIN_ERRORS`, else
:class:`tests.wire.RemoteError`), as in a student's ``pytest``.

Every wait on a worker is bounded by a :class:`grader.sandbox.errors.Limit`;
what a call raises when the worker gives no value is a
:class:`grader.sandbox.errors.WorkerError` (:mod:`grader.sandbox.errors`).
:mod:`grader.sandbox.remote` builds the per-problem lifecycle on top of this.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from grader.sandbox import proctree
from grader.sandbox.cgroups import MemoryCgroup, PidsCgroup
from grader.sandbox.errors import KilledForMemory, Limit, OutOfTime, ProtocolError, WorkerCrashed
from grader.sandbox.limits import LOG_CAP
from grader.sandbox.meter import Meter
from tests import wire

__all__ = ["HELLO_BYTES", "POLL", "Worker", "decode_reply", "how_ended", "oom_kills"]

#: The most a hello or a fork server's answer may take (the grader's own, small messages).
HELLO_BYTES = 1 << 16
#: Seconds between two looks at a worker that has not answered yet.
POLL = 0.05


def how_ended(code: int | None) -> str:
    """How a process ended, from its exit status (a negative number: the signal)."""
    if code is None:
        return "ended"
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
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


def _exit_status(pid: int) -> int | None:
    """The exit status of ``pid`` while it is a zombie (``/proc/PID/stat``'s
    ``exit_code``, Linux 3.5 and later), as :attr:`subprocess.Popen.returncode`
    gives it (negative: the signal); None when it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        raw = int(text[text.rindex(")") + 2 :].split()[49])
    except (OSError, ValueError, IndexError):
        return None
    return -(raw & 0x7F) if raw & 0x7F else raw >> 8


def _pidfd(pid: int) -> int:
    """A pidfd of ``pid`` (-1 where the kernel or Python has none)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return -1


class Worker:
    """One worker process: its pipes, its output, its meter.

    ``pid`` is its pid as this process sees it; ``proc`` is set when this
    process started it itself (no fork server), else it is a fork server's
    child, known by ``(pid, start)`` and a pidfd."""

    def __init__(self, pid: int, req_w: int, rep_r: int, log_r: int, max_reply: int,
                 proc: subprocess.Popen[bytes] | None = None, cgroup: PidsCgroup | None = None) -> None:
        self.pid, self.proc, self.max_reply, self.cgroup = pid, proc, max_reply, cgroup
        self.memcg: MemoryCgroup | None = None  # where a call's memory is measured (measure_memory)
        #: whether it could lower its own priority (no Landlock keeps it from /proc/self/autogroup): a wait
        #: then reads its priority from outside before calling it starvation (proctree.lowered_priority)
        self.can_lower_priority = True
        self.req_w, self.rep_r = req_w, rep_r
        first = proctree.read(pid)
        self.start = first.start if first is not None else -1
        self.pidfd = _pidfd(pid) if proc is None else -1
        os.set_blocking(self.req_w, False)
        self.log = bytearray()
        self.log_dropped = 0
        self.hello: dict[str, Any] | None = None
        self.killed_for = ""  # why the trusted side killed it (the scratch watch), if it did
        self.meter = Meter(pid)
        self.oom_kills_at_start = oom_kills()
        self.cpu_at_hello = 0.0  # the tree's CPU seconds once it said hello: start-up is not the submission's
        self.rss_at_hello = 0  # its resident bytes then (what a forked worker shares with its server counts)
        self._log_r = log_r
        self._drain = threading.Thread(target=self._drain_log, daemon=True)
        self._drain.start()

    def _drain_log(self) -> None:
        # Keep the first LOG_CAP bytes; read (and drop) the rest so that a print
        # flood never blocks the worker.
        with os.fdopen(self._log_r, "rb", buffering=0) as out:
            while chunk := out.read(1 << 16):
                room = LOG_CAP - len(self.log)
                self.log += chunk[: max(room, 0)]
                self.log_dropped += max(len(chunk) - max(room, 0), 0)

    def note(self, text: str) -> None:
        """Add the grader's own line to the worker's log (instructors only)."""
        line = f"\n[grader] {text}\n".encode("utf-8", "replace")
        room = LOG_CAP - len(self.log)
        self.log += line[: max(room, 0)]

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        p = proctree.read(self.pid)
        return p is not None and p.start == self.start and p.live

    def cpu_used(self, max_age: float = 0.0) -> float:
        """CPU seconds the tree used since it said hello (0 before), from a
        reading at most ``max_age`` seconds old (0: read now)."""
        if self.hello is None:
            return 0.0
        reading = self.meter.last
        if time.monotonic() - reading.at > max_age and self.alive():
            reading = self.meter.read()
        return max(0.0, reading.cpu - self.cpu_at_hello)

    def check(self, limit: Limit, what: str) -> None:
        """Look at the tree once; raise :class:`OutOfTime` past ``limit``, and
        kill the worker as crashed when a process of it lives on after its
        main thread ended (a meter must see every thread: the submission's doing)."""
        reading = self.meter.read()
        limit.polls += 1
        limit.runnable += reading.runnable
        if reading.leader_exited:
            self.kill()
            raise WorkerCrashed("the worker's main thread ended while other threads ran on")
        if reading.cpu >= limit.cpu:
            raise OutOfTime(what, cpu=True, limit=limit)
        if reading.at >= limit.wall:
            if self.can_lower_priority:
                limit.lowered = proctree.lowered_priority(self.pid, os.getpriority(os.PRIO_PROCESS, 0))
            raise OutOfTime(what, cpu=False, limit=limit)

    def measure_memory(self) -> None:
        """From now on, where a memory cgroup can be made, the kernel counts
        what this worker charges (:class:`grader.sandbox.cgroups.MemoryCgroup`):
        :meth:`kernel_memory` reads it."""
        if self.memcg is None:
            memcg = MemoryCgroup.create()
            if memcg is not None and not memcg.join(self.pid):
                memcg.close()
                memcg = None
            self.memcg = memcg
        if self.memcg is not None:
            self.memcg.start()

    def kernel_memory(self) -> int:
        """The most bytes the kernel charged this worker since :meth:`measure_memory` (0 where it cannot say)."""
        return self.memcg.growth() if self.memcg is not None else 0

    def readable(self, timeout: float) -> bool:
        return bool(select.select([self.rep_r], [], [], timeout)[0])

    def _signal(self) -> None:
        """SIGKILL the worker (never another process that took its pid)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.kill()
            return
        if self.pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)  # type: ignore[attr-defined,unused-ignore]
            return
        p = proctree.read(self.pid)
        if p is not None and p.start == self.start:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    def kill_tree(self) -> None:
        """SIGKILL the worker and wait until it is gone, so that files are
        inspected only once nothing can write them any more."""
        self.kill()

    def stop(self, reason: str) -> None:
        """Kill the worker from another thread (its pipes stay open: the call
        waiting on it sees the end of its reply pipe and reports ``reason``)."""
        self.killed_for = reason
        self._signal()

    def kill(self) -> None:
        """SIGKILL the worker, wait (10 s at most) until none of its threads
        runs, and close its pipes. Idempotent."""
        self._signal()
        deadline = time.monotonic() + 10
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        else:
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.002)
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None
        if self.memcg is not None:
            self.memcg.close()
            self.memcg = None
        for fd in (self.req_w, self.rep_r, self.pidfd):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
        self.req_w = self.rep_r = self.pidfd = -1
        self._drain.join(timeout=2)

    def exit_status(self) -> int | None:
        """How it ended (as :attr:`subprocess.Popen.returncode`), where that can be read."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(timeout=2)
            return None
        deadline = time.monotonic() + 2
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        return _exit_status(self.pid)

    def _died(self, what: str) -> WorkerCrashed:
        code = self.exit_status()
        self.kill()
        # The signal or exit status only: the submission's output (which could
        # echo hidden inputs just before exiting) stays in the instructors' log.
        if self.killed_for:
            return WorkerCrashed(f"the worker was killed by the grader: {self.killed_for}")
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) and oom_kills() > self.oom_kills_at_start:
            return KilledForMemory(f"the worker was killed by the kernel for want of memory (it held "
                                   f"{self.meter.peak_rss / (1 << 20):.0f} MiB at most, as last seen)",
                                   self.meter.peak_rss)
        return WorkerCrashed(f"the worker {how_ended(code)} {what}")

    def _waiter(self, fd: int, writing: bool, limit: Limit, what: str) -> Any:
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
            self.note(f"the worker announced a reply of {e.size} bytes (limit {e.limit})")
            self.kill()
            raise ProtocolError("the worker announced a reply larger than a reply may be") from None
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
        time counts (:meth:`cpu_used`)."""
        if self.hello is None:
            frame = self.read_frame(limit, "before it was ready (nothing of the submission had run)", HELLO_BYTES)
            msg = decode_reply(frame, self)
            if type(msg) is not dict or type(msg.get("hello")) is not dict:
                self.kill()
                raise ProtocolError("the worker did not start properly")
            reading = self.meter.read()
            self.cpu_at_hello, self.rss_at_hello = reading.cpu, reading.rss
            self.hello = msg["hello"]
        return self.hello

    def peak_growth(self) -> int:
        """The most resident memory its meter saw it hold beyond what it held at its hello."""
        return max(0, self.meter.peak_rss - self.rss_at_hello) if self.hello is not None else 0


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
    kills ``worker`` and raises ProtocolError. The decoder's own words (which
    quote what the worker sent) go to the worker's log, for instructors."""
    try:
        return wire.decode(data)
    except Exception as e:  # WireError, but also int-parsing or recursion limits
        worker.note(f"malformed reply: {type(e).__name__}: {str(e)[:300]}")
        worker.kill()
        raise ProtocolError("the worker's reply was not well-formed data") from None

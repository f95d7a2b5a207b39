"""One worker process seen from the trusted side: start, pipes, replies.

:class:`Worker` starts a sandboxed worker (grader/worker.py, through
:meth:`grader.sandbox.Sandbox.command`, in its own pids cgroup where one can
be made), drains its output into a capped log, and exchanges
:mod:`tests.wire` frames with it under deadlines. :func:`decode_reply` and
:func:`reply_value` turn a reply into a value or the exception the worker
named (a builtin of :data:`tests.wire.MAPPED_ERRORS`, else
:class:`RemoteError`).

When the worker times out, crashes or talks garbage the call raises a
:class:`WorkerError`, which derives from ``BaseException`` on purpose:
``pytest.raises(ValueError)`` (or even ``pytest.raises(Exception)``) cannot be
passed by crashing, and hypothesis does not retry it while shrinking.
:mod:`grader.remote` builds the per-problem lifecycle on top of this.
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
from pathlib import Path
from typing import Any

from grader import proctree
from grader.cgroups import PidsCgroup, pids_limit
from grader.sandbox import Sandbox
from grader.worker import WorkerConfig
from tests import wire
from tests.harness import process_tree

__all__ = ["LOG_CAP", "MalformedReply", "ProtocolError", "RemoteError", "Worker", "WorkerCrashed", "WorkerError",
           "WorkerTimeout", "decode_reply", "reply_value"]

#: Exceptions re-raised as themselves (the one table: tests.wire.MAPPED_ERRORS).
_BUILTIN = {name: getattr(builtins, name) for name in wire.MAPPED_ERRORS}
#: Bytes of a worker's output kept (the rest is read and dropped).
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

    def __init__(self, sandbox: Sandbox, work: Path, scratch: Path, config: WorkerConfig, max_reply: int) -> None:
        self.max_reply = max_reply
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        argv, env, cwd = sandbox.command(work, scratch, req_r, rep_w, config)
        # A process cap that holds for root too, where a pids cgroup can be made.
        self.cgroup = PidsCgroup.create(pids_limit(config.processes))
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

    def _waiter(self, fd: int, writing: bool, deadline: float, timeout: str) -> Callable[[], None]:
        """A ``wait`` for :mod:`tests.wire`'s frame functions: returns once
        ``fd`` is ready, raises WorkerTimeout(``timeout``) at ``deadline``."""
        def wait() -> None:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerTimeout(timeout)
                ready = select.select([], [fd], [], left)[1] if writing else select.select([fd], [], [], left)[0]
                if ready:
                    return
        return wait

    def read_frame(self, deadline: float) -> bytes:
        """The next reply frame's bytes; WorkerTimeout at ``deadline``,
        WorkerCrashed at end of file, ProtocolError past ``max_reply``."""
        try:
            data = wire.read_frame(self.rep_r, self.max_reply,
                                   self._waiter(self.rep_r, False, deadline, "no reply in time"))
        except wire.FrameTooLarge as e:
            self.kill()
            raise ProtocolError(f"the worker announced a reply of {e.size} bytes (limit {e.limit})") from None
        if data is None:
            raise self._died("before replying (did the submission exit, crash or run out of memory?)")
        return data

    def write_frame(self, data: bytes, deadline: float) -> None:
        """Send one request frame; WorkerTimeout at ``deadline``, WorkerCrashed
        when the worker's end of the pipe is gone."""
        try:
            wire.write_frame(self.req_w, data,
                             self._waiter(self.req_w, True, deadline, "the worker stopped reading requests"))
        except OSError:  # BrokenPipeError and the like (WorkerTimeout is no OSError)
            raise self._died("while receiving a request") from None

    def wait_ready(self, deadline: float) -> dict[str, Any]:
        if self.hello is None:
            msg = decode_reply(self.read_frame(deadline), self)
            if type(msg) is not dict or type(msg.get("hello")) is not dict:
                self.kill()
                raise ProtocolError("the worker did not start properly")
            self.hello = msg["hello"]
        return self.hello


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

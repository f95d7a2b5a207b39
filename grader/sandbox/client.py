"""Workers seen from the trusted side: their fork servers, pipes and replies.

A :class:`ForkServer` is one sandbox (grader/worker/main.py started through
:meth:`grader.sandbox.isolation.Sandbox.command`): a process that imported
torch and the harness once and forks a fresh :class:`Worker` on request, so a
worker starts in tens of milliseconds instead of importing torch again.
Where forking is not safe (not Linux), it starts each worker as a process of
its own instead (the same :class:`Worker`, slower). A worker is known by its
pid on this side and its start time (a pidfd where the kernel has one): it
is never this process's child, so its exit is read from ``/proc``.

Each worker's output is drained into a capped log; requests and replies are
:mod:`tests.wire` frames exchanged under deadlines. :func:`decode_reply`
decodes a reply (a worker whose reply does not decode is killed);
:func:`tests.wire.reply_value` turns it into a value or the exception the
worker named (a builtin of :data:`tests.wire.BUILTIN_ERRORS`, else
:class:`tests.wire.RemoteError`), as in a student's ``pytest``.

Every wait on a worker is bounded by a :class:`Limit`: the CPU seconds its
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

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

from grader.sandbox import proctree
from grader.sandbox.cgroups import MemoryCgroup, PidsCgroup, pids_limit
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP
from grader.sandbox.meter import Meter
from grader.sandbox.optimseal import SealedOptim
from grader.sandbox.scratch import remove_tree
from grader.staging.workcopy import private_copy
from grader.worker.main import ServerConfig, WorkerConfig
from tests import wire
from tests.memwatch import process_tree

__all__ = ["FORKS", "ForkServer", "GraderFault", "KilledForMemory", "Limit", "NotRun", "OutOfTime",
           "ProtocolError", "Worker", "WorkerCrashed", "WorkerError", "WorkerTimeout", "decode_reply", "oom_kills"]

#: Whether workers are forked from a server that imported torch once (Linux):
#: elsewhere a fork after importing torch is not safe, and each worker is a process of its own.
FORKS = sys.platform == "linux"


class WorkerError(BaseException):
    """The worker did not answer with data (not an answer of the submission).

    ``outcome``: what a check this ends gets instead of "failed" ("": failed);
    the grader's plugin reads it of the exceptions a failure holds."""

    outcome: ClassVar[str] = ""


class WorkerTimeout(WorkerError):
    """A call ran past its own limit: it used more CPU time than a call may, or
    waited past the backstop while hardly using the CPU (asleep or blocked)."""

    outcome: ClassVar[str] = "timeout"


class WorkerCrashed(WorkerError):
    """The worker died (exit, signal, rlimit) before answering."""


class ProtocolError(WorkerCrashed):
    """The worker's reply was not a well-formed frame of data."""


class KilledForMemory(WorkerCrashed):
    """The kernel's out-of-memory killer ended the worker (it was SIGKILLed, not
    by the grader, while the machine's OOM-kill count rose). ``peak`` is the
    most memory the grader saw it hold (bytes: resident, and what it stored in
    its sandbox's own tmpfs): :class:`grader.sandbox.remote.RemoteImpl` compares
    it with what a worker is promised."""

    def __init__(self, message: str, peak: int) -> None:
        super().__init__(message)
        self.peak = peak


class NotRun(WorkerError):
    """The check did not run (to its end): its problem's CPU budget was spent,
    or the problem was cut short before it. No verdict on this check."""

    outcome: ClassVar[str] = "not run"


class GraderFault(WorkerError):
    """A fault of the machine or of the grader, not of the submission,
    established from outside the worker: the sandbox could not start, the
    machine starved a worker of CPU or ran out of memory below what a worker
    is promised, the grader could not clean up after the last problem. The
    problem is not graded (and regraded)."""

    outcome: ClassVar[str] = "grader error"


#: The most a hello or a fork server's answer may take (the grader's own, small messages).
HELLO_BYTES = 1 << 16
#: Seconds between two looks at a worker that has not answered yet.
POLL = 0.05
#: The buffer asked for a worker's request and reply pipes (Linux; at most
#: /proc/sys/fs/pipe-max-size, 1 MiB by default, for a process without privilege).
PIPE_BYTES = 1 << 20


@dataclass
class Limit:
    """How long a wait on a worker may last: until its process tree has used
    ``cpu`` CPU seconds (a reading of its meter), or until ``wall`` (a
    ``time.monotonic()`` backstop). ``polls`` and ``runnable`` count the looks
    taken while waiting and those that found a thread of the tree running or
    waiting for a CPU."""

    cpu: float
    wall: float
    polls: int = 0
    runnable: int = 0
    lowered: str = ""  # how the tree ran below its priority when the wait ended ("": it did not)

    @property
    def starved(self) -> bool:
        """Whether the tree mostly wanted a CPU while it waited (the machine was
        too busy to run it) at the priority it was started at, rather than
        sleeping, blocking or lowering its own priority (its own doing: the
        seccomp filter and Landlock keep a worker from doing it, and where
        they could not, :func:`grader.sandbox.proctree.lowered_priority` reads
        it from outside)."""
        return self.polls >= 4 and self.runnable * 2 >= self.polls and not self.lowered


class OutOfTime(WorkerTimeout):
    """A wait ran past its :class:`Limit`: its CPU (``cpu`` True) or its
    wall-clock backstop; ``limit`` holds what the waits saw."""

    def __init__(self, message: str, *, cpu: bool, limit: Limit) -> None:
        super().__init__(message)
        self.cpu, self.limit = cpu, limit


def _ended(code: int | None) -> str:
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
        return WorkerCrashed(f"the worker {_ended(code)} {what}")

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


class ForkServer:
    """One sandbox's fork server, seen from the trusted side (see the module docstring).

    ``sealed_optim``: the sealed torch.optim sources its sandbox shows instead
    of torch's (:meth:`grader.sandbox.isolation.Sandbox.command`). Start it,
    :meth:`wait_ready`, then :meth:`spawn` one worker at a time: each spawn
    ends the worker spawned before."""

    def __init__(self, sandbox: Sandbox, work: Path, scratch: Path, config: ServerConfig, max_reply: int,
                 sealed_optim: SealedOptim | None = None) -> None:
        self.sandbox, self.scratch, self.config, self.max_reply = sandbox, scratch, config, max_reply
        self.sealed_optim = sealed_optim
        # Its own copy of the files: two sandboxes never share an inode (an flock
        # on one would be a channel between a hidden check's worker and another's).
        self.work = private_copy(work)
        self.worker_config = sandbox.worker_config(self.work, scratch, sealed_optim)
        self.forks = FORKS
        self.spawned = 0  # workers started: once one has, submission code has run beside this server
        self.log = bytearray()
        self.log_dropped = 0
        self.hello: dict[str, Any] | None = None
        self.server_pid = -1  # the forking process, as this process sees it (its hello names it)
        self._server_start = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.meter: Meter | None = None
        self.cpu_at_hello = 0.0
        self._drain: threading.Thread | None = None
        if not self.forks:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv, env, cwd = sandbox.command(self.work, scratch, ["fork-server", str(theirs.fileno()),
                                                                  replace_parent(config, sandbox).to_json()],
                                             sealed_optim)
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, pass_fds=(theirs.fileno(),),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True, **sandbox.credentials())
        except BaseException:
            ours.close()
            remove_tree(self.work)
            raise
        finally:
            theirs.close()
        self.control = ours
        self.meter = Meter(self.proc.pid)
        stdout = self.proc.stdout
        assert stdout is not None
        self._drain = threading.Thread(target=self._drain_log, args=(stdout,), daemon=True)
        self._drain.start()

    def _drain_log(self, out: IO[bytes]) -> None:
        while chunk := out.read1(1 << 16):  # type: ignore[attr-defined]
            room = LOG_CAP - len(self.log)
            self.log += chunk[: max(room, 0)]
            self.log_dropped += max(len(chunk) - max(room, 0), 0)

    def alive(self) -> bool:
        if not self.forks:
            return True
        assert self.proc is not None
        if self.proc.poll() is not None:
            return False
        if self.server_pid > 0:
            p = proctree.read(self.server_pid)
            return p is not None and p.start == self._server_start and p.live
        return True

    def _receive(self, limit: Limit, what: str) -> dict[str, Any]:
        """The server's next message on the control socket, within ``limit``
        (its tree's CPU and the wall clock)."""
        assert self.control is not None and self.meter is not None
        while True:
            left = limit.wall - time.monotonic()
            if left <= 0:
                raise OutOfTime(what, cpu=False, limit=limit)
            if select.select([self.control], [], [], min(left, POLL))[0]:
                data = self.control.recv(HELLO_BYTES)
                if not data:
                    raise WorkerCrashed(f"the sandbox {self._ended()} {what}")
                try:
                    msg = json.loads(data)
                except ValueError:
                    raise ProtocolError("the sandbox's fork server sent something that is not a message") from None
                if type(msg) is not dict:
                    raise ProtocolError("the sandbox's fork server sent something that is not a message")
                return msg
            reading = self.meter.read()
            limit.polls += 1
            limit.runnable += reading.runnable
            if reading.cpu - self.cpu_at_hello >= limit.cpu:
                raise OutOfTime(what, cpu=True, limit=limit)
            if not self.alive():
                raise WorkerCrashed(f"the sandbox {self._ended()} {what}")

    def _ended(self) -> str:
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=2)
        return _ended(code)

    def wait_ready(self, limit: Limit) -> dict[str, Any]:
        """The server's hello (once, within ``limit``): it has imported torch and the harness."""
        if self.hello is not None or not self.forks:
            return self.hello or {}
        msg = self._receive(limit, "before it was ready (nothing of the submission had run)")
        if type(msg.get("hello")) is not dict:
            raise ProtocolError("the sandbox's fork server did not start properly")
        assert self.proc is not None and self.meter is not None
        # The forking process: the deepest of the sandbox's processes now (bwrap,
        # maybe bwrap's own init, then the server; no worker exists yet).
        chain = [p for pid in process_tree(self.proc.pid) if (p := proctree.read(pid)) is not None]
        server = chain[-1] if chain else None
        if server is None:
            raise WorkerCrashed("the sandbox's fork server ended before it was ready")
        self.server_pid, self._server_start = server.pid, server.start
        pin_oom_score(self.server_pid, 900)  # (it set 900 itself; as root this makes it its least)
        self.cpu_at_hello = self.meter.read().cpu
        self.hello = msg["hello"]
        if self.hello.get("cuda_forks") is False:
            # Its workers could not use CUDA (nor would torch.manual_seed seed it there, as in a
            # student's process): each is started as a process of its own instead.
            self._stop_server()
            self.forks = False
        return self.hello

    def spawn(self, limit: Limit, config: WorkerConfig | None = None) -> Worker:
        """A fresh worker (started or forked within ``limit``), the previous one
        of this server ended; its hello is still to be read (:meth:`Worker.wait_ready`)."""
        config = config or self.worker_config
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        log_r, log_w = os.pipe()
        for fd in (req_w, rep_w):  # frames of megabytes cross in fewer round trips
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        cgroup = PidsCgroup.create(pids_limit(0))
        try:
            if not self.forks:
                return self._start_worker(config, req_r, rep_w, log_w, req_w, rep_r, log_r, cgroup)
            assert self.control is not None
            if self.hello is None:
                self.wait_ready(limit)
            socket.send_fds(self.control, [config.to_json().encode()], [req_r, rep_w, log_w])
            msg = self._receive(limit, "while starting a worker (nothing of the submission had run)")
            if type(msg.get("pid")) is not int:
                raise GraderFault(f"the sandbox could not start a worker ({str(msg.get('error'))[:200]})")
            pid = self._child()
            self.spawned += 1
            if cgroup is not None:
                # Before its first request: nothing of the submission has run.
                (cgroup.path / "cgroup.procs").write_text(str(pid))
            pin_oom_score(pid)
            return self._worker(Worker(pid, req_w, rep_r, log_r, self.max_reply, cgroup=cgroup))
        except BaseException:
            for fd in (req_w, rep_r, log_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if cgroup is not None:
                cgroup.close()
            raise
        finally:
            for fd in (req_r, rep_w, log_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _child(self) -> int:
        """The pid of the one worker the server forked (its children, read from /proc)."""
        children: list[int] = []
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{self.server_pid}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{self.server_pid}/task/{tid}/children") as f:
                    children += [int(c) for c in f.read().split()]
        live = [pid for pid in children if (p := proctree.read(pid)) is not None and p.live]
        if len(live) != 1:
            raise GraderFault(f"the sandbox's fork server has {len(live)} live workers where one was forked")
        return live[0]

    def _start_worker(self, config: WorkerConfig, req_r: int, rep_w: int, log_w: int, req_w: int, rep_r: int,
                      log_r: int, cgroup: PidsCgroup | None) -> Worker:
        """A worker as a process of its own (no fork server)."""
        argv, env, cwd = self.sandbox.command(self.work, self.scratch, [
            "worker", str(req_r), str(rep_w), replace_parent(self.config, self.sandbox).to_json(), config.to_json()],
            self.sealed_optim)
        credentials = self.sandbox.credentials()
        if cgroup is not None and not credentials:
            argv = cgroup.wrap(argv)
        proc = subprocess.Popen(argv, env=env, cwd=cwd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                                stdout=log_w, stderr=log_w, start_new_session=True, **credentials)
        self.spawned += 1
        if cgroup is not None and credentials:
            (cgroup.path / "cgroup.procs").write_text(str(proc.pid))
        return self._worker(Worker(proc.pid, req_w, rep_r, log_r, self.max_reply, proc=proc, cgroup=cgroup))

    def _worker(self, worker: Worker) -> Worker:
        """``worker``, told what its sandbox lets it do: with Landlock (and the
        seccomp filter) it cannot lower its own priority, so a lowered one is
        another's doing, never its own."""
        worker.can_lower_priority = not self.sandbox.landlocked
        return worker

    def _stop_server(self) -> None:
        """Stop the server process (its copy of the files stays: workers may still start on it)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def kill(self) -> None:
        """Stop the sandbox and everything in it; remove its copy of the files."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.server_pid > 0:  # (a server outside bwrap is its own session leader: killed above)
            deadline = time.monotonic() + 10
            while (p := proctree.read(self.server_pid)) is not None and p.start == self._server_start and p.live \
                    and time.monotonic() < deadline:
                time.sleep(0.005)
        if self.control is not None:
            self.control.close()
            self.control = None
        if self._drain is not None:
            self._drain.join(timeout=2)
        if self.proc is None or self.proc.poll() is not None:  # nothing of the sandbox reads it any more
            with contextlib.suppress(OSError):
                remove_tree(self.work)


def replace_parent(config: ServerConfig, sandbox: Sandbox) -> ServerConfig:
    """``config`` with the pid its process must die with: this one, where no
    bwrap does that job (its ``--die-with-parent``)."""
    from dataclasses import replace

    return replace(config, parent=0 if sandbox.mode == "bwrap" else os.getpid())


def pin_oom_score(pid: int, score: int = 1000) -> None:
    """Set ``pid``'s ``oom_score_adj`` to ``score`` from here; as root
    (``CAP_SYS_RESOURCE``) that also makes it the least the process may set
    for itself (the kernel's ``oom_score_adj_min``), so a worker can never
    make the kernel kill a trusted process before it. Without the privilege
    the worker's own setting stands (grader/worker/confine.py ``oom_score``);
    best effort."""
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError), open(f"/proc/{pid}/oom_score_adj", "w") as f:
        f.write(str(score))


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

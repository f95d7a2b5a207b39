"""A sandbox's fork server, seen from the trusted side.

A :class:`ForkServer` is one sandbox (grader/worker/main.py started through
:meth:`grader.sandbox.isolation.Sandbox.command`): a process that imported
torch and the harness once and forks a fresh
:class:`grader.sandbox.workerproc.Worker` on request, so a worker starts in
tens of milliseconds instead of importing torch again. Where forking is not
safe (not Linux), it starts each worker as a process of its own instead (the
same :class:`~grader.sandbox.workerproc.Worker`, slower).
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
from pathlib import Path
from typing import IO, Any

from grader.sandbox import proctree
from grader.sandbox.cgroups import PidsCgroup, pids_limit
from grader.sandbox.errors import GraderFault, Limit, OutOfTime, ProtocolError, WorkerCrashed
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP
from grader.sandbox.meter import Meter
from grader.sandbox.optimseal import SealedOptim
from grader.sandbox.scratch import remove_tree
from grader.sandbox.workerproc import HELLO_BYTES, POLL, Worker, how_ended
from grader.staging.workcopy import private_copy
from grader.worker.main import ServerConfig, WorkerConfig
from tests.memwatch import process_tree

__all__ = ["FORKS", "ForkServer", "pin_oom_score", "replace_parent"]

#: Whether workers are forked from a server that imported torch once (Linux):
#: elsewhere a fork after importing torch is not safe, and each worker is a process of its own.
FORKS = sys.platform == "linux"
#: The buffer asked for a worker's request and reply pipes (Linux; at most
#: /proc/sys/fs/pipe-max-size, 1 MiB by default, for a process without privilege).
PIPE_BYTES = 1 << 20


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
        return how_ended(code)

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

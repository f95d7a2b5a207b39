"""Shared by the sandbox selftests (test_sandbox*.py): small hostile student
modules (``PRECISION``, ``MODEL``) whose functions misbehave on request, its working copy
and a scratch folder (fixture ``work``), RemoteImpl workers on them
(``make_impl``, fixture ``impl``), the bubblewrap skip marker, and the
worker's processes inside its sandbox, seen from outside.

A test module uses the fixtures by importing ``work_fixture`` and
``impl_fixture``: they are registered under the names ``work`` and ``impl``
(module-scoped: one working copy, one worker per test module)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from grader.protocol import ProblemSpec
from grader.sandbox.isolation import Sandbox, bwrap_usable
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.staging.workcopy import make_working_copy
from grader.worker.confine import seccomp_available

REPO = Path(__file__).resolve().parent.parent
BWRAP = bwrap_usable()[0]
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bubblewrap is unusable here: " + bwrap_usable()[1])
needs_seccomp = pytest.mark.skipif(not seccomp_available(), reason="the seccomp filter is Linux x86_64/aarch64 only")

PRECISION = '''
import os, socket, sys, time, torch

class MyError(ValueError):
    pass

def bytes_per_element(kind):
    if kind == "value":
        raise MyError("bad dtype")
    if kind == "assert":
        assert False, "student assert"
    if kind == "exit":
        sys.exit(0)
    if kind == "crash":
        os._exit(3)
    if kind == "hang":
        while True:
            pass
    if kind == "burn":  # half a CPU second, then an answer
        start = time.process_time()
        while time.process_time() - start < 0.5:
            pass
        return 5
    if kind == "sleep":
        time.sleep(3600)
    if kind == "object":
        return object()
    if kind == "subclass":
        class T(torch.Tensor):
            pass
        return torch.zeros(2).as_subclass(T)
    if kind == "fork":
        return os.fork()
    if kind == "zombie":  # this call answered by a thread that burns CPU after the main thread ended
        import ctypes, platform, threading
        frame = sys._getframe()
        while "out_fd" not in frame.f_locals:
            frame = frame.f_back
        harness, out_fd = frame.f_locals["harness"], frame.f_locals["out_fd"]
        def serve():
            start = time.process_time()
            while time.process_time() - start < 3:
                pass
            harness.wire.write_frame(out_fd, harness.wire.encode({"ok": True, "value": 7}))
            time.sleep(60)
        threading.Thread(target=serve).start()
        ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
    if kind == "idle":  # its own priority as low as it goes, then spin
        refused = []
        for attempt in (lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)),
                        lambda: os.setpriority(os.PRIO_PROCESS, 0, 19), lambda: os.sched_setaffinity(0, {0})):
            try:
                attempt()
            except OSError:
                refused.append(1)
        return len(refused)
    if kind == "unshare":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS (os.unshare: Python 3.12)
            return "unshared"
        return f"refused: {os.strerror(ctypes.get_errno())}"
    if kind == "signal":  # every other process it can see
        hit = []
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                try:
                    os.kill(int(p), 0)
                    hit.append(int(p))
                except OSError:
                    pass
        return hit
    if kind == "memory":
        return len(bytearray(6 << 30))
    if kind == "print":
        for _ in range(300):
            print("y" * 4096)
        return 1
    if kind == "view":
        x = torch.arange(6.0)
        return x, x[2:]
    if kind == "leak":
        print("SECRET-INPUT-4242", flush=True)
        os._exit(3)
    if kind == "threadbomb":  # threads until refused; they wait for the call to end
        import threading
        stop, n = threading.Event(), 0
        try:
            while n < 5000:
                threading.Thread(target=stop.wait, daemon=True).start()
                n += 1
        except RuntimeError:
            pass
        stop.set()
        return n
    return 4

def tensor_bytes(what, arg=None):
    if what == "read":
        try:
            return open(arg).read()[:100]
        except OSError as e:
            return f"refused: {type(e).__name__}"
    if what == "list":
        try:
            return sorted(os.listdir(arg))
        except OSError as e:
            return f"refused: {type(e).__name__}"
    if what == "net":
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=2)
            return "connected"
        except OSError as e:
            return f"refused: {type(e).__name__}"
    if what == "write":
        try:
            with open(arg, "w") as f:
                f.write("forged")
            return "written"
        except OSError as e:
            return f"refused: {type(e).__name__}"
    if what == "pids":
        return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    if what == "store":  # 8 MiB into each of: /tmp, /dev/shm, the scratch folder arg; kept
        for folder in ("/tmp", "/dev/shm", arg):
            with open(os.path.join(folder, "stored"), "wb") as f:
                f.write(b"s" * (8 << 20))
        return 3
    if what == "tmpfs":  # how much each of /dev, /dev/shm and /tmp takes in 16 MiB blocks
        out = {}
        for folder in ("/dev", "/dev/shm", "/tmp"):
            written = 0
            try:
                for i in range(64):
                    with open(os.path.join(folder, f"fill-{i}"), "wb") as f:
                        f.write(b"x" * (16 << 20))
                    written += 16 << 20
            except OSError as e:
                out[folder + " error"] = e.errno
            out[folder] = written
        return out
    if what == "fallocate":
        for i in range(8):
            fd = os.open(os.path.join(arg, f"reserved-{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, 1 << 30)
            finally:
                os.close(fd)
        return 0
    if what == "ptrace":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return {int(p): libc.ptrace(0x4206, int(p), None, None) == 0 for p in os.listdir("/proc")
                if p.isdigit() and int(p) != os.getpid()}
    if what == "ptrace-parent":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(0x4206, os.getppid(), None, None) == 0:
            libc.ptrace(17, os.getppid(), None, None)
            return "attached"
        return os.strerror(ctypes.get_errno())
    if what == "fill":
        block = b"x" * (1 << 20)
        for i in range(100_000):
            with open(os.path.join(arg, f"fill-{i}"), "wb") as f:
                f.write(block)
'''


#: A handout module whose ``raise_error`` raises on request (the scenario
#: ``tests.scenarios.model.construct`` calls it): a builtin, a subclass of one,
#: a class with no builtin base but Exception.
MODEL = '''
class MyError(ValueError):
    pass

class Refused(Exception):
    pass

def raise_error(kind):
    if kind == "permission":
        raise PermissionError(13, "Permission denied", "/forbidden")
    if kind == "subclass":
        raise MyError("bad dtype")
    raise Refused("no entry")
'''


@pytest.fixture(scope="module", name="work")
def work_fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox")
    (root / "sub" / "student").mkdir(parents=True)
    (root / "sub" / "student" / "__init__.py").write_text("")
    (root / "sub" / "student" / "precision.py").write_text(textwrap.dedent(PRECISION))
    (root / "sub" / "student" / "model.py").write_text(MODEL)
    scratch = root / "scratch"
    scratch.mkdir()
    return make_working_copy(root / "sub" / "student", root / "work"), scratch


def make_impl(work, *, cpu_budget=120.0, call_cpu=20.0, wall_factor=10.0, memory_gib=3.0, want="auto",
              reply_bytes: int | None = None, **more) -> RemoteImpl:
    wc, scratch = work
    limits = Limits(memory_bytes=int(memory_gib * (1 << 30)), call_cpu=call_cpu, wall_factor=wall_factor)
    if reply_bytes is not None:  # the most one reply frame may hold
        limits = dataclasses.replace(limits, reply_bytes=reply_bytes)
    sandbox = Sandbox(limits=limits, want=want)
    impl = RemoteImpl("test", sandbox, wc, scratch, [ProblemSpec("precision", cpu_budget, ())], **more)
    impl.enter("precision")
    return impl


@pytest.fixture(scope="module", name="impl")
def impl_fixture(work):
    impl = make_impl(work)
    yield impl
    impl.close()


def _worker_pid(impl: RemoteImpl) -> int:
    return impl._workers["precision"].pid


def _in_sandbox(root: int) -> list[int]:
    """The processes of ``root``'s tree in another PID namespace than this one."""
    import os

    from tests.memwatch import process_tree

    own = os.stat("/proc/self/ns/pid").st_ino
    return [p for p in process_tree(root) if os.stat(f"/proc/{p}/ns/pid").st_ino != own]

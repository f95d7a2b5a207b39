"""The trust boundary, call by call: RemoteImpl against small hostile modules
in a real worker (bubblewrap where usable): exception mapping, timeouts,
crashes, garbage, resource limits, and what the worker can see."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
import torch

from grader.sandbox.cgroups import PidsCgroup, pids_limit
from grader.sandbox.isolation import Sandbox, bwrap_usable
from grader.sandbox.limits import Limits
from grader.sandbox.scratch import BASETEMP, ScratchWatch, remove_tree, scratch_usage
from grader.sandbox.workcopy import make_working_copy
from grader.worker.client import (
    GraderFault,
    NotRun,
    ProtocolError,
    RemoteError,
    WorkerCrashed,
    WorkerError,
    WorkerTimeout,
)
from grader.worker.main import _ARCH, WorkerConfig
from grader.worker.remote import RemoteImpl

REPO = Path(__file__).resolve().parent.parent
BWRAP = bwrap_usable()[0]
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bubblewrap is unusable here: " + bwrap_usable()[1])

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
    if kind == "forkbomb":
        n = 0
        try:
            while n < 5000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError:
            pass
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


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox")
    (root / "sub" / "student").mkdir(parents=True)
    (root / "sub" / "student" / "__init__.py").write_text("")
    (root / "sub" / "student" / "precision.py").write_text(textwrap.dedent(PRECISION))
    scratch = root / "scratch"
    scratch.mkdir()
    return make_working_copy(root / "sub" / "student", root / "work"), scratch


def make_impl(work, *, cpu_budget=120.0, call_cpu=20.0, memory_gib=3.0, processes=0, **more) -> RemoteImpl:
    wc, scratch = work
    sandbox = Sandbox(limits=Limits(memory_bytes=int(memory_gib * (1 << 30))))
    config = WorkerConfig(rlimits=sandbox.limits.rlimits(False))
    impl = RemoteImpl("test", sandbox, wc, scratch, problems={"precision": cpu_budget},
                      call_cpu=call_cpu, config=config, processes={"precision": processes}, **more)
    impl.enter("precision")
    return impl


@pytest.fixture(scope="module")
def impl(work):
    impl = make_impl(work)
    yield impl
    impl.close()


def test_values_and_views_cross_as_data(impl):
    assert impl.precision.bytes_per_element("ok") == 4
    a, b = impl.precision.bytes_per_element("view")
    assert type(a) is torch.Tensor and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_builtin_exceptions_are_reraised_by_their_nearest_builtin(impl):
    with pytest.raises(ValueError, match="bad dtype") as e:
        impl.precision.bytes_per_element("value")
    assert type(e.value) is ValueError  # never the submission's own class
    with pytest.raises(RemoteError, match="AssertionError: student assert"):
        impl.precision.bytes_per_element("assert")
    with pytest.raises(RemoteError, match="SystemExit"):
        impl.precision.bytes_per_element("exit")
    assert impl.precision.bytes_per_element("ok") == 4  # the same worker carries on


@pytest.mark.parametrize("kind", ["object", "subclass"])
def test_non_data_is_not_a_type_error(impl, kind):
    """Returning a non-data object must not pass a ``pytest.raises(TypeError)`` check."""
    with pytest.raises(RemoteError, match="not data") as e:
        impl.precision.bytes_per_element(kind)
    assert not isinstance(e.value, TypeError)


def test_crash_fails_the_call_and_a_fresh_worker_follows(impl):
    with pytest.raises(WorkerCrashed, match="exited with status 3"):
        impl.precision.bytes_per_element("crash")
    assert not issubclass(WorkerError, Exception)  # no pytest.raises(Exception) passes by crashing
    assert impl.precision.bytes_per_element("ok") == 4


def test_cpu_time_is_counted_from_outside_and_start_up_is_free(work):
    """What a problem's calls used, read from /proc: half a CPU second per burn
    (start-up, importing torch, is not counted)."""
    impl = make_impl(work)
    try:
        assert impl.precision.bytes_per_element("ok") == 4
        assert impl.cpu_used() < 0.3
        for _ in range(3):
            assert impl.precision.bytes_per_element("burn") == 5
        assert 1.5 <= impl.cpu_used() < 2.2
    finally:
        impl.close()
    assert 1.5 <= impl.states["precision"].cpu_done < 2.2


def test_a_call_past_its_cpu_limit_is_a_timeout_and_the_next_call_runs(work):
    """A hang costs its own check: a fresh worker serves the next call; a
    second timeout cuts the problem (the rest is "not run")."""
    impl = make_impl(work, call_cpu=2.0)
    try:
        t = time.monotonic()
        with pytest.raises(WorkerTimeout, match="more than 2 CPU s"):
            impl.precision.bytes_per_element("hang")
        assert time.monotonic() - t < 30
        assert not any(w.alive() for w in impl._workers.values())
        assert impl.precision.bytes_per_element("ok") == 4
        with pytest.raises(WorkerTimeout):
            impl.precision.bytes_per_element("hang")
        with pytest.raises(NotRun, match="2 calls ran past their limits"):
            impl.precision.bytes_per_element("ok")
    finally:
        impl.close()
    assert len(impl.states["precision"].timeouts) == 2


def test_a_spent_budget_cuts_the_problem_and_its_checks_are_not_run(work):
    impl = make_impl(work, cpu_budget=1.2, call_cpu=60.0)
    try:
        assert impl.precision.bytes_per_element("burn") == 5
        assert impl.precision.bytes_per_element("burn") == 5
        with pytest.raises(NotRun, match=r"CPU budget of 1\.2 s ran out"):
            impl.precision.bytes_per_element("burn")  # runs out during this call
        with pytest.raises(NotRun):
            impl.precision.bytes_per_element("ok")
        assert not issubclass(NotRun, Exception)
    finally:
        impl.close()
    assert 1.1 < impl.states["precision"].cpu_done < 1.6


def test_a_call_that_sleeps_is_stopped_by_the_wall_clock_backstop(work):
    impl = make_impl(work, call_cpu=1.0, wall_factor=2.0, min_wall=2.0)
    try:
        t = time.monotonic()
        with pytest.raises(WorkerTimeout, match="waited 2 s while hardly using the CPU"):
            impl.precision.bytes_per_element("sleep")
        assert time.monotonic() - t < 30
    finally:
        impl.close()


def test_a_worker_that_cannot_start_is_a_grader_fault(work, monkeypatch):
    """Nothing of the submission runs before the worker's hello: a sandbox that
    fails to start it (bubblewrap gone: exit 127) is the machine's fault."""
    impl = make_impl(work)
    real = impl._sandbox.command

    def missing_sandbox(*args, **kwargs):
        argv, env, cwd = real(*args, **kwargs)
        return ["/nonexistent-bwrap-binary", *argv[1:]], env, cwd

    monkeypatch.setattr(impl._sandbox, "command", missing_sandbox)
    try:
        with pytest.raises(GraderFault, match="could not start") as e:
            impl.precision.bytes_per_element("ok")
        assert "did the submission" not in str(e.value)
        with pytest.raises(GraderFault):  # the problem is not graded any further
            impl.precision.bytes_per_element("ok")
    finally:
        impl.close()
    assert impl.states["precision"].fault and not impl.states["precision"].crashes


def test_memory_limit(impl):
    with pytest.raises(RemoteError, match="MemoryError"):
        impl.precision.bytes_per_element("memory")


@pytest.mark.skipif(__import__("platform").machine() not in _ARCH or __import__("sys").platform != "linux",
                    reason="the seccomp filter is Linux x86_64/aarch64 only")
def test_no_processes(impl):
    with pytest.raises(OSError, match="BlockingIOError"):
        impl.precision.bytes_per_element("fork")
    assert impl.states["precision"].seccomp == "on"


def test_output_is_captured_and_capped(work):
    impl = make_impl(work)
    try:
        for _ in range(3):
            assert impl.precision.bytes_per_element("print") == 1
    finally:
        impl.close()
    st = impl.states["precision"]
    assert len(st.log) <= 64 << 10 and st.log_dropped > 0


@needs_bwrap
def test_the_worker_sees_no_repository_no_host_and_no_network(impl, tmp_path):
    assert impl.precision.tensor_bytes("read", str(REPO / "reference" / "precision.py")).startswith("refused")
    assert impl.precision.tensor_bytes("read", str(REPO / "grader" / "hidden" / "conftest.py")).startswith(
        "refused")
    listing = impl.precision.tensor_bytes("list", str(REPO))
    assert "reference" not in listing and "grader" not in listing, listing
    assert impl.precision.tensor_bytes("list", "/submission") == ["_grader_seal.py", "_grader_worker.py", "student", "tests"]
    assert "reference" not in impl.precision.tensor_bytes("list", "/proc/1/cwd/..")
    assert impl.precision.tensor_bytes("net").startswith("refused")
    assert max(impl.precision.tensor_bytes("pids")) < 100  # its own PID namespace
    target = tmp_path / "forged.json"
    assert impl.precision.tensor_bytes("write", str(target)).startswith("refused")
    assert not target.exists()
    assert impl.precision.tensor_bytes("write", "/submission/student/x.py").startswith("refused")


def test_protocol_garbage_is_a_crash_not_a_value(work):
    """A reply frame announcing more than the cap is refused before it is read."""
    impl = make_impl(work)
    impl.max_reply = 16
    try:
        with pytest.raises(ProtocolError, match="limit 16"):
            impl.precision.bytes_per_element("view")
    finally:
        impl.close()


def test_crash_message_carries_no_submission_output(impl):
    """What a dying worker printed (hidden inputs, say) stays in the log, out of every message."""
    with pytest.raises(WorkerCrashed) as e:
        impl.precision.bytes_per_element("leak")
    assert "exited with status 3" in str(e.value) and "SECRET" not in str(e.value)
    assert all("SECRET" not in c for c in impl.states["precision"].crashes)


def _pids_cgroups() -> bool:
    cg = PidsCgroup.create(1)
    if cg is not None:
        cg.close()
    return cg is not None


@pytest.mark.skipif(not _pids_cgroups(), reason="no pids cgroup can be made here (not root, no delegation)")
def test_pids_cgroup_caps_a_fork_bomb_even_for_root(work):
    """With processes allowed (no seccomp), the pids cgroup is the cap, and it holds
    for root, unlike RLIMIT_NPROC. Counted from outside: the worker's descendants."""
    import psutil

    impl = make_impl(work, processes=16)
    try:
        impl.precision.bytes_per_element("forkbomb")
        worker = impl._workers["precision"]
        tree = psutil.Process(worker.proc.pid).children(recursive=True)
        assert worker.cgroup is not None and 16 <= len(tree) <= pids_limit(16) + 2, len(tree)
        cgroup = worker.cgroup.path
    finally:
        impl.close()
    assert not worker.cgroup and not cgroup.exists()  # removed with the worker


def test_scratch_watch_kills_a_worker_filling_the_disk(work, tmp_path):
    impl = make_impl(work)
    scratch = work[1]
    fill = scratch / "fill"
    fill.mkdir()
    watch = ScratchWatch(scratch, Limits(scratch_bytes=64 << 20), impl.stop_workers, interval=0.1).start()
    try:
        with pytest.raises(WorkerCrashed, match="killed by the grader: the scratch folder holds more than 64 MiB"):
            impl.precision.tensor_bytes("fill", str(fill))
    finally:
        watch.stop()
        impl.close()
        remove_tree(fill)
    assert 64 << 20 < watch.peak_bytes < 1 << 30


def test_scratch_usage_counts_allocated_bytes_and_stops_at_its_caps(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * (1 << 20))
    with open(tmp_path / "sparse", "wb") as f:  # a big sparse file allocates (almost) nothing
        f.truncate(1 << 30)
    used, entries, depth = scratch_usage(tmp_path, 100, 10)
    assert (1 << 20) <= used < (2 << 20) and entries == 2 and depth == 0
    deep = tmp_path
    for _ in range(20):
        deep = deep / "d"
    deep.mkdir(parents=True)
    assert scratch_usage(tmp_path, 100, 10)[2] == 11  # one past the cap: it stops there
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    assert scratch_usage(tmp_path, 30, 10)[1] == 31


def test_remove_tree_never_recurses_nor_follows_links(tmp_path):
    """A tree deeper than the recursion limit and PATH_MAX, unwritable folders, a link
    to a folder that must survive, a FIFO: all removed, iteratively."""
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    root = tmp_path / "tree"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for i in range(1500):  # 1500 levels: past sys.getrecursionlimit() and PATH_MAX (4096)
        os.mkdir("ddd", dir_fd=fd)
        child = os.open("ddd", os.O_RDONLY, dir_fd=fd)
        if i % 100 == 0:
            os.symlink(str(outside), "link", dir_fd=fd)
            os.fchmod(fd, 0o500)
        os.close(fd)
        fd = child
    os.close(fd)
    os.mkfifo(root / "fifo")
    (root / "locked").mkdir()
    (root / "locked" / "f").write_text("x")
    (root / "locked").chmod(0)
    remove_tree(root)
    assert not root.exists() and (outside / "keep").read_text() == "keep"


def test_wire_refuses_views_bigger_than_what_crossed():
    """A 1-byte storage viewed with zero strides as a 3 GiB tensor is refused before anything is allocated."""
    from tests import wire

    def frame(shape, stride, nbytes):
        import json as j
        import struct

        head = j.dumps({"v": {"$": "tensor", "dtype": "uint8", "shape": shape, "stride": stride, "offset": 0,
                              "storage": 0, "device": "cpu"}, "sizes": [nbytes]}).encode()
        return struct.pack("<Q", len(head)) + head + b"\1" * nbytes

    with pytest.raises(wire.WireError, match="stand for"):
        wire.decode(frame([3 << 15, 1 << 15], [0, 0], 1))
    with pytest.raises(wire.WireError, match="stand for"):  # many small inflated views add up
        wire.decode(wire.encode([torch.zeros(1).expand(1 << 20)] * 40))
    assert wire.decode(frame([4, 1000], [0, 1], 1000)).shape == (4, 1000)  # an honest broadcast crosses
    x = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(wire.decode(wire.encode(x.t())), x.t())


def test_scratch_is_emptied_between_problems(work, tmp_path):
    """What a worker of one problem leaves in the scratch folder (its hidden
    inputs, say) is gone before the next problem's first call, links unlinked,
    never followed; pytest's base folder stays for the next tests' tmp_path."""
    wc, _ = work
    scratch = tmp_path / "scratch"
    (scratch / BASETEMP / "test_a0").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    sandbox = Sandbox(limits=Limits(memory_bytes=1 << 30))
    impl = RemoteImpl("test", sandbox, wc, scratch, problems={"a": 60.0, "b": 60.0},
                      config=WorkerConfig(rlimits=sandbox.limits.rlimits(False)))
    impl.enter("a")
    (scratch / BASETEMP / "test_a0" / "inputs.txt").write_text("hidden inputs of a")
    deep = scratch / "left" / "x" / "y"
    deep.mkdir(parents=True)
    (deep / "z").write_text("z")
    (scratch / "link").symlink_to(outside)
    (scratch / BASETEMP / "link").symlink_to(tmp_path)
    impl.enter("a")  # the same problem: nothing is touched
    assert (scratch / "left").is_dir()
    impl.enter("b")
    assert [p.name for p in scratch.iterdir()] == [BASETEMP] and not list((scratch / BASETEMP).iterdir())
    assert outside.read_text() == "keep" and tmp_path.is_dir()
    impl.close()


@pytest.mark.skipif(__import__("sys").platform != "linux", reason="renices the worker through /proc")
def test_a_worker_starved_of_cpu_is_a_grader_fault_not_a_timeout(work):
    """A call stopped by its wall-clock backstop while the worker wanted a CPU
    and got none (here: reniced to 19 on a machine running 3 busy processes per
    core) was starved by the machine: a grader fault, not the submission's."""
    import contextlib
    import os

    from selftest.load import busy_machine
    from tests.memwatch import process_tree

    impl = make_impl(work, call_cpu=30.0)
    try:
        assert impl.precision.bytes_per_element("ok") == 4
        # Tight backstops only once the worker is up: its start-up (importing torch) on a busy CI machine is not
        # what this test is about.
        impl.wall_factor, impl.min_wall = 0.05, 1.5
        worker = impl._workers["precision"]
        for pid in process_tree(worker.proc.pid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)
            # With autogroup scheduling a session's weight is its group's nice (the worker leads its own session).
            with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as f:
                f.write("19")
        with busy_machine(per_core=3, seconds=120), pytest.raises(GraderFault, match="too busy"):
            for _ in range(20):  # a burn needs 0.5 CPU s: starved, it cannot get it within 1.5 s
                impl.precision.bytes_per_element("burn")
    finally:
        impl.close()
    assert not impl.states["precision"].timeouts


def _worker_pid(impl: RemoteImpl) -> int:
    return impl._workers["precision"].proc.pid


def _in_sandbox(root: int) -> list[int]:
    """The processes of ``root``'s tree in another PID namespace than this one."""
    import os

    from tests.memwatch import process_tree

    own = os.stat("/proc/self/ns/pid").st_ino
    return [p for p in process_tree(root) if os.stat(f"/proc/{p}/ns/pid").st_ino != own]


@needs_bwrap
def test_every_tmpfs_of_the_sandbox_is_sized_and_dev_is_read_only(work):
    """/dev takes nothing (read-only once its device nodes are in), /dev/shm
    and /tmp take what their sizes allow, as the kernel reports them from
    outside through the worker's root."""
    import os

    impl = make_impl(work)
    try:
        got = impl.precision.tensor_bytes("tmpfs")
        limits = impl._sandbox.limits
        assert got["/dev"] == 0 and got["/dev error"] == 30  # EROFS
        assert got["/dev/shm"] <= limits.shm_bytes and got["/dev/shm error"] == 28  # ENOSPC
        assert got["/tmp"] <= limits.tmpfs_bytes and got["/tmp error"] == 28
        inside = _in_sandbox(_worker_pid(impl))[0]
        for mount, size in (("dev/shm", limits.shm_bytes), ("tmp", limits.tmpfs_bytes)):
            st = os.statvfs(f"/proc/{inside}/root/{mount}")
            assert st.f_blocks * st.f_frsize == size, mount
    finally:
        impl.close()


@needs_bwrap
def test_the_measured_storage_counts_tmpfs_and_scratch_from_outside(work):
    """What a call keeps in files (/tmp, /dev/shm: memory no resident set
    shows; the scratch folder) is read from outside, and kept after the call."""
    from grader.sandbox.meter import StorageWatch

    impl = make_impl(work)
    scratch = work[1]
    store = scratch / "store"
    store.mkdir()
    try:
        assert impl.precision.tensor_bytes("pids") is not None  # started
        watch = StorageWatch(_worker_pid(impl), scratch, sandboxed=True).start()
        assert impl.precision.tensor_bytes("store", str(store)) == 3
        assert watch.stop() >= 3 * (8 << 20)
    finally:
        impl.close()
        remove_tree(store)


@needs_bwrap
@pytest.mark.skipif(__import__("platform").machine() not in _ARCH or __import__("sys").platform != "linux",
                    reason="the seccomp filter is Linux x86_64/aarch64 only")
def test_the_worker_is_alone_in_its_sandbox_and_filtered(work):
    """No bwrap helper shares the worker's PID namespace (--as-pid-1): the worker
    sees only itself, attaches to nothing, and every process of its namespace,
    read from outside, runs under the seccomp filter."""
    impl = make_impl(work)
    try:
        assert impl.precision.tensor_bytes("pids") == [1]
        assert not any(impl.precision.tensor_bytes("ptrace").values())
        inside = _in_sandbox(_worker_pid(impl))
        assert inside
        for pid in inside:
            status = Path(f"/proc/{pid}/status").read_text()
            assert "Seccomp:\t2" in status, (pid, status[:300])
    finally:
        impl.close()


@needs_bwrap
def test_each_worker_has_its_own_copy_of_the_files_and_it_goes_with_it(work):
    """Two workers of one submission never share an inode (a lock on one is
    not seen by the other); a worker's copy is removed once it is gone."""
    import os

    one, two = make_impl(work), make_impl(work)
    wc = work[0]
    before = sorted(p.name for p in wc.parent.iterdir())
    try:
        inodes = []
        for impl in (one, two):
            assert impl.precision.tensor_bytes("pids") == [1]
            inside = _in_sandbox(_worker_pid(impl))[0]
            inodes.append(os.stat(f"/proc/{inside}/root/submission/student/precision.py").st_ino)
        assert inodes[0] != inodes[1]
        assert os.stat(wc / "student" / "precision.py").st_ino not in inodes
    finally:
        one.close()
        two.close()
    after = sorted(p.name for p in wc.parent.iterdir())
    assert after == [n for n in before if not n.startswith(f"{wc.name}-")], "a worker's copy was left behind"


@needs_bwrap
@pytest.mark.skipif(__import__("platform").machine() not in _ARCH or __import__("sys").platform != "linux",
                    reason="the seccomp filter is Linux x86_64/aarch64 only")
def test_fallocate_reserves_nothing_past_the_watch(work):
    """posix_fallocate of 1 GiB files: the kernel's fallocate is refused, the
    blocks are written at the disk's pace instead, and the watch (a statvfs
    every 10 ms) kills the worker close to its cap, not gigabytes past it."""
    impl = make_impl(work)
    scratch = work[1]
    fill = scratch / "reserve"
    fill.mkdir()
    watch = ScratchWatch(scratch, Limits(scratch_bytes=64 << 20), impl.stop_workers).start()
    try:
        with pytest.raises(WorkerCrashed, match="killed by the grader: the scratch folder holds more than 64 MiB"):
            impl.precision.tensor_bytes("fallocate", str(fill))
    finally:
        watch.stop()
        impl.close()
        used = scratch_usage(fill, 20_000, 64)[0]
        remove_tree(fill)
    print(f"scratch held {used / (1 << 20):.0f} MiB once the worker was killed (cap 64 MiB)")
    assert watch.peak_bytes > 64 << 20 and used < 512 << 20


def test_a_problem_with_hidden_checks_is_never_split_over_groups():
    """Its public and hidden files would run at once in two groups: they stay
    in one group, in order; a problem of public files alone may still split."""
    from grader.groups import partition, units_of
    from grader.rubric import is_hidden, load
    from grader.sandbox import budgets

    costs, profile = budgets.load(), "grade"
    rub = load()
    for public_only in (False, True):
        planned = [(p, p.check_files(REPO, public_only=public_only)) for p in rub.problems]
        planned = [(p, fs) for p, fs in planned if fs]
        for k in (2, 4, 8):
            for p, fs in planned:
                alone = units_of([(p, fs)], k, costs, profile)
                mixed = len({is_hidden(f) for f in fs}) > 1
                if mixed:
                    assert alone == [(p, tuple(fs))], (p.name, k)
                groups = partition(units_of(planned, k, costs, profile), k, costs, profile)
                holding = [g for g in groups if any(q.name == p.name for q, _ in g)]
                assert len(holding) == 1 or not mixed, (p.name, k)


def test_no_hidden_check_runs_while_a_public_check_runs(tmp_path, monkeypatch):
    """A full grade runs every problem's public files, then (once they have all
    ended) the hidden ones, at any parallelism: no worker that has seen hidden
    inputs is alive beside one whose answers reach a student's message, of the
    same problem or another. Each problem still gets all its files' results."""
    import threading

    from grader import groups
    from grader.protocol import RunResults
    from grader.rubric import is_hidden, load
    from grader.sandbox import budgets
    from grader.sandbox.isolation import Sandbox

    rub = load()
    selected = [p for p in rub.problems if not p.gpu]
    assert any(is_hidden(f) for p in selected for f in p.check_files(REPO)), "no hidden checks to order here"
    running: list[tuple[str, ...]] = []
    overlaps: list[tuple] = []
    lock = threading.Lock()

    def fake_run_pytest(rub, base, problems, run, threads, progress=None):
        files = tuple(f for p in problems for f in p.files)
        with lock:
            kinds = {is_hidden(f) for f in files} | {is_hidden(f) for fs in running for f in fs}
            if len(kinds) > 1:
                overlaps.append((files, list(running)))
            running.append(files)
        threading.Event().wait(0.05)  # long enough for the groups of a phase to overlap each other
        with lock:
            running.remove(files)
        return RunResults()

    monkeypatch.setattr(groups, "run_pytest", fake_run_pytest)
    plan = groups.base_plan(tmp_path, tmp_path, "dev", Sandbox(want="rlimits"), call_cpu=1.0, start_cpu=1.0,
                            wall_factor=1.0, seed=0)
    costs = budgets.load()
    for parallel in (1, 2, 4, 8):
        for public_only in (False, True):
            out, errors = groups.run_groups(rub, selected, plan, public_only=public_only, parallel=parallel,
                                            cpu_budget=None, costs=costs, speed=1.0, run=tmp_path / f"{parallel}")
            assert sorted(out) == sorted(p.name for p in selected) and not errors
    assert not overlaps, overlaps[0]


def test_the_working_copy_refuses_folders(tmp_path):
    """A student/ of many folders is refused before anything is copied (plain
    modules only: any folder but __pycache__ is refused, the first one named)."""
    from grader.sandbox.workcopy import MAX_FOLDERS, SubmissionError

    student = tmp_path / "student"
    for i in range(MAX_FOLDERS + 1):
        (student / f"d{i}").mkdir(parents=True)
    with pytest.raises(SubmissionError, match=r"student/d0/ is a folder"):
        make_working_copy(student, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_the_scratch_cap_is_the_grades_shared_by_its_groups(tmp_path):
    """Two groups' folders together may hold the cap; past it, the group over
    its even share is stopped, the other is not; a lone folder keeps its cap."""
    folders = [tmp_path / f"group-{i}" / "scratch" for i in range(2)]
    for folder, mib in zip(folders, (24, 40), strict=True):
        folder.mkdir(parents=True)
        (folder / "data").write_bytes(os.urandom(mib << 20))
    watches = [ScratchWatch(f, Limits(scratch_bytes=48 << 20), lambda _: None) for f in folders]
    assert watches[0].check() == ""
    assert "scratch folders hold more than 48 MiB" in watches[1].check()
    remove_tree(folders[0] / "data")
    assert watches[1].check() == ""  # 40 MiB of the grade's 48: within the budget
    lone = ScratchWatch(tmp_path / "group-1" / "scratch", Limits(scratch_bytes=32 << 20), lambda _: None)
    assert lone.check()  # 40 MiB of a 32 MiB budget
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data").write_bytes(os.urandom(40 << 20))
    single = ScratchWatch(tmp_path / "elsewhere", Limits(scratch_bytes=32 << 20), lambda _: None)
    assert single.check() == "the scratch folder holds more than 32 MiB"  # not a group's: its own cap


@pytest.mark.skipif(__import__("platform").machine() not in _ARCH or __import__("sys").platform != "linux",
                    reason="the seccomp filter is Linux x86_64/aarch64 only")
def test_the_seccomp_filter_refuses_ptrace_without_bubblewrap_too(work):
    """In rlimits mode the worker shares the host's processes: it may not
    ptrace its parent, the trusted pytest process."""
    wc, scratch = work
    sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30), want="rlimits")
    impl = RemoteImpl("test", sandbox, wc, scratch, problems={"precision": 120.0}, call_cpu=20.0,
                      config=WorkerConfig(rlimits=sandbox.limits.rlimits(False)))
    impl.enter("precision")
    try:
        assert impl.precision.tensor_bytes("ptrace-parent") == "Operation not permitted"
    finally:
        impl.close()

"""What a worker can see and do, read from inside and from outside (bubblewrap
where usable): no repository, host or network; its own PID namespace, alone
and under the seccomp filter; sized tmpfs mounts, storage measured from
outside; memory, process and ptrace limits.

The hostile module and the fixtures are in selftest/sandboxing.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.sandbox.cgroups import PidsCgroup, pids_limit
from grader.sandbox.errors import GraderFault, WorkerCrashed
from grader.sandbox.forkserver import FORKS
from grader.sandbox.scratch import remove_tree
from selftest.sandboxing import (  # noqa: F401 (the fixtures impl and work)
    REPO,
    _in_sandbox,
    _worker_pid,
    impl_fixture,
    make_impl,
    needs_bwrap,
    needs_seccomp,
    work_fixture,
)


@needs_bwrap
def test_the_worker_sees_no_repository_no_host_and_no_network(impl, tmp_path):
    assert impl.precision.tensor_bytes("read", str(REPO / "reference" / "precision.py")).startswith("refused")
    assert impl.precision.tensor_bytes("read", str(REPO / "grader" / "hidden" / "conftest.py")).startswith(
        "refused")
    listing = impl.precision.tensor_bytes("list", str(REPO))
    assert "reference" not in listing and "grader" not in listing, listing
    assert impl.precision.tensor_bytes("list", "/submission") == [
        "_grader_confine.py", "_grader_seal.py", "_grader_worker.py", "grader", "student", "tests"]
    assert "reference" not in impl.precision.tensor_bytes("list", "/proc/1/cwd/..")
    assert impl.precision.tensor_bytes("net").startswith("refused")
    assert max(impl.precision.tensor_bytes("pids")) < 100  # its own PID namespace
    target = tmp_path / "forged.json"
    assert impl.precision.tensor_bytes("write", str(target)).startswith("refused")
    assert not target.exists()
    assert impl.precision.tensor_bytes("write", "/submission/student/x.py").startswith("refused")


def test_memory_limit(impl):
    with pytest.raises(MemoryError) as e:
        impl.precision.bytes_per_element("memory")
    assert e.value.remote_type == "MemoryError"  # the submission's, re-raised by name


@needs_seccomp
def test_no_processes(impl):
    with pytest.raises(OSError, match="BlockingIOError"):
        impl.precision.bytes_per_element("fork")
    assert impl.states["precision"].seccomp == "on"


def _pids_cgroups() -> bool:
    cg = PidsCgroup.create(1)
    if cg is not None:
        cg.close()
    return cg is not None


@pytest.mark.skipif(not _pids_cgroups(), reason="no pids cgroup can be made here (not root, no delegation)")
def test_pids_cgroup_caps_a_thread_bomb_even_for_root(work):
    """Threads count as tasks: the worker's pids cgroup caps them, and it holds
    for root, unlike RLIMIT_NPROC (the seccomp filter refuses processes)."""
    impl = make_impl(work)
    try:
        made = impl.precision.bytes_per_element("threadbomb")
        worker = impl._workers["precision"]
        assert worker.cgroup is not None and 16 <= made < pids_limit(0), made
        cgroup = worker.cgroup.path
    finally:
        impl.close()
    assert not worker.cgroup and not cgroup.exists()  # removed with the worker


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
@needs_seccomp
def test_the_worker_sees_only_its_fork_server_and_can_touch_nothing(work):
    """No bwrap helper shares the sandbox's PID namespace (--as-pid-1): a worker
    sees itself and its fork server (PID 1, which ran nothing of the
    submission), can signal and attach to neither, and runs under the seccomp
    filter, read from outside; the server, whose memory every worker starts
    from, is not dumpable (no worker of its uid may open it)."""
    impl = make_impl(work)
    try:
        pids = impl.precision.tensor_bytes("pids")
        assert pids[0] == 1 and len(pids) == 2, pids
        assert impl.precision.bytes_per_element("signal") == []
        assert not any(impl.precision.tensor_bytes("ptrace").values())
        worker = _worker_pid(impl)
        assert "Seccomp:\t2" in Path(f"/proc/{worker}/status").read_text()
        server = impl._server
        assert server is not None and server.server_pid > 0
        assert "Seccomp:\t0" in Path(f"/proc/{server.server_pid}/status").read_text()
        assert Path(f"/proc/{server.server_pid}/mem").stat().st_uid == 0  # not dumpable: root's
    finally:
        impl.close()


@needs_seccomp
@pytest.mark.parametrize("want", ["auto", "rlimits"])
def test_a_worker_cannot_make_namespaces_nor_lower_its_own_priority(work, want):
    """No nested user or mount namespace (a private tmpfs no meter sees), no
    scheduling change (a wait of its own must never look like the machine
    starving it), in every isolation mode: the seccomp filter refuses them."""
    impl = make_impl(work, want=want)
    try:
        assert impl.precision.bytes_per_element("unshare") == "refused: Operation not permitted"
        assert impl.precision.bytes_per_element("idle") == 3
    finally:
        impl.close()


def test_a_thread_running_on_after_the_main_thread_ended_is_the_submissions_crash(work):
    """A worker whose main thread ends itself (the raw exit system call) while
    another thread goes on: the meter, which reads every thread, sees it, and
    the call ends as the submission's crash, never a fault of the machine."""
    impl = make_impl(work)
    try:
        with pytest.raises(WorkerCrashed, match="main thread ended while other threads ran on"):
            impl.precision.bytes_per_element("zombie")
        assert impl.precision.bytes_per_element("ok") == 4  # a fresh worker serves the next call
    finally:
        impl.close()
    assert not impl.states["precision"].fault and len(impl.states["precision"].crashes) == 1


def test_the_meter_counts_every_thread_of_a_process_whose_main_thread_ended(tmp_path):
    """CPU time and memory of a process listed as a zombie while a thread of it
    runs on are read from its threads, as the kernel accounts them."""
    import subprocess
    import sys
    import time

    from grader.sandbox.meter import Meter

    script = tmp_path / "zombie.py"
    script.write_text(
        "import ctypes, platform, threading, time\n"
        "def burn():\n"
        "    buf = bytearray(64 << 20)\n"
        "    for i in range(0, len(buf), 4096): buf[i] = 1\n"
        "    end = time.process_time() + 30\n"
        "    while time.process_time() < end: pass\n"
        "threading.Thread(target=burn).start()\n"
        "time.sleep(0.2)\n"
        "ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        meter = Meter(proc.pid)
        deadline = time.monotonic() + 60
        while (reading := meter.read()).cpu < 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reading.leader_exited and reading.cpu >= 1.0 and reading.rss >= 64 << 20, reading
    finally:
        proc.kill()
        proc.wait()


@needs_seccomp
def test_the_seccomp_filter_refuses_ptrace_without_bubblewrap_too(work):
    """In rlimits mode the worker shares the host's processes: it may not
    ptrace its parent, the trusted pytest process."""
    impl = make_impl(work, want="rlimits")
    try:
        assert impl.precision.tensor_bytes("ptrace-parent") == "Operation not permitted"
    finally:
        impl.close()


@pytest.mark.skipif(not FORKS, reason="workers fork from a server on Linux only")
def test_a_failed_worker_start_is_a_grader_error(work):
    """A fork server that cannot start a worker (its open-file limit lowered
    to 3 from outside, as the server_limits cheat tried before the seccomp
    filter refused prlimit64 on another process) makes the problem a grader
    error, never the submission's failure: no second server is tried."""
    import resource

    impl = make_impl(work)
    try:
        assert impl.precision.bytes_per_element("ok") == 4
        server = impl._server
        # two workers: the problem's first import (then retired), and the call's
        assert server is not None and impl.states["precision"].workers == 2
        resource.prlimit(server.server_pid, resource.RLIMIT_NOFILE, (3, 3))  # what a worker could not do
        impl._fresh()  # the next call needs a new worker: the server cannot start one
        with pytest.raises(GraderFault):
            impl.precision.bytes_per_element("ok")
        assert impl.servers == 1
        assert impl.states["precision"].fault
        assert not impl.states["precision"].crashes
    finally:
        impl.close()


_PARKER = r"""
import socket, sys
keep, total = [], 0
while total < (64 << 20):  # 64 MiB in AF_UNIX socket queues: neither resident memory nor a file
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        while True:
            total += a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    keep.append((a, b))
print(total, flush=True)
sys.stdin.read()
"""


def test_a_memory_cgroup_counts_what_no_resident_meter_sees(tmp_path):
    """Where the grader may make a memory cgroup (root, cgroup v1), a measured
    call's peak is also the kernel's accounting: socket queues (which the
    seccomp filter refuses to a worker anyway) are charged there, though no
    resident-memory meter sees them."""
    import subprocess
    import sys

    from grader.sandbox.cgroups import MemoryCgroup

    memcg = MemoryCgroup.create()
    if memcg is None:
        pytest.skip("no memory cgroup can be made here (root with cgroup v1)")
    proc = subprocess.Popen([sys.executable, "-c", _PARKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert memcg.join(proc.pid)
        memcg.start()
        assert proc.stdout is not None and int(proc.stdout.readline()) >= 64 << 20
        assert memcg.growth() >= 60 << 20, memcg.growth()
    finally:
        proc.kill()
        proc.wait()
        memcg.close()
    assert not memcg.path.exists()

"""What a worker can see and do, read from inside and from outside (bubblewrap
where usable): no repository, host or network; its own PID namespace, alone
and under the seccomp filter; sized tmpfs mounts, storage measured from
outside; memory, process and ptrace limits.

The hostile module and the fixtures are in selftest/sandboxing.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.sandbox.cgroups import PidsCgroup, pids_limit
from grader.sandbox.client import RemoteError
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.sandbox.scratch import remove_tree
from grader.worker.main import _ARCH, WorkerConfig
from selftest.sandboxing import REPO, _in_sandbox, _worker_pid, impl_fixture, make_impl, needs_bwrap, work_fixture  # noqa: F401 (the fixtures impl and work)


@needs_bwrap
def test_the_worker_sees_no_repository_no_host_and_no_network(impl, tmp_path):
    assert impl.precision.tensor_bytes("read", str(REPO / "reference" / "precision.py")).startswith("refused")
    assert impl.precision.tensor_bytes("read", str(REPO / "grader" / "hidden" / "conftest.py")).startswith(
        "refused")
    listing = impl.precision.tensor_bytes("list", str(REPO))
    assert "reference" not in listing and "grader" not in listing, listing
    assert impl.precision.tensor_bytes("list", "/submission") == [
        "_grader_seal.py", "_grader_worker.py", "student", "tests"]
    assert "reference" not in impl.precision.tensor_bytes("list", "/proc/1/cwd/..")
    assert impl.precision.tensor_bytes("net").startswith("refused")
    assert max(impl.precision.tensor_bytes("pids")) < 100  # its own PID namespace
    target = tmp_path / "forged.json"
    assert impl.precision.tensor_bytes("write", str(target)).startswith("refused")
    assert not target.exists()
    assert impl.precision.tensor_bytes("write", "/submission/student/x.py").startswith("refused")


def test_memory_limit(impl):
    with pytest.raises(RemoteError, match="MemoryError"):
        impl.precision.bytes_per_element("memory")


@pytest.mark.skipif(__import__("platform").machine() not in _ARCH or __import__("sys").platform != "linux",
                    reason="the seccomp filter is Linux x86_64/aarch64 only")
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

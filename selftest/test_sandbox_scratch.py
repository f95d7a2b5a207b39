"""The files a worker writes and gets: the scratch folder's cap (watched from
outside, shared by a grade's groups, past fallocate), how its usage is
counted, its emptying between problems, removal of hostile trees, the
working copy's refusal of folders, and each worker's own copy of the files,
removed with it (checked with no other worker of this module alive).

The hostile module and the fixtures are in selftest/sandboxing.py."""

from __future__ import annotations

import os

import pytest

from grader.protocol import ProblemSpec
from grader.sandbox.errors import WorkerCrashed
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.sandbox.scratch import BASETEMP, ScratchWatch, remove_tree, scratch_usage
from grader.staging.workcopy import make_working_copy
from selftest.sandboxing import (
    _in_sandbox,
    _worker_pid,
    make_impl,
    needs_bwrap,
    needs_seccomp,
    work_fixture,  # noqa: F401 (the fixture work)
)


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


@needs_bwrap
@needs_seccomp
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


def test_the_scratch_cap_is_its_own_folders(tmp_path):
    """A folder over its cap is stopped with its cap named; what a folder
    beside it holds does not count against it."""
    folders = [tmp_path / name for name in ("small", "big")]
    for folder, mib in zip(folders, (24, 40), strict=True):
        folder.mkdir()
        (folder / "data").write_bytes(os.urandom(mib << 20))
    small, big = (ScratchWatch(f, Limits(scratch_bytes=32 << 20), lambda _: None) for f in folders)
    assert small.check() == ""  # 24 + 40 MiB beside it: only its own 24 count
    assert big.check() == "the scratch folder holds more than 32 MiB"


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
    impl = RemoteImpl("test", sandbox, wc, scratch, [ProblemSpec("a", 60.0, ()), ProblemSpec("b", 60.0, ())])
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


def test_the_working_copy_refuses_folders(tmp_path):
    """A student/ of many folders is refused before anything is copied (plain
    modules only: any folder but __pycache__ is refused, the first one named)."""
    from grader.staging.workcopy import MAX_FOLDERS, SubmissionError

    student = tmp_path / "student"
    for i in range(MAX_FOLDERS + 1):
        (student / f"d{i}").mkdir(parents=True)
    with pytest.raises(SubmissionError, match=r"student/d0/ is a folder"):
        make_working_copy(student, tmp_path / "work")
    assert not (tmp_path / "work").exists()


@needs_bwrap
def test_each_worker_has_its_own_copy_of_the_files_and_it_goes_with_it(work):
    """Two sandboxes of one submission never share an inode (a lock on one is
    not seen by the other); a sandbox's copy is removed once it is gone."""
    import os

    one, two = make_impl(work), make_impl(work)
    wc = work[0]
    before = sorted(p.name for p in wc.parent.iterdir())
    try:
        inodes = []
        for impl in (one, two):
            assert len(impl.precision.tensor_bytes("pids")) == 2  # its fork server and itself
            inside = _in_sandbox(_worker_pid(impl))[0]
            inodes.append(os.stat(f"/proc/{inside}/root/submission/student/precision.py").st_ino)
        assert inodes[0] != inodes[1]
        assert os.stat(wc / "student" / "precision.py").st_ino not in inodes
    finally:
        one.close()
        two.close()
    after = sorted(p.name for p in wc.parent.iterdir())
    assert after == [n for n in before if not n.startswith(f"{wc.name}-")], "a sandbox's copy was left behind"

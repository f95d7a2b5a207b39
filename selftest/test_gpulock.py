"""grader/mfu/gpulock.py: two grader processes never hold one device at once.

Real processes, a fake device key: each holder announces itself on stdout
and holds the lock until the test tells it to let go, so the order of events
is decided by the test, never by timing. That the second process is really
waiting (not merely slow to start) is read from the kernel's lock table
(/proc/locks lists a blocked waiter with ``->``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.mfu import gpulock

REPO = Path(__file__).resolve().parent.parent
HOLDER = """
import sys
from grader.mfu import gpulock
print("waiting", flush=True)
with gpulock.device_lock(sys.argv[1], directory=sys.argv[2]):
    print("in", flush=True)
    sys.stdin.readline()
    print("out", flush=True)
"""

pytestmark = pytest.mark.skipif(not Path("/proc/locks").is_file(), reason="needs /proc/locks (Linux)")


def holder(key: str, folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLDER, key, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def blocked_on_a_lock(pid: int) -> bool:
    """Whether /proc/locks lists ``pid`` as waiting for a FLOCK."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # "1: -> FLOCK ADVISORY WRITE <pid> <dev:inode> 0 EOF"
        if "->" in fields and fields[fields.index("->") + 1] == "FLOCK" and fields[fields.index("->") + 4] == str(pid):
            return True
    return False


def wait_until(condition, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def nothing_to_read(proc: subprocess.Popen[str]) -> bool:
    assert proc.stdout is not None
    return not select.select([proc.stdout], [], [], 0)[0]


def test_a_second_grader_waits_for_the_first_then_runs(tmp_path):
    a = holder("fake0", tmp_path)
    b = None
    try:
        assert a.stdout.readline() == "waiting\n" and a.stdout.readline() == "in\n"
        assert gpulock.lock_path("fake0", tmp_path).read_text() == f"{a.pid}\n"
        b = holder("fake0", tmp_path)
        assert b.stdout.readline() == "waiting\n"
        wait_until(lambda: blocked_on_a_lock(b.pid), "the second holder to block on the lock")
        assert nothing_to_read(b), "the second holder got in while the first held the device"
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.stdout.readline() == "out\n"
        assert b.stdout.readline() == "in\n", "the second holder did not get the device after the first"
        assert gpulock.lock_path("fake0", tmp_path).read_text() == f"{b.pid}\n"
        b.stdin.write("\n")
        b.stdin.flush()
        assert b.stdout.readline() == "out\n"
        assert a.wait(30) == 0 and b.wait(30) == 0
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_other_devices_are_not_serialised(tmp_path):
    a, b = holder("fake0", tmp_path), holder("fake1", tmp_path)
    try:
        for p in (a, b):
            assert p.stdout.readline() == "waiting\n" and p.stdout.readline() == "in\n"
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_a_killed_holder_frees_the_device(tmp_path):
    a, b = holder("fake0", tmp_path), None
    try:
        assert a.stdout.readline() == "waiting\n" and a.stdout.readline() == "in\n"
        b = holder("fake0", tmp_path)
        assert b.stdout.readline() == "waiting\n"
        wait_until(lambda: blocked_on_a_lock(b.pid), "the second holder to block on the lock")
        a.send_signal(signal.SIGKILL)
        a.wait()
        assert b.stdout.readline() == "in\n"
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_a_bounded_wait_gives_up_with_device_busy(tmp_path):
    with gpulock.device_lock("fake0", directory=tmp_path) as waited:
        assert waited >= 0
        a = holder("fake0", tmp_path)
        try:
            assert a.stdout.readline() == "waiting\n"
            wait_until(lambda: blocked_on_a_lock(a.pid), "the holder to block on the lock")
        finally:
            a.kill()
            a.wait()
        # flock locks belong to the open file: a second open in this process conflicts too
        with pytest.raises(gpulock.DeviceBusy, match="stayed busy"), \
                gpulock.device_lock("fake0", directory=tmp_path, timeout=0):
            pass


def test_lock_paths_are_per_device_and_safe(tmp_path, monkeypatch):
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    assert gpulock.lock_path("uuid-GPU-1/../x") == tmp_path / "grader-gpu-uuid-GPU-1_.._x.lock"
    assert gpulock.lock_path("a") != gpulock.lock_path("b")


def held_by(pid: int, path: Path) -> bool:
    """Whether /proc/locks lists ``pid`` holding a FLOCK on ``path``'s inode."""
    inode = str(path.stat().st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and "FLOCK" in fields and fields[4] == str(pid) and fields[5].endswith(f":{inode}"):
            return True
    return False


def test_the_lock_is_held_from_first_to_last_check_of_a_gpu_problem(tmp_path, monkeypatch):
    """The GpuLock the grader's plugin holds before each check (grader/plugin.py,
    step 1), driven check by check with a fake device."""
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(gpulock, "lock_key", lambda device: "fake0")
    grading = gpulock.GpuLock(["mfu"], "cuda")
    path = gpulock.lock_path("fake0")

    def run(problem: str) -> None:
        grading.hold(problem)  # the test would run next

    run("precision")
    assert not path.exists() or not held_by(os.getpid(), path), "a CPU problem took the device"
    run("mfu")
    assert held_by(os.getpid(), path), "the GPU problem's first check does not hold the device"
    run("mfu")
    assert held_by(os.getpid(), path), "the lock was let go between two checks of the GPU problem"
    run("training")
    assert not held_by(os.getpid(), path), "the lock outlived the GPU problem"


def test_the_cpu_standing_in_for_a_gpu_takes_a_lock_of_its_own():
    """With --cpu-stand-in the GPU problem's lock is the CPU's: rehearsals on
    one machine take turns, and no CUDA is asked for a device."""
    assert gpulock.lock_key("cpu") == gpulock.STAND_IN_KEY
    assert gpulock.lock_path(gpulock.STAND_IN_KEY).name == f"grader-gpu-{gpulock.STAND_IN_KEY}.lock"

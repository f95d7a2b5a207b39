"""What a worker's processes consume, read from outside: CPU time and memory.

The grader's time budgets count the CPU time of the worker's whole process
tree (every thread, live or ended, user and system time, reaped children
included), read by the trusted side from ``/proc/PID/stat`` and each thread's
``/proc/PID/task/TID/stat`` (elsewhere through psutil), never asked of the
worker: a process whose main thread ended while others run on is still
counted, and the reading says so (:attr:`Reading.leader_exited`). On a busy
machine a process waits for a CPU, which costs wall time but no CPU time, so a
budget in CPU seconds means the same on an idle laptop and on a grading host
running ten jobs per core. A reading also says whether one of the tree's
threads was runnable (running or waiting for a CPU) and how much memory the
tree holds, so that a call stopped by its
wall-clock backstop can be told apart: asleep or blocked (the submission's
doing) or starved of CPU (the machine's).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox import proctree
from tests.memwatch import process_tree

__all__ = ["HOST_WRITABLE", "Meter", "Reading", "StorageWatch", "held_deleted"]

#: How often the tree's membership is looked up again (its processes rarely
#: change: a worker may create none unless its problem allows some).
RESCAN_SECONDS = 1.0


@dataclass(frozen=True)
class Reading:
    """One look at a process tree."""

    cpu: float  # CPU seconds used so far (never below an earlier reading of the same meter)
    rss: int  # resident bytes now, summed over the tree
    runnable: bool  # whether one of its threads was running or waiting for a CPU
    at: float  # time.monotonic() of the reading
    leader_exited: bool = False  # one of its processes lives on after its main thread ended


class Meter:
    """CPU time and memory of the process tree below ``root``, read from outside.

    :meth:`read` looks now; :attr:`last` is the latest reading (zeros before the
    first), :attr:`peak_rss` the most resident memory any reading saw. CPU
    time never decreases between readings: a process that exits and is reaped
    outside the tree takes its time with it, so the highest total seen is kept.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.last = Reading(0.0, 0, False, time.monotonic())
        self.peak_rss = 0
        self._pids: list[int] = []
        self._scanned = 0.0

    def read(self) -> Reading:
        now = time.monotonic()
        if not self._pids or now - self._scanned > RESCAN_SECONDS:
            self._pids, self._scanned = process_tree(self.root), now
        cpu, rss, runnable, exited = _usage(self._pids)
        self.last = Reading(max(cpu, self.last.cpu), rss, runnable, now, exited)
        self.peak_rss = max(self.peak_rss, rss)
        return self.last


def _usage(pids: list[int]) -> tuple[float, int, bool, bool]:
    """(CPU seconds, resident bytes, a thread runnable, a main thread ended) of ``pids``."""
    cpu, rss, runnable, exited = 0.0, 0, False, False
    if proctree.AVAILABLE:
        for pid in pids:
            p = proctree.read(pid, threads=True)
            if p is not None:
                cpu += p.cpu  # a zombie's CPU too: its time was spent
                if p.live:
                    rss, runnable, exited = rss + p.rss, runnable or p.runnable, exited or p.leader_exited
        return cpu, rss, runnable, exited
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            with proc.oneshot():
                t = proc.cpu_times()
                cpu += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
                rss += proc.memory_info().rss
                runnable = runnable or proc.status() == psutil.STATUS_RUNNING
    return cpu, rss, runnable, False


#: The sandbox's own writable tmpfs mounts (grader/sandbox/isolation.py), relative to
#: the worker's root: their pages are memory that no resident set shows.
SANDBOX_TMPFS = ("tmp", "dev/shm")


class StorageWatch:
    """What a worker stores beside its resident memory during a call, read from
    outside: the bytes used on its sandbox's tmpfs mounts (``statvfs`` through
    ``/proc/PID/root``, bwrap mode: its fork server empties them before each
    worker starts), and the bytes of the files the call made or changed
    (a new inode, or a new ``ctime``, which no process can set back) in the
    scratch folder and, where the worker runs as its own uid ``owner`` on the
    host's folders (uid mode), among the files that uid owns in the host's
    world-writable folders (:data:`HOST_WRITABLE`), plus deleted files its
    processes hold open. A file made before the call and rewritten during it
    counts whole: deleting what an earlier call left hides nothing, and a file
    the test wrote for the call (a token file) counts nothing, however the
    disk allocates its blocks meanwhile. (In rlimits mode, which grades public
    checks only, none of the host's folders is attributed: they are shared
    with everything else.)

    A call that keeps its data in files instead of in its memory (a tensor
    offloaded to ``/dev/shm`` and read back) holds it all the same: a measured
    peak (:meth:`grader.sandbox.remote.RemoteImpl.measured_scenario`) adds
    :meth:`stop`'s figure to the resident growth. Sampled every ``interval``
    seconds (the tmpfs mounts; the walks, of the scratch folder, the uid's
    files and open file descriptors, every tenth time), plus once at :meth:`stop`.
    """

    def __init__(self, root: int, scratch: Path | None, sandboxed: bool, interval: float = 0.002,
                 owner: int | None = None) -> None:
        self.root, self.scratch, self.interval = root, scratch, interval
        self._mounts: list[str] = []
        # uid mode: where the kernel has no Landlock and the grader may make no memory cgroup (cgroup v2 hosts),
        # this walk is the only meter of what the worker stores in the host's /tmp and /dev/shm.
        self._owner = owner if sys.platform == "linux" and not sandboxed else None
        if sandboxed and sys.platform == "linux":
            self._mounts = _sandbox_mounts(root)
        self._devices = frozenset(_device(m) for m in self._mounts)
        self.tmpfs_before = self.tmpfs_peak = self._tmpfs()
        self._before = self._files()
        self.stored_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="storage-watch", daemon=True)

    def start(self) -> StorageWatch:
        self._thread.start()
        return self

    def _tmpfs(self) -> int:
        used = 0
        for mount in self._mounts:
            with contextlib.suppress(OSError):
                st = os.statvfs(mount)
                used += (st.f_blocks - st.f_bfree) * st.f_frsize
        return used

    def _files(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(device, inode) -> (ctime in ns, bytes allocated) of the files a call may store in."""
        files: dict[tuple[int, int], tuple[int, int]] = {}
        if self.scratch is not None:
            _walk_files([str(self.scratch)], files, owner=None, skip=None)
        if self._owner is not None:
            _walk_files([p for p in HOST_WRITABLE if os.path.isdir(p)], files, owner=self._owner,
                        skip=str(self.scratch) if self.scratch is not None else None)
        return files

    def _stored(self) -> int:
        """The bytes of the files made or changed since the call began, and of
        deleted files held open by the worker (outside any measured tmpfs)."""
        before = self._before
        total = sum(size for key, (ctime, size) in self._files().items() if before.get(key, (None,))[0] != ctime)
        if sys.platform == "linux":
            total += held_deleted(self.root, self._devices)
        return total

    def _sample(self) -> None:
        n = 0
        while not self._stop.wait(self.interval):
            self.tmpfs_peak = max(self.tmpfs_peak, self._tmpfs())
            n += 1
            if n % 10 == 0:
                self.stored_peak = max(self.stored_peak, self._stored())

    def stop(self) -> int:
        """The most bytes stored beyond what was stored at the start (tmpfs
        growth and files made or changed, each at its peak)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.tmpfs_peak = max(self.tmpfs_peak, self._tmpfs())
        self.stored_peak = max(self.stored_peak, self._stored())
        return max(0, self.tmpfs_peak - self.tmpfs_before) + self.stored_peak


def _walk_files(roots: list[str], files: dict[tuple[int, int], tuple[int, int]], *, owner: int | None,
                skip: str | None, max_entries: int = 20_000) -> None:
    """Add to ``files`` the regular files below ``roots`` (never following a
    link): all of them, or with ``owner`` only that uid's, descending only
    into folders it owns or anyone may write (the only places it can have
    made files), ``skip`` left out. At most ``max_entries`` entries (of
    ``owner``'s, when given) are looked at: other users' files in a shared
    folder never cut the walk short."""
    entries = 0
    stack = list(roots)
    while stack and entries < max_entries:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                mine = owner is None or st.st_uid == owner
                entries += mine
                if stat.S_ISDIR(st.st_mode):
                    if (mine or st.st_mode & 0o002) and entry.path != skip:
                        stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode) and mine:
                    files[(st.st_dev, st.st_ino)] = (st.st_ctime_ns, st.st_blocks * 512)


def _device(path: str) -> int:
    try:
        return os.stat(path).st_dev
    except OSError:
        return -1


def _sandbox_mounts(root: int) -> list[str]:
    """The sandbox's tmpfs mounts as paths this process can ``statvfs``: under
    ``/proc/PID/root`` of a process of ``root``'s tree that lives in another
    mount namespace (the sandboxed worker, not bwrap's outer process)."""
    try:
        own = os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return []
    for pid in reversed(process_tree(root)):
        try:
            if os.stat(f"/proc/{pid}/ns/mnt").st_ino == own:
                continue
        except OSError:
            continue
        return [f"/proc/{pid}/root/{m}" for m in SANDBOX_TMPFS]
    return []


#: The host's folders any user may create files in (Linux's usual ones): a
#: worker running as its own uid on the host's filesystem (uid mode) can store
#: data there, and only in folders it made below them.
HOST_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/dev/mqueue")


def held_deleted(root: int, skip_devices: frozenset[int] = frozenset(),
                 seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes allocated to deleted files that ``root``'s process tree holds
    open (unlinked, they are in no folder, yet keep their blocks or pages),
    except on ``skip_devices`` (filesystems measured as a whole) and inodes
    already in ``seen``."""
    seen = set() if seen is None else seen
    total = 0
    for pid in process_tree(root):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_dev not in skip_devices and key not in seen:
                seen.add(key)
                total += st.st_blocks * 512
    return total

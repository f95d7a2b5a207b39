"""The scratch folder, seen from the trusted side.

The scratch folder is the one place a bwrapped worker can write on the host
disk. :class:`ScratchWatch` measures it (:func:`scratch_usage`: bytes allocated,
entries, depth, walked without following links) while calls run and reports
when it is over its :class:`grader.sandbox.limits.Limits`; :func:`remove_tree` removes
what a submission left there (or anywhere: its unpacked zip) without recursing
or following links.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from grader.sandbox.limits import Limits

#: pytest's ``--basetemp`` inside the scratch folder: the tests' ``tmp_path``
#: folders, which the workers see (grader/groups.py sets it; grader/sandbox/remote.py
#: empties it between problems).
BASETEMP = "pytest"
#: Seconds between two looks at the free space of the scratch folder's filesystem.
FAST = 0.01
#: The least seconds between two walks (other writers on the same filesystem
#: shrink its free space too: they cost walks, never a kill).
MIN_WALK = 0.05


def remove_tree(path: Path | str) -> None:
    """Remove ``path`` and everything below it, iteratively and fd-relatively.

    A submission controls what is in its scratch folder and what its zip
    unpacks to: folders thousands deep (recursive removers hit the recursion
    limit, paths pass PATH_MAX), folders without permissions, symlinks to
    anything. This never recurses, never follows a symlink (it unlinks it),
    holds two descriptors at a time, and makes each folder writable before
    emptying it. Raises ``OSError`` if something cannot be removed.
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow
    os.chmod(path, 0o700)
    fd = os.open(path, flags)
    names: list[str] = []  # the path from ``path`` down to the folder ``fd`` is
    try:
        while True:
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o700)
            child = None
            with os.scandir(fd) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if child is not None:
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700, dir_fd=fd)  # known to be a folder, not a link
                sub = os.open(child, flags, dir_fd=fd)
                os.close(fd)
                fd, names = sub, [*names, child]
                continue
            if not names:
                break
            parent = os.open("..", flags & ~nofollow, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)  # emptied: an error here stops the removal
    finally:
        os.close(fd)
    os.rmdir(path)


def scratch_usage(path: Path | str, max_entries: int, max_depth: int) -> tuple[int, int, int]:
    """(bytes allocated on disk, entries, deepest level) under ``path``, walked
    without following links and without recursion. Stops counting once
    ``max_entries`` or ``max_depth`` is passed (the caller only needs to know
    that it was), so one call costs at most ``max_entries`` stats and
    ``max_depth`` open descriptors."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        top = os.open(path, flags)
    except OSError:
        return 0, 0, 0
    total = entries = deepest = 0
    stack: list[tuple[int, int]] = [(top, 0)]
    try:
        while stack:
            fd, depth = stack.pop()
            try:
                deepest = max(deepest, depth)
                if depth > max_depth or entries > max_entries:
                    continue
                with os.scandir(fd) as it:
                    for entry in it:
                        entries += 1
                        if entries > max_entries:
                            break
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
                        if stat.S_ISDIR(st.st_mode):
                            if depth + 1 > max_depth:
                                deepest = max(deepest, depth + 1)
                                continue
                            with contextlib.suppress(OSError):
                                stack.append((os.open(entry.name, flags, dir_fd=fd), depth + 1))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return total, entries, deepest


class ScratchWatch:
    """Watches the scratch folder the workers share (the one place a bwrapped
    worker can write on the host disk) from the trusted side, every
    ``interval`` seconds, and calls ``over(reason)`` while it holds more than
    the limits allow (bytes allocated, entries, depth). The callback kills the
    workers; what they wrote stays bounded by the limit plus what one worker
    writes in one interval, and is removed with the run's folder."""

    def __init__(self, scratch: Path, limits: Limits, over: Callable[[str], None], interval: float = 0.5) -> None:
        self.scratch, self.limits, self.over, self.interval = scratch, limits, over, interval
        self.peak_bytes = self.peak_entries = self.last_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scratch-watch", daemon=True)

    def start(self) -> ScratchWatch:
        self._thread.start()
        return self

    def check(self) -> str:
        """Measure once; the reason the scratch folder is over its limits, or ""."""
        lim = self.limits
        used, entries, depth = scratch_usage(self.scratch, lim.scratch_entries, lim.scratch_depth)
        self.last_bytes = used
        self.peak_bytes, self.peak_entries = max(self.peak_bytes, used), max(self.peak_entries, entries)
        if used > lim.scratch_bytes:
            return f"the scratch folder holds more than {lim.scratch_bytes >> 20} MiB"
        if entries > lim.scratch_entries:
            return f"the scratch folder holds more than {lim.scratch_entries} files and folders"
        if depth > lim.scratch_depth:
            return f"the scratch folder is more than {lim.scratch_depth} folders deep"
        return ""

    def _run(self) -> None:
        # A walk every ``interval``; between walks, a look every ``FAST``
        # seconds at the free space of the filesystem that holds the folder (one
        # statvfs): once it shrank by more than the folder's headroom, walk at
        # once. What a worker can put on the disk before it is killed is then
        # what it writes in a few milliseconds, not in half a second.
        last_walk, free_then, headroom = 0.0, self._free(), self.limits.scratch_bytes
        while not self._stop.wait(FAST):
            now = time.monotonic()
            free = self._free()
            if now - last_walk < self.interval and (free_then - free <= headroom or now - last_walk < MIN_WALK):
                continue
            reason = self.check()
            last_walk, free_then = now, self._free()
            headroom = max(0, self.limits.scratch_bytes - self.last_bytes)
            if reason:
                self.over(reason)

    def _free(self) -> int:
        try:
            st = os.statvfs(self.scratch)
        except OSError:
            return 0
        return st.f_bavail * st.f_frsize

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

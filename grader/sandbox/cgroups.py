"""Cgroups per worker, where this process may make them.

Unlike RLIMIT_NPROC, a cgroup's ``pids.max`` binds root too.
:meth:`PidsCgroup.create` returns None where no cgroup can be made (then the
worker's seccomp filter, mandatory on Linux x86_64/aarch64, is what stops
processes); :func:`pids_limit` is how many tasks one worker's cgroup allows.
:class:`MemoryCgroup` is the kernel's accounting of a measured call's memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from pathlib import Path


def pids_limit(processes: int) -> int:
    """Tasks (processes and threads: the kernel counts both) a worker's pids
    cgroup allows: torch's thread pools (a few per CPU), bwrap, and the
    ``processes`` the rubric grants."""
    return 64 + 3 * (os.cpu_count() or 1) + processes


class PidsCgroup:
    """A pids cgroup for one worker, where this process may make one (root
    with cgroup v1, or a delegated cgroup v2 subtree): unlike RLIMIT_NPROC,
    its ``pids.max`` binds root too. ``create`` returns None elsewhere (then
    the seccomp filter, mandatory on Linux x86_64/aarch64, is what stops
    processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_tasks: int) -> PidsCgroup | None:
        parent = _pids_parent()
        if parent is None:
            return None
        _remove_stale_cgroups(parent)
        path = parent / f"grader-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(max_tasks))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup: a shell moves itself in, then execs it."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def close(self) -> None:
        """Kill whatever is left in it and remove it (a cgroup whose killed
        tasks are still exiting after a few seconds is removed later)."""
        for _ in range(250):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                threading.Event().wait(0.02)  # killed tasks take a moment to leave
        _PENDING.append(self.path)


class MemoryCgroup:
    """A memory cgroup (v1) for one worker whose memory a call measures, where
    this process may make one (root): the kernel's accounting of every page
    the worker's tasks charge once it is in (anonymous memory, the shared
    memory and tmpfs pages they write, socket and pipe buffers, the page
    cache they bring in). ``create`` returns None elsewhere: a delegated
    cgroup v2 subtree's process sits in one cgroup only, its pids cgroup, and
    the measured peak is then the resident and stored bytes alone (with the
    calls that would keep memory elsewhere refused by the seccomp filter).

    It does not replace the resident meter: the page cache is charged to the
    cgroup that first read a page, so a memmap of a file the trusted side
    just wrote (cached) reads into the worker without a byte charged here.
    Measured on this project's kernel (6.18, v1): 100 MiB parked in AF_UNIX
    socket queues, or in pipes, grew the cgroup by 104 MiB; reading a cached
    200 MiB file, by 0."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = 0

    @classmethod
    def create(cls) -> MemoryCgroup | None:
        parent = _memory_parent()
        if parent is None:
            return None
        _remove_stale_cgroups(parent)
        path = parent / f"grader-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def join(self, pid: int) -> bool:
        """Move process ``pid`` (every thread of it) in; False if it could not be."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            return False
        return True

    def start(self) -> None:
        """From now on :meth:`growth` counts: its peak is reset to its usage."""
        with contextlib.suppress(OSError):
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        self.base = self._read("memory.usage_in_bytes")

    def growth(self) -> int:
        """The most bytes charged to it since :meth:`start`, beyond what it held then."""
        return max(0, self._read("memory.max_usage_in_bytes") - self.base)

    def _read(self, name: str) -> int:
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        """Remove it once its tasks are gone (their worker is killed first)."""
        PidsCgroup(self.path).close()


@functools.lru_cache(maxsize=1)
def _memory_parent() -> Path | None:
    """The folder of this process's memory cgroup (v1), if it can hold new cgroups."""
    if sys.platform != "linux":
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            if base.is_dir() and os.access(base, os.W_OK) and (base / "memory.max_usage_in_bytes").exists():
                return base
    return None


#: Cgroups whose tasks were still exiting when their worker was closed.
_PENDING: list[Path] = []


def _remove_stale_cgroups(parent: Path) -> None:
    """Empty cgroups left by graders that were killed before removing theirs,
    or by this one when their tasks took long to exit."""
    for path in list(_PENDING):
        with contextlib.suppress(OSError):
            path.rmdir()
            _PENDING.remove(path)
    with contextlib.suppress(OSError):
        for d in parent.glob("grader-*-*"):
            pid = d.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    d.rmdir()  # refused while a task is still in it


@functools.lru_cache(maxsize=1)
def _pids_parent() -> Path | None:
    """The folder of this process's pids cgroup, if it can hold new cgroups."""
    if sys.platform != "linux":
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):  # cgroup v1
            base = Path("/sys/fs/cgroup/pids") / rel.lstrip("/")
            if base.is_dir() and os.access(base, os.W_OK):
                return base
    for line in lines:
        if line.startswith("0::"):  # cgroup v2: the pids controller must be enabled below us
            base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            if "pids" in enabled and os.access(base, os.W_OK):
                return base
    return None

"""Which processes exist, observed from outside through ``/proc`` (Linux).

The MFU check (grader/mfu/check.py) must know that nothing of the submission runs
while the reference is timed. It does not ask the submission's worker (which
the submission may have rewritten): it reads the kernel's process table.
A process is identified by ``(pid, start time)`` so that a recycled pid is
never mistaken for the process it replaced; a zombie (state ``Z``/``X``) has
no threads, no memory and no open files left (its CUDA context is gone), so
it counts as gone.

Without ``/proc`` (macOS) only the direct children the caller started can be
checked (``exists`` falls back to ``os.kill(pid, 0)``), and
:data:`AVAILABLE` says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.memwatch import process_tree

__all__ = ["AVAILABLE", "Proc", "below", "exists", "read", "snapshot"]

PROC = Path("/proc")
AVAILABLE = (PROC / "self" / "stat").is_file()
_GONE = {"Z", "X", "x"}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Proc:
    """One process as the kernel listed it."""

    pid: int
    ppid: int
    sid: int
    state: str  # R running, S sleeping, D disk wait, T stopped, Z zombie, ...
    start: int  # start time in clock ticks since boot: (pid, start) names one process
    cpu: float = 0.0  # CPU seconds: its own (every thread, user + system) and its reaped children's
    rss: int = 0  # resident bytes

    @property
    def live(self) -> bool:
        return self.state not in _GONE


def read(pid: int) -> Proc | None:
    """Process ``pid`` as the kernel lists it now; None if there is none (or no /proc)."""
    if not AVAILABLE:
        return None
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:  # gone between listing and reading, or not ours to read
        return None
    # "pid (comm) state ppid pgrp session ... starttime(22nd)": comm may hold
    # spaces and parentheses, so split after its last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return Proc(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), state=fields[0], start=int(fields[19]),
                cpu=ticks / _TICK, rss=int(fields[21]) * _PAGE)


def snapshot() -> dict[int, Proc]:
    """Every process in this PID namespace, by pid (empty without /proc)."""
    if not AVAILABLE:
        return {}
    out = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            p = read(int(name))
            if p is not None:
                out[p.pid] = p
    return out


def below(root: int) -> list[Proc]:
    """``root`` (while it is listed) and every process below it, as the kernel
    lists them now, walked by the one process-tree walker
    (:func:`tests.memwatch.process_tree`)."""
    return [p for pid in process_tree(root) if (p := read(pid)) is not None]


def exists(proc: Proc) -> bool:
    """Whether ``proc`` (the same pid *and* start time) is still a live process."""
    if not AVAILABLE:
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    now = read(proc.pid)
    return now is not None and now.start == proc.start and now.live

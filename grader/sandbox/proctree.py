"""Which processes exist, observed from outside through ``/proc`` (Linux).

The MFU check (grader/mfu/check.py) must know that nothing of the submission runs
while the reference is timed. It does not ask the submission's worker (which
the submission may have rewritten): it reads the kernel's process table.
A process is identified by ``(pid, start time)`` so that a recycled pid is
never mistaken for the process it replaced. A process lives while any of its
threads does: its main thread may end on its own (the raw ``exit`` system
call) and leave the process listed as a zombie (state ``Z``) while other
threads run on, so a zombie's threads are looked at (:attr:`Proc.leader_exited`),
and its memory and state are read from a live thread. A zombie whose threads
are all gone has no memory and no open files left (its CUDA context is
gone): it counts as gone.

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
    cpu: float = 0.0  # CPU seconds: its own (every thread, user + system, live or not) and its reaped children's
    rss: int = 0  # resident bytes
    live: bool = True  # whether any of its threads runs (see the module docstring)
    runnable: bool = False  # whether one of its threads was running or waiting for a CPU (when its threads were read)
    leader_exited: bool = False  # its main thread ended while other threads run on


def _stat_fields(path: Path) -> list[str] | None:
    """The fields after ``comm`` of a ``stat`` file (None when it cannot be read).
    "pid (comm) state ppid pgrp session ...": comm may hold spaces and
    parentheses, so the fields start after its last ')'."""
    try:
        text = path.read_text()
    except OSError:  # gone between listing and reading, or not ours to read
        return None
    return text[text.rindex(")") + 2 :].split()


def read(pid: int, threads: bool = False) -> Proc | None:
    """Process ``pid`` as the kernel lists it now; None if there is none (or no
    /proc). ``threads``: look at every thread, for :attr:`Proc.runnable` (else
    only the main thread's state says it, and the threads are read only when
    the main thread has ended)."""
    if not AVAILABLE:
        return None
    base = PROC / str(pid)
    fields = _stat_fields(base / "stat")
    if fields is None:
        return None
    state, rss = fields[0], int(fields[21]) * _PAGE
    live, runnable, leader_exited = state not in _GONE, state == "R", False
    if threads or not live:
        try:
            tids = sorted(os.listdir(base / "task"))
        except OSError:
            tids = []
        for tid in tids:
            if tid == str(pid):
                continue
            task = _stat_fields(base / "task" / tid / "stat")
            if task is None or task[0] in _GONE:
                continue
            runnable = runnable or task[0] == "R"
            if not live:  # the main thread is gone: the process lives on in this one
                live, leader_exited, state, rss = True, True, task[0], int(task[21]) * _PAGE
            if not threads and live:
                break
    # utime, stime, cutime, cstime of the whole thread group (threads that ended included)
    ticks = sum(int(f) for f in fields[11:15])
    return Proc(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), state=state, start=int(fields[19]),
                cpu=ticks / _TICK, rss=rss, live=live, runnable=runnable, leader_exited=leader_exited)


#: Scheduling policies that run a thread only when nothing else wants its CPU (linux/sched.h).
_SCHED_BATCH, _SCHED_IDLE = 3, 5


def lowered_priority(pid: int, nice: int) -> str:
    """How a thread of ``pid`` runs below the priority it was started at (its
    ``nice``, as its starter's): a higher nice, a batch or idle policy, or its
    scheduling group's (``/proc/PID/autogroup``) nice raised; "" when none
    does (or there is no /proc). Read from outside: a wait that follows is
    its own doing, never the machine starving it."""
    if not AVAILABLE:
        return ""
    base = PROC / str(pid)
    try:
        tids = os.listdir(base / "task")
    except OSError:
        return ""
    for tid in tids:
        fields = _stat_fields(base / "task" / tid / "stat")
        if fields is None or len(fields) < 39:
            continue
        if int(fields[16]) > nice:
            return f"a thread of it runs at nice {fields[16]}"
        if int(fields[38]) in (_SCHED_BATCH, _SCHED_IDLE):
            return "a thread of it runs under a batch or idle scheduling policy"
    try:
        group = (base / "autogroup").read_text().split()
    except OSError:
        group = []
    if len(group) >= 3 and group[1] == "nice" and int(group[2]) > 0:
        return f"its scheduling group runs at nice {group[2]}"
    return ""


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

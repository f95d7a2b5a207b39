"""What a worker's processes consume, read from outside: CPU time and memory.

The grader's time budgets count the CPU time of the worker's whole process
tree (every thread, user and system time, reaped children included), read by
the trusted side from ``/proc/PID/stat`` (elsewhere through psutil), never
asked of the worker: on a busy machine a process waits for a CPU, which costs
wall time but no CPU time, so a budget in CPU seconds means the same on an idle
laptop and on a grading host running ten jobs per core. A reading also says
whether one of the tree's processes was runnable (running or waiting for a
CPU) and how much memory the tree holds, so that a call stopped by its
wall-clock backstop can be told apart: asleep or blocked (the submission's
doing) or starved of CPU (the machine's).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from grader import proctree

__all__ = ["Meter", "Reading"]

#: How often the tree's membership is looked up again (its processes rarely
#: change: a worker may create none unless its problem allows some).
RESCAN_SECONDS = 1.0


@dataclass(frozen=True)
class Reading:
    """One look at a process tree."""

    cpu: float  # CPU seconds used so far (never below an earlier reading of the same meter)
    rss: int  # resident bytes now, summed over the tree
    runnable: bool  # whether one of its processes was running or waiting for a CPU
    at: float  # time.monotonic() of the reading


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
            self._pids, self._scanned = _tree(self.root), now
        cpu, rss, runnable = _usage(self._pids)
        self.last = Reading(max(cpu, self.last.cpu), rss, runnable, now)
        self.peak_rss = max(self.peak_rss, rss)
        return self.last


def _tree(root: int) -> list[int]:
    if proctree.AVAILABLE:
        return proctree.tree(root)
    import psutil

    try:
        return [root, *(c.pid for c in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return [root]


def _usage(pids: list[int]) -> tuple[float, int, bool]:
    cpu, rss, runnable = 0.0, 0, False
    if proctree.AVAILABLE:
        for pid in pids:
            p = proctree.read(pid)
            if p is not None and p.live:
                cpu, rss, runnable = cpu + p.cpu, rss + p.rss, runnable or p.state == "R"
        return cpu, rss, runnable
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            with proc.oneshot():
                t = proc.cpu_times()
                cpu += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
                rss += proc.memory_info().rss
                runnable = runnable or proc.status() == psutil.STATUS_RUNNING
    return cpu, rss, runnable

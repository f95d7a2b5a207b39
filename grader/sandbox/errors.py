"""Why a call on a worker gave no value: the exceptions the trusted side raises.

When the worker times out, crashes or talks garbage the call raises a
:class:`WorkerError`, a ``BaseException`` on purpose; :class:`NotRun` and
:class:`GraderFault` are no verdict on the submission. Why, and what each
costs a problem: see grader/README.md, "Budgets".

Every wait on a worker is bounded by a :class:`Limit`: the CPU seconds its
process tree may use (read from outside by its :class:`grader.sandbox.meter.Meter`)
and a wall-clock backstop; past either it raises :class:`OutOfTime`, which
says which one ran out and whether the tree was starved of CPU meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["GraderFault", "KilledForMemory", "Limit", "NotRun", "OutOfTime", "ProtocolError", "WorkerCrashed",
           "WorkerError", "WorkerTimeout"]


class WorkerError(BaseException):
    """The worker did not answer with data (not an answer of the submission).

    ``outcome``: what a check this ends gets instead of "failed" ("": failed);
    the grader's plugin reads it of the exceptions a failure holds."""

    outcome: ClassVar[str] = ""


class WorkerTimeout(WorkerError):
    """A call ran past its own limit: it used more CPU time than a call may, or
    waited past the backstop while hardly using the CPU (asleep or blocked)."""

    outcome: ClassVar[str] = "timeout"


class WorkerCrashed(WorkerError):
    """The worker died (exit, signal, rlimit) before answering."""


class ProtocolError(WorkerCrashed):
    """The worker's reply was not a well-formed frame of data."""


class KilledForMemory(WorkerCrashed):
    """The kernel's out-of-memory killer ended the worker (it was SIGKILLed, not
    by the grader, while the machine's OOM-kill count rose). ``peak`` is the
    most memory the grader saw it hold (bytes: resident, and what it stored in
    its sandbox's own tmpfs): :class:`grader.sandbox.remote.RemoteImpl` compares
    it with what a worker is promised."""

    def __init__(self, message: str, peak: int) -> None:
        super().__init__(message)
        self.peak = peak


class NotRun(WorkerError):
    """The check did not run (to its end): its problem's CPU budget was spent,
    or the problem was cut short before it. No verdict on this check."""

    outcome: ClassVar[str] = "not run"


class GraderFault(WorkerError):
    """A fault of the machine or of the grader, not of the submission,
    established from outside the worker: the sandbox could not start, the
    machine starved a worker of CPU or ran out of memory below what a worker
    is promised, the grader could not clean up after the last problem. The
    problem is not graded (and regraded)."""

    outcome: ClassVar[str] = "grader error"


@dataclass
class Limit:
    """How long a wait on a worker may last: until its process tree has used
    ``cpu`` CPU seconds (a reading of its meter), or until ``wall`` (a
    ``time.monotonic()`` backstop). ``polls`` and ``runnable`` count the looks
    taken while waiting and those that found a thread of the tree running or
    waiting for a CPU."""

    cpu: float
    wall: float
    polls: int = 0
    runnable: int = 0
    lowered: str = ""  # how the tree ran below its priority when the wait ended ("": it did not)

    @property
    def starved(self) -> bool:
        """Whether the tree mostly wanted a CPU while it waited (the machine was
        too busy to run it) at the priority it was started at, rather than
        sleeping, blocking or lowering its own priority (its own doing: the
        seccomp filter and Landlock keep a worker from doing it, and where
        they could not, :func:`grader.sandbox.proctree.lowered_priority` reads
        it from outside)."""
        return self.polls >= 4 and self.runnable * 2 >= self.polls and not self.lowered


class OutOfTime(WorkerTimeout):
    """A wait ran past its :class:`Limit`: its CPU (``cpu`` True) or its
    wall-clock backstop; ``limit`` holds what the waits saw."""

    def __init__(self, message: str, *, cpu: bool, limit: Limit) -> None:
        super().__init__(message)
        self.cpu, self.limit = cpu, limit


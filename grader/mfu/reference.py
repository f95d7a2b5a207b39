"""The reference loop, timed in a worker process as the submission's is.

The MFU check scores the submission's speed against the reference's measured
in the same run, so both must run in the same kind of process: a worker
forked from a fork server that imported torch once, with the workers'
environment (one CPU thread, nothing of the trusted process's allocator
settings), its own seccomp filter, answering over the same pipes. Timed
inside the trusted pytest process instead, the reference ran 1.8 times slower
on the CPU than the very same code in a worker (that process maps and unmaps
every block of 256 KiB or more, to fit a small container: grader/groups.py),
which lowered the bar for every submission.

:func:`reference_worker` starts such a worker on a working copy of
``reference/`` (the grader's own code: no submission code ever runs in it, so
it needs no filesystem isolation and runs as the grader, in the rlimits
mode), beside the submission's sandbox and with its limits. Whatever goes
wrong with that worker (a crash, a call past its limit) is the grader's
fault, never the submission's: it raises :class:`GraderFault`.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grader.sandbox.errors import GraderFault, WorkerError
from grader.sandbox.isolation import Sandbox
from grader.sandbox.problemstate import ProblemSpec
from grader.sandbox.remote import RemoteImpl
from grader.sandbox.scratch import remove_tree
from grader.staging.workcopy import make_working_copy
from grader.util import REPO

__all__ = ["ReferenceWorker", "reference_worker"]

#: The problem name the reference's worker serves (its own RemoteImpl's only one).
PROBLEM = "mfu-reference"


class ReferenceWorker:
    """The reference's scenarios, run by its own worker (see the module docstring)."""

    def __init__(self, impl: RemoteImpl) -> None:
        self.impl = impl
        self.name = impl.name

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return self.impl.scenario(fn, *args, **kwargs)
        except WorkerError as e:
            raise GraderFault(f"not graded: the reference's worker failed ({e})") from None


@contextlib.contextmanager
def reference_worker(like: RemoteImpl, *, cpu_budget: float) -> Iterator[ReferenceWorker]:
    """The reference's own worker, started as ``like``'s workers are (their
    limits, CUDA or not) but as the grader's own user; ``cpu_budget``: the
    CPU seconds its calls may use in all. Closed (its processes killed, its
    files removed) on leaving."""
    root = Path(tempfile.mkdtemp(prefix="grader-mfu-reference-"))
    impl: RemoteImpl | None = None
    try:
        work = make_working_copy(REPO / "reference", root / "work")
        (root / "scratch").mkdir()
        sandbox = Sandbox.restored("rlimits", "the reference's own worker (no submission code runs in it)",
                                   limits=like.limits, cuda=like.cuda)
        impl = RemoteImpl("reference", sandbox, work, root / "scratch",
                          [ProblemSpec(PROBLEM, cpu_budget=cpu_budget, files=())])
        impl.enter(PROBLEM)
        yield ReferenceWorker(impl)
    finally:
        if impl is not None:
            impl.close()
        remove_tree(root)

"""What the trusted side knows of one problem's workers.

:class:`ProblemSpec` is what the engine asks a trusted pytest process to run
of a problem; :class:`ProblemState` what happens to its workers, as it
happens (:class:`grader.sandbox.remote.RemoteImpl` keeps one per problem);
:class:`WorkerRecord` what the engine gets of it. :data:`CRASHED` and
:data:`TIMED_OUT` are all a student reads of a hidden run's worker troubles.
:mod:`grader.protocol` carries the spec and the record between processes
(and re-exports them): they are defined here so that the sandbox imports
nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from grader.sandbox.limits import LOG_CAP

if TYPE_CHECKING:  # (a worker's module imports torch: the engine's planning and --help do not need it)
    from grader.sandbox.workerproc import Worker

__all__ = ["CRASHED", "TIMED_OUT", "ProblemSpec", "ProblemState", "WorkerRecord"]

#: What a student reads of a hidden run's worker troubles (the details: the instructors' log).
CRASHED, TIMED_OUT = "the worker crashed", "a call ran past its time limit"


@dataclass(frozen=True)
class ProblemSpec:
    """One problem as a trusted pytest process runs it: its check files (in
    order), the CPU seconds its workers may use for them (``cpu_budget``) and
    what the reference uses for the same checks on this machine
    (``reference_cpu``, reported beside it; both from :mod:`grader.budgets`).
    ``gpu_lock``: it holds the device's lock (grader/mfu/gpulock.py) while it runs.
    ``sealed_optim``: its workers get a sealed torch.optim (the rubric's
    ``sealed_optim``; :mod:`grader.sandbox.remote`)."""

    name: str
    cpu_budget: float
    files: tuple[str, ...]
    reference_cpu: float = 0.0
    gpu_lock: bool = False
    sealed_optim: bool = False


#: How :meth:`WorkerRecord.combine` folds one field over a problem's phases: the
#: ``merge`` of its metadata (:func:`combined`).
SUM, MAX, JOIN, CONCAT, ANY, FIRST = "sum", "max", "join", "concat", "any", "first"
_FOLDS: dict[str, Callable[[list[Any]], Any]] = {
    SUM: sum,
    MAX: max,
    JOIN: lambda values: "; ".join(dict.fromkeys(v for v in values if v)),  # distinct, in order
    CONCAT: lambda values: [x for v in values for x in v],
    ANY: any,
    FIRST: lambda values: next((v for v in values if v), values[0]),  # the first that is set
}


def combined(merge: str, *, revealed: bool = False) -> Mapping[str, str | bool]:
    """A :class:`WorkerRecord` field's metadata: how :meth:`WorkerRecord.combine`
    folds it (``merge``: SUM, MAX, JOIN, CONCAT, ANY or FIRST) and whether
    each problem of the ``--json`` file shows its combined value with
    ``--reveal-hidden`` (``revealed``; never without it: the combined value
    holds the hidden phase's, which the submission's run can steer)."""
    assert merge in _FOLDS, merge
    return {"merge": merge, "revealed": revealed}


@dataclass
class WorkerRecord:
    """What happened to one problem's worker(s) in one trusted pytest process
    (:class:`ProblemState`, observed from the trusted side): calls
    served, crash messages, the calls that ran past their limits, why its
    remaining checks were cut ("" if not), a fault of the machine or the
    grader ("" if none), the CPU seconds its workers used, its budget and the
    reference's, seccomp state, its capped output (instructors only) and how
    many bytes of it were dropped.

    Each field says in its metadata (:func:`combined`) how a problem's phases
    fold into one record (:meth:`combine`) and whether ``--json`` shows it:
    a new field is one line here and one where
    :class:`ProblemState` fills it."""

    calls: int = field(default=0, metadata=combined(SUM))
    crashes: list[str] = field(default_factory=list, metadata=combined(CONCAT))
    timeouts: list[str] = field(default_factory=list, metadata=combined(CONCAT))
    cut: str = field(default="", metadata=combined(JOIN))
    fault: str = field(default="", metadata=combined(JOIN))
    cpu_used: float = field(default=0.0, metadata=combined(SUM))
    cpu_budget: float = field(default=0.0, metadata=combined(SUM))
    reference_cpu: float = field(default=0.0, metadata=combined(SUM))
    seccomp: str = field(default="", metadata=combined(JOIN))  # "on" where every phase's was
    # Each phase's own (the reports keep the public and hidden logs apart): never combined in practice.
    log: str = field(default="", metadata=combined(FIRST))
    log_dropped: int = field(default=0, metadata=combined(FIRST))
    started: bool = field(default=False, metadata=combined(ANY))
    # the most resident memory one of them held beyond its start (instructors)
    peak_bytes: int = field(default=0, metadata=combined(MAX, revealed=True))
    # workers started (each forked fresh), public and hidden (instructors)
    workers: int = field(default=0, metadata=combined(SUM, revealed=True))
    # a module it needs did not import: where and why (grader.imports), "" if all did
    import_error: str = field(default="", metadata=combined(FIRST))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> WorkerRecord:
        """``raw``'s fields (keys it does not know are ignored, missing ones get their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    @classmethod
    def combine(cls, records: Sequence[WorkerRecord]) -> WorkerRecord:
        """One problem's record from its phases' (at least one), each field folded
        as its metadata says; of the records' own class (a subclass's fields too)."""
        if len(records) == 1:
            return records[0]
        kind = type(records[0])
        return kind(**{f.name: _FOLDS[f.metadata["merge"]]([getattr(r, f.name) for r in records])
                       for f in fields(kind)})


@dataclass
class ProblemState(WorkerRecord):
    """What happens to one problem's worker(s), as it happens: the fields of
    its :class:`WorkerRecord` (``cpu_used`` counts its retired
    workers: all of them once the problem is over), its
    :class:`ProblemSpec` and its workers' capped output
    (``output``; the record's ``log`` is filled from it by :meth:`record`).
    ``cut`` says why its remaining checks do not run, ``fault`` what the
    machine or the grader got wrong ("" while all is well).
    """

    spec: ProblemSpec = field(default_factory=lambda: ProblemSpec("", 0.0, ()))
    output: bytearray = field(default_factory=bytearray)
    probed: bool = False  # its modules' import was tried (its first request)

    @classmethod
    def of(cls, spec: ProblemSpec) -> ProblemState:
        return cls(cpu_budget=spec.cpu_budget, reference_cpu=spec.reference_cpu, spec=spec)

    def record(self) -> WorkerRecord:
        """The record the engine gets (every field of a :class:`WorkerRecord`, as it stands)."""
        own = {f.name: getattr(self, f.name) for f in fields(WorkerRecord)}
        return WorkerRecord(**{**own, "crashes": list(self.crashes), "timeouts": list(self.timeouts),
                               "cpu_used": round(self.cpu_used, 4),
                               "log": bytes(self.output).decode("utf-8", "replace")})

    def add_log(self, worker: Worker) -> None:
        room = LOG_CAP - len(self.output)
        self.output += worker.log[: max(room, 0)]
        self.log_dropped += worker.log_dropped + max(len(worker.log) - max(room, 0), 0)

    def note(self, text: str) -> None:
        """The grader's own line in the instructors' log."""
        line = f"\n[grader] {text}\n".encode("utf-8", "replace")
        self.output += line[: max(LOG_CAP - len(self.output), 0)]

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

from dataclasses import dataclass, field, fields
from typing import Any

from grader.sandbox.limits import LOG_CAP
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


@dataclass
class WorkerRecord:
    """What happened to one problem's worker(s) in one trusted pytest process
    (:class:`ProblemState`, observed from the trusted side): calls
    served, crash messages, the calls that ran past their limits, why its
    remaining checks were cut ("" if not), a fault of the machine or the
    grader ("" if none), the CPU seconds its workers used, its budget and the
    reference's, seccomp state, its capped output (instructors only) and how
    many bytes of it were dropped."""

    calls: int = 0
    crashes: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    cut: str = ""
    fault: str = ""
    cpu_used: float = 0.0
    cpu_budget: float = 0.0
    reference_cpu: float = 0.0
    seccomp: str = ""
    log: str = ""
    log_dropped: int = 0
    started: bool = False
    workers: int = 0  # workers started (each forked fresh)
    peak_bytes: int = 0  # the most resident memory one of them held beyond its start
    import_error: str = ""  # a module it needs did not import: where and why (grader.imports), "" if all did

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> WorkerRecord:
        """``raw``'s fields (keys it does not know are ignored, missing ones get their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


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

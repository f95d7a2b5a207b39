"""What grading one submission produces: per rubric item, per problem (its
checks' :class:`grader.protocol.CheckOutcome` among it) and in all, plus an
item's text as the student reads it.

Built by :mod:`grader.scoring`, rendered by :mod:`grader.report` (:mod:`grader.report.render`'s
module docstring states the ``--json`` schema these records are written as).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from grader.protocol import CheckOutcome, Cost, Failure, WorkerRecord
from grader.rubric import function_name

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
NOT_RUN_GPU, NO_CHECKS = "not run on a GPU", "no checks"
#: Statuses whose points are left out of every total (max_score 0, the points in
#: ``not_counted``): never a failed test, in any report.
NOT_COUNTED = (NOT_RUN_GPU, NO_CHECKS)
#: A check (or an item, a problem) that did not run: the problem's CPU budget was
#: spent, or it was cut short, before it. Not a verdict on the submission's answers.
NOT_RUN = "not run"
#: The machine or the grader failed (a worker that could not start, a trusted
#: process killed from outside): the submission is not graded there, never blamed.
GRADER_ERROR = "grader error"
#: What a report says of points left out of every total: a problem (or item) that
#: needs a GPU on a machine without one, or whose check files do not exist yet.
#: Such a record has max_score 0 and its points in ``not_counted``.
NEEDS_GPU = "needs a GPU; not counted"
NO_CHECKS_YET = "no checks yet; not counted"
#: What a student reads for a grader error.
NOT_GRADED = "not graded: a fault of the grading machine or the grader, not of your code; it will be regraded"
#: A problem whose checks have not all run yet: every report written while a
#: grade runs shows it so, and so does the last one of a grade stopped from
#: outside (a platform's time limit). Its points are not counted yet.
UNFINISHED = "not graded yet"
UNFINISHED_TEXT = ("not graded yet: the grade had not finished this problem's checks when this report was written "
                   "(not your code). In a final report, the grader was stopped before them (the platform's time "
                   "limit?): ask your course staff to regrade")

__all__ = [
    "GRADER_ERROR", "NEEDS_GPU", "NOT_COUNTED", "NOT_GRADED", "NOT_RUN", "NO_CHECKS_YET", "UNFINISHED",
    "UNFINISHED_TEXT", "GradeResult",
    "ItemResult", "ProblemResult", "failure_text", "fmt", "item_text", "stub_in", "stub_of",
]


@dataclass
class ItemResult:
    name: str
    score: float
    max_score: float
    status: str  # passed | failed | error | timeout | not run | grader error | not run on a GPU | no checks
    checks: int = 0  # how many of its checks ran
    failed: int = 0  # how many of those did not pass
    not_run: int = 0  # how many did not run (the problem's budget was spent before them)
    failure: Failure | None = None
    note: str = ""  # why it was not credited (a gate, the grader's own trouble)
    not_counted: float = 0.0  # points left out of every total (NOT_COUNTED statuses; max_score is then 0)


#: A :class:`ProblemResult` field in the ``--json`` file only with ``reveal``
#: (what the submission could steer to carry a hidden input out: instructors only).
REVEALED = {"revealed": True}


@dataclass
class ProblemResult:
    """One problem's result. Every field but ``record`` is a key of its object in the
    ``--json`` file, in this order (:func:`grader.report.render.to_json`); a
    field with ``metadata=REVEALED`` only with ``reveal``. Then come the
    fields of ``record`` that their metadata marks for a report
    (:func:`grader.sandbox.problemstate.combined`)."""

    name: str
    section: str
    score: float
    max_score: float
    status: str
    visibility: str
    output: str
    # graded with the CPU standing in for a GPU (--cpu-stand-in: a rehearsal, never a
    # GPU's grade); set by the trusted side, with STAND_IN_NOTE first in ``output``
    stand_in: bool = False
    log: str = ""  # the submission's output in its public checks (instructors)
    time: float = 0.0  # seconds: the sum of its public checks' durations (trusted side)
    cpu: float = 0.0  # CPU seconds its workers used in its public checks (its code and the scenarios driving it)
    cpu_budget: float = 0.0  # the CPU seconds they could use (this machine)
    reference_cpu: float = 0.0  # what the reference uses for the same checks (this machine)
    not_run: int = 0  # checks that did not run
    not_counted: float = 0.0  # points left out of every total (NOT_COUNTED statuses; max_score is then 0)
    checks: list[CheckOutcome] = field(default_factory=list)  # in its files' order
    items: list[ItemResult] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)  # checks no single item holds (they count toward all)
    # The same figures of its hidden checks: instructors only (the submission
    # can steer them to carry a hidden input; reports show them when revealed).
    hidden_log: str = field(default="", metadata=REVEALED)
    hidden_time: float = field(default=0.0, metadata=REVEALED)
    hidden_cpu: float = field(default=0.0, metadata=REVEALED)
    # Its phases' worker records combined (WorkerRecord.combine): not a key itself; the
    # ``--json`` object has each of its fields that the field's metadata marks for a report.
    record: WorkerRecord | None = field(default=None, metadata={"json": False})


@dataclass
class GradeResult:
    submission: str
    score: float = 0.0
    max_score: float = 0.0
    gpu_points_not_run: float = 0.0
    execution_time: float = 0.0  # whole seconds from the grade's start to this report: students see it
    wall_time: float = 0.0  # seconds of the whole grade (instructors)
    sandbox: str = ""
    profile: str = ""
    problems: list[ProblemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    operator_notes: list[str] = field(default_factory=list)  # about the machine, for whoever runs the grader
    operator_warnings: list[str] = field(default_factory=list)  # the same, where the machine may change a result
    error: str = ""
    import_errors: list[str] = field(default_factory=list)  # each module that does not import, and what it costs
    checks: str = ""  # which checks ran: public + hidden, or public only and why
    points_without_checks: float = 0.0
    seed: int = 0  # the hidden checks' seed (instructors only: --seed replays this grade)
    speed: float = 1.0  # how many times slower than the measuring machine this one is (budgets scale with it)
    reveal: bool = False  # whether reports show hidden checks' details (the option, else the rubric's setting)
    costs: list[Cost] = field(default_factory=list)  # each trusted process's CPU (instructors)
    engine_cpu: float = 0.0  # this process's own CPU seconds (its calibration included)
    calibration_cpu: float = 0.0  # the CPU seconds of timing the calibration workload


def fmt(x: float) -> str:
    """A number of points as reports print it (``4``, ``2.5``)."""
    return f"{x:g}"


def failure_text(f: Failure) -> str:
    """A failure as the student reads it (several lines)."""
    if f.hidden and not f.test:  # its details withheld from this submission (grader/feedback.py)
        what = "ran out of time" if f.outcome == TIMEOUT else "failed"
        return f"A hidden check {what}: its details are withheld from this submission."
    if f.hidden:
        head = f"A hidden check {'ran out of time' if f.outcome == TIMEOUT else 'failed'}: {f.test}"
        if f.property_test:
            head += f", which extends the public test {function_name(f.property_test)}"
            head += f" ({f.property})" if f.property else ""
        lines = [head + "."]
        kind = ", ".join(f"{k}={v}" for k, v in f.input_kind.items())
        params = ", ".join(f.parameters) if f.withheld else ""
        if kind or params:
            lines.append("Inputs of the kind: " + "; ".join(x for x in (kind, params) if x) + ".")
        if f.withheld and f.outcome != TIMEOUT:
            lines.append("It runs that property on more or larger inputs than the public tests; the values "
                         "are withheld.")
    else:
        lines = [f"{'Out of time' if f.outcome == TIMEOUT else 'Failed'}: {f.test}"
                 + (f" ({f.property})" if f.property else "")]
    if f.message:
        lines.append(f.message)
    if f.example:
        lines.append(f.example)
    if f.reproduce:
        lines.append(("Explore with the public test: " if f.hidden else "Reproduce: ") + f.reproduce)
    return "\n".join(lines)


#: The message of a check that reached an untouched stub (tests.harness.NotImplementedYet).
_STUB_FAILURE = re.compile(r"NotImplementedYet: ([\w.]+) is not implemented yet: see handout §([\w.]+)")


def stub_of(f: Failure | None) -> tuple[str, str] | None:
    """``(function, section)`` when failure ``f`` is a call reaching an
    untouched stub (no input could have passed: it reads as one line), else None."""
    return stub_in(f.message) if f is not None else None


def stub_in(message: str) -> tuple[str, str] | None:
    """``(function, section)`` when a check's failure ``message`` is a call reaching an untouched stub."""
    found = _STUB_FAILURE.match(message)
    return (found.group(1), found.group(2)) if found else None


def item_text(i: ItemResult) -> str:
    """One item's result as text: its score, then its first failure or why it
    earned nothing; one line when that failure is an untouched stub."""
    if i.status in NOT_COUNTED:
        head = f"[{NEEDS_GPU if i.status == NOT_RUN_GPU else NO_CHECKS_YET}] {i.name} ({fmt(i.not_counted)} points)"
        return "\n".join([head, *(f"  {ln}" for ln in i.note.splitlines())])
    head = f"[{fmt(i.score)}/{fmt(i.max_score)}] {i.name}: {i.status}"
    stub = stub_of(i.failure) if not i.note else None
    if stub is not None:
        what = "not implemented yet" if stub[0] == i.name else f"{stub[0]} is not implemented yet"
        return f"[{fmt(i.score)}/{fmt(i.max_score)}] {i.name}: {what} (handout §{stub[1]})"
    if i.status == PASSED and not i.note:
        return f"{head} ({i.checks} checks)"
    if i.failure is not None:
        head += f" ({i.failed} of {i.checks} checks failed)"
    body = [x for x in (i.note, failure_text(i.failure) if i.failure else "") if x]
    return "\n".join([head, *("  " + ln for x in body for ln in x.splitlines())])

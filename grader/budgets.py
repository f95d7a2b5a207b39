"""Time budgets: how much CPU time a submission may use, relative to the reference.

A problem's budget is the CPU time the reference's workers use for the same
check files (``grader/budgets.toml``, measured by ``python -m grader
calibrate``), times the slowdown the handout promises to accept (rubric
``slowdown``, 5) and a margin of :data:`MARGIN` for noise between machines and
seeds, never below the rubric's ``budget_floor``, and scaled to the machine
that grades: :func:`machine_speed` times a short calibration workload on the
trusted side and compares it with the same workload on the machine the
figures were measured on, so a laptop twice as slow gets twice the seconds
(a faster one keeps the measured figures: a budget never shrinks below them).

CPU time, not wall-clock time, is what is counted (:mod:`grader.sandbox.remote`,
:mod:`grader.sandbox.meter`): a busy machine slows every process down in wall-clock
time but not in CPU time, so a correct solution keeps its marks on a grading
host running several jobs per core. Nothing here decides a verdict on its own:
a budget only bounds how long a submission may run.

This module is the budget policy, whole: the figures (:func:`load`,
:func:`machine_speed`, :func:`problem_budget`), each problem's budget in a
grade (:class:`Budgets`), a worker's RLIMIT_CPU above any budget it may serve
(:meth:`Budgets.cpu_limit`) and its other limits (:func:`limits_for`), and
the wall-clock limit of a trusted pytest process (:func:`hard_limit_of`).
What stays in :mod:`grader.sandbox.remote` (``MIN_WALL``, ``FORK_CPU``, a
call's wall-clock backstop) are per-call backstops, not budget policy. It
sits above :mod:`grader.sandbox` (nothing there imports it) and below
:mod:`grader.groups` and :mod:`grader.engine`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.rubric import Problem, Settings
from grader.sandbox.limits import Limits
from grader.sandbox.problemstate import ProblemSpec
from grader.util import tomllib

__all__ = ["BUDGETS", "MARGIN", "Budgets", "Costs", "FileCost", "hard_limit_of", "limits_for", "load",
           "machine_speed", "problem_budget", "workload"]

BUDGETS = Path(__file__).resolve().parent / "budgets.toml"
#: The budget is this times the promised slowdown times the reference's CPU:
#: room for seeds that draw larger inputs and machines that run some code
#: relatively slower than the calibration workload.
MARGIN = 2.0


@dataclass(frozen=True)
class FileCost:
    """What the reference costs for one check file, on the measuring machine."""

    worker_cpu: float  # CPU seconds of its workers (start-up excluded)
    seconds: float  # wall-clock seconds of the file's checks on the trusted side (an idle machine)


@dataclass(frozen=True)
class Costs:
    """The contents of ``budgets.toml``: per hypothesis profile, each check
    file's :class:`FileCost`, and the calibration workload's CPU seconds on the
    machine that measured them (``workload_seconds``)."""

    workload_seconds: float = 0.0
    machine: str = ""
    profiles: dict[str, dict[str, FileCost]] = field(default_factory=dict)

    def file(self, profile: str, path: str) -> FileCost | None:
        return self.profiles.get(profile, {}).get(path)


def load(path: Path = BUDGETS) -> Costs:
    """Read ``budgets.toml`` (an empty :class:`Costs` when there is none)."""
    if not path.is_file():
        return Costs()
    raw: dict[str, Any] = tomllib.loads(path.read_text())
    machine = raw.get("machine", {})
    profiles = {
        profile: {f: FileCost(float(c["worker_cpu"]), float(c["seconds"])) for f, c in files.items()}
        for profile, files in raw.get("profiles", {}).items()
    }
    return Costs(float(machine.get("workload_seconds", 0.0)), str(machine.get("description", "")), profiles)


def workload() -> float:
    """A fixed piece of Python-level work of the kind grading does (hypothesis
    draws, frame encoding, torch's Python layers: calls, dicts, lists, floats,
    strings); returns a checksum so nothing is optimised away."""
    acc = 0.0
    table: dict[int, float] = {}
    for i in range(60_000):
        key = (i * 2654435761) & 0xFFFF
        table[key] = table.get(key, 0.0) + i * 0.5
        acc += len(str(i)) + (i % 7) * 1.5
    ranked = sorted(table.items(), key=lambda kv: kv[1])
    acc += sum(v for _, v in ranked[:100])
    words = [f"w{i % 97}" for i in range(20_000)]
    return acc + len(" ".join(words).split())


def workload_seconds(repeats: int = 7) -> float:
    """The workload's CPU seconds on this thread, the least of ``repeats`` runs
    (a run interrupted by another process only ever takes longer)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        workload()
        best = min(best, time.thread_time() - start)
    return best


def machine_speed(costs: Costs) -> float:
    """How many times slower than the measuring machine this one runs the
    workload, never below 1 (1 when no figure was recorded)."""
    if costs.workload_seconds <= 0:
        return 1.0
    return max(1.0, workload_seconds() / costs.workload_seconds)


#: The reference CPU seconds assumed for a check file ``budgets.toml`` has no
#: figure for (a new file, before ``grader calibrate`` ran): generous.
UNMEASURED_FILE_CPU = 30.0


def problem_budget(files: list[str] | tuple[str, ...], profile: str, costs: Costs, *, slowdown: float, floor: float,
                   speed: float, fixed: float | None = None) -> tuple[float, float, list[str]]:
    """(CPU budget, the reference's CPU, files without a figure) for the check
    ``files`` of one problem in ``profile``, in CPU seconds on this machine:
    ``max(floor, MARGIN * slowdown * reference) * speed``, or ``fixed * speed``
    where the rubric sets the problem's budget itself."""
    missing = [f for f in files if costs.file(profile, f) is None]
    reference = sum(c.worker_cpu if (c := costs.file(profile, f)) else UNMEASURED_FILE_CPU for f in files)
    budget = fixed if fixed is not None else max(floor, MARGIN * slowdown * reference)
    return budget * speed, reference * speed, missing


@dataclass
class Budgets:
    """How this grade sets a problem's CPU budget on this machine
    (:func:`problem_budget` with the rubric's settings),
    each figure computed once per problem and set of files. ``override``
    (``--cpu-budget``, CPU seconds as given) replaces every problem's budget."""

    profile: str
    costs: Costs
    slowdown: float
    floor: float
    speed: float
    override: float | None = None
    _known: dict[tuple[str, tuple[str, ...]], tuple[float, float, list[str]]] = field(
        default_factory=dict, init=False, repr=False)

    def of(self, p: Problem, files: Sequence[str]) -> tuple[float, float, list[str]]:
        """(the budget the rubric gives ``p``'s ``files``, the reference's CPU,
        the files without a measured cost), ``override`` aside."""
        key = (p.name, tuple(files))
        if key not in self._known:
            self._known[key] = problem_budget(tuple(files), self.profile, self.costs, slowdown=self.slowdown,
                                              floor=self.floor, speed=self.speed, fixed=p.cpu_budget)
        return self._known[key]

    def spec(self, p: Problem, files: Sequence[str]) -> ProblemSpec:
        """What a trusted pytest process runs of ``p``: its ``files`` and their budget."""
        budget, reference, _ = self.of(p, files)
        if self.override is not None:
            budget = self.override
        return ProblemSpec(p.name, round(budget, 3), tuple(files), round(reference, 3), gpu_lock=p.gpu,
                           sealed_optim=p.sealed_optim)

    def cpu_limit(self, selected: Sequence[Problem], check_files: Mapping[str, Sequence[str]],
                  start_cpu: float) -> int:
        """A worker's RLIMIT_CPU (CPU seconds): its own last line, above any
        budget it may serve (the largest of the ``selected`` problems' for all
        their ``check_files``, or ``override``), its start-up (the rubric's
        ``start_cpu``, on this machine) and a minute more."""
        most = max([self.override or 0.0, *(self.of(p, check_files[p.name])[0] for p in selected)])
        return int(most + start_cpu * self.speed + 60)


def limits_for(settings: Settings, *, speed: float, memory_bytes: int, cpu_seconds: int,
               call_cpu: float | None = None) -> Limits:
    """Every worker's limits in a grade on this machine: the rubric's
    ``settings`` (a call's and a start-up's CPU seconds scaled by ``speed``),
    the address space ``memory_bytes``, RLIMIT_CPU ``cpu_seconds``
    (:meth:`Budgets.cpu_limit`); ``call_cpu`` (``--call-cpu``, CPU seconds as
    given) replaces a call's."""
    return Limits(memory_bytes=memory_bytes, cpu_seconds=cpu_seconds,
                  growth_bytes=int(settings.worker_memory_mib * (1 << 20)),
                  call_cpu=float(call_cpu or settings.call_cpu * speed),
                  start_cpu=float(settings.start_cpu * speed), wall_factor=float(settings.wall_factor))


def hard_limit_of(problems: Sequence[ProblemSpec]) -> float:
    """The wall-clock seconds a trusted pytest process running ``problems`` may
    run before the engine stops it: far more than their CPU budgets take on a
    very busy machine (every call within is bounded already; this catches the
    grader's own hang), plus the wait for a GPU another grading holds."""
    limit = 1800 + 4 * sum(p.cpu_budget for p in problems)
    if any(p.gpu_lock for p in problems):  # waiting for another grading's GPU problem is not this run hanging
        from grader.mfu.gpulock import WAIT_SECONDS

        limit += WAIT_SECONDS
    return limit

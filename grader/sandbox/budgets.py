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
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.util import tomllib

__all__ = ["BUDGETS", "MARGIN", "Costs", "FileCost", "load", "machine_speed", "workload"]

BUDGETS = Path(__file__).resolve().parent.parent / "budgets.toml"
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

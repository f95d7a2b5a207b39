"""Planning a grading run: which check files go to which trusted pytest process.

The problems (a heavy one split into its check files) are split into K groups
run concurrently, one trusted pytest process each, with K = min(cores, check
files, memory slots of :func:`grader.sandbox.worker_slots`) or the requested
number. Expected times (the reference's wall-clock seconds per check file in
``grader/budgets.toml``) only balance the groups; they never decide a verdict.
"""

from __future__ import annotations

from grader.budgets import Costs
from grader.rubric import Problem, is_hidden
from grader.sandbox import worker_slots
from grader.util import cores

#: The expected seconds of a check file ``budgets.toml`` has no figure for.
UNMEASURED_FILE_SECONDS = 10.0

#: A problem with the check files it is planned to run (those that exist).
Planned = tuple[Problem, list[str]]

#: What the groups are made of: a problem with some of its check files (all of
#: them, unless the problem alone outweighs a group's fair share).
Unit = tuple[Problem, tuple[str, ...]]


def file_cost(f: str, costs: Costs, profile: str) -> float:
    """The expected seconds of check file ``f`` in ``profile``."""
    c = costs.file(profile, f)
    return c.seconds if c is not None else UNMEASURED_FILE_SECONDS


def units_of(planned: list[Planned], k: int, costs: Costs, profile: str) -> list[Unit]:
    """Whole problems (one worker each), except that a problem heavier than
    1/k of the total is split into its files (a second worker start is cheaper
    than one group waiting on it) when they are all public or all hidden.

    A problem with both is never split (the engine plans public and hidden
    files in separate phases, :func:`grader.groups.by_phase`; this holds for a
    caller that does not): its files in two groups would run at the same time,
    a worker that sees hidden inputs beside one whose answers reach students'
    failure messages."""
    total = sum(file_cost(f, costs, profile) for _, files in planned for f in files)
    out: list[Unit] = []
    for p, files in planned:
        one_kind = len({is_hidden(f) for f in files}) == 1
        if k > 1 and len(files) > 1 and one_kind and sum(file_cost(f, costs, profile) for f in files) > total / k:
            out += [(p, (f,)) for f in files]
        else:
            out.append((p, tuple(files)))
    return out


def parallelism(n_units: int, memory_bytes: int, requested: int | None = None) -> int:
    """K, the groups run at once: ``requested`` (when given) or the cores, never
    more than the check files nor the memory slots (each group has one worker at a
    time under ``memory_bytes``, plus its warm spare)."""
    want = requested if requested and requested > 0 else cores()
    return max(1, min(want, n_units, worker_slots(memory_bytes)))


def partition(units: list[Unit], k: int, costs: Costs, profile: str) -> list[list[Unit]]:
    """``units`` in ``k`` groups of about equal expected time (longest first,
    each to the lightest group). Within a group, the rubric's order is kept."""
    groups: list[list[Unit]] = [[] for _ in range(max(1, k))]
    load = [0.0] * len(groups)

    def cost(u: Unit) -> float:
        return sum(file_cost(f, costs, profile) for f in u[1])

    for u in sorted(units, key=lambda u: -cost(u)):  # stable: ties keep the rubric's order
        i = min(range(len(groups)), key=lambda j: (load[j], j))
        groups[i].append(u)
        load[i] += cost(u)
    order = {(p.name, f): i for i, (p, f) in enumerate(units)}
    return [sorted(g, key=lambda u: order[(u[0].name, u[1])]) for g in groups if g]


def group_plans(group: list[Unit]) -> list[Planned]:
    """One group's problems, each with its files in the group (a problem split
    into several units of the same group gets them back together)."""
    plan: dict[str, Planned] = {}
    for p, fs in group:
        plan.setdefault(p.name, (p, []))[1].extend(fs)
    return list(plan.values())

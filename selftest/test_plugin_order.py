"""The order of a check's steps in the grader's plugin (grader/plugin.py):
the device's lock, its problem's ``start`` event, the check, its ``check``
event, its problem's ``end`` event; the check's clock runs around the check
alone. Driven with fake items, pipe, impl, lock and clock: no pytest run."""

from __future__ import annotations

import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from grader import plugin
from grader.protocol import GroupSpec, ProblemSpec, SandboxSpec, WorkerRecord
from grader.sandbox.limits import Limits

#: Seconds the fake lock makes a check wait (on the fake clock), and a check's own.
WAIT, CHECK = 30.0, 1.0


class Item:
    """As much of a pytest item as the protocol wrapper and its outcome read."""

    def __init__(self, nodeid: str, problem: str) -> None:
        self.nodeid, self.user_properties, self.stash = nodeid, [], pytest.Stash()
        self.stash[plugin.PLACE] = plugin.Place(problem, f"tests/test_{problem}.py", (0, 0))

    def get_closest_marker(self, name: str) -> None:
        return None


def test_a_check_waits_for_the_lock_then_starts_runs_alone_on_the_clock_and_ends(tmp_path, monkeypatch):
    log: list[str] = []
    clock = SimpleNamespace(now=0.0, cpu=0.0)
    monkeypatch.setattr(time, "monotonic", lambda: clock.now)

    class Lock:
        def hold(self, problem: str) -> None:
            log.append("lock")
            clock.now, clock.cpu = clock.now + WAIT, clock.cpu + WAIT  # waiting (and the workers working)

    class Pipe:
        def send(self, event: dict[str, Any]) -> None:
            log.append(event["event"])
            events.append(event)

    events: list[dict[str, Any]] = []
    impl = SimpleNamespace(cpu_used=lambda problem: clock.cpu, finish=lambda problem: None,
                           states=defaultdict(lambda: SimpleNamespace(record=WorkerRecord)))
    problems = (ProblemSpec("a", 60.0, ("tests/test_a.py",)), ProblemSpec("b", 60.0, ("tests/test_b.py",)))
    spec = GroupSpec(name="sub", repo=str(tmp_path), work="", scratch="", profile="dev", problems=problems,
                     sandbox=SandboxSpec("rlimits", "", False, Limits()), results_fd=-1, seed=0)
    grading = plugin.Grading(spec, impl, SimpleNamespace(), Pipe(), Lock(), "")
    items = [Item("a1", "a"), Item("a2", "a"), Item("b1", "b")]
    grading.pytest_collection_finish(SimpleNamespace(items=items))

    steps = []
    for item, nextitem in zip(items, [*items[1:], None], strict=True):
        log.clear()
        hook = grading.pytest_runtest_protocol(item, nextitem)
        next(hook)
        log.append("body")
        grading.outcome_of(item)  # (as the check's first report does)
        clock.now, clock.cpu = clock.now + CHECK, clock.cpu + CHECK / 2
        with pytest.raises(StopIteration):
            hook.send(None)
        steps.append(list(log))

    assert steps == [["lock", "start", "body", "check"],  # a's first check: start, no end
                     ["lock", "body", "check", "end"],  # a's last: end, no second start
                     ["lock", "start", "body", "check", "end"]], "a check's steps are out of order"
    assert [e["checks"] for e in events if e["event"] == "start"] == [2, 1]
    for item in items:
        outcome = item.stash[plugin.OUTCOME_KEY]
        assert outcome.duration == CHECK, "the check's duration includes the wait for the device's lock"
        assert outcome.cpu == CHECK / 2, "the check's CPU includes what the workers used during the lock's wait"

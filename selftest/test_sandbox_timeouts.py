"""CPU time, limits and budgets of a worker's calls: CPU counted from outside
(start-up free), a call past its CPU limit is a timeout and a fresh worker
serves the next, a spent problem budget leaves its checks not run, the
wall-clock backstop stops a sleeper, and what is the machine's fault (a
sandbox that cannot start, a worker starved of CPU) is a grader fault.

The hostile module and the fixtures are in selftest/sandboxing.py."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from grader.sandbox.errors import GraderFault, NotRun, WorkerTimeout
from selftest.sandboxing import (
    make_impl,
    work_fixture,  # noqa: F401 (the fixture work)
)


def test_cpu_time_is_counted_from_outside_and_start_up_is_free(work):
    """What a problem's calls used, read from /proc: half a CPU second per burn
    (start-up, importing torch, is not counted)."""
    impl = make_impl(work)
    try:
        assert impl.precision.bytes_per_element("ok") == 4
        assert impl.cpu_used() < 0.3
        for _ in range(3):
            assert impl.precision.bytes_per_element("burn") == 5
        assert 1.5 <= impl.cpu_used() < 2.2
    finally:
        impl.close()
    assert 1.5 <= impl.states["precision"].cpu_used < 2.2


def test_a_call_past_its_cpu_limit_is_a_timeout_and_the_next_call_runs(work):
    """A hang costs its own check: a fresh worker serves the next call; a
    second timeout cuts the problem (the rest is "not run")."""
    impl = make_impl(work, call_cpu=2.0)
    try:
        t = time.monotonic()
        with pytest.raises(WorkerTimeout, match="more than 2 CPU s"):
            impl.precision.bytes_per_element("hang")
        assert time.monotonic() - t < 30
        assert not any(w.alive() for w in impl._workers.values())
        assert impl.precision.bytes_per_element("ok") == 4
        with pytest.raises(WorkerTimeout):
            impl.precision.bytes_per_element("hang")
        with pytest.raises(NotRun, match="2 calls ran past their limits"):
            impl.precision.bytes_per_element("ok")
    finally:
        impl.close()
    assert len(impl.states["precision"].timeouts) == 2


def test_a_spent_budget_cuts_the_problem_and_its_checks_are_not_run(work):
    impl = make_impl(work, cpu_budget=1.2, call_cpu=60.0)
    try:
        assert impl.precision.bytes_per_element("burn") == 5
        assert impl.precision.bytes_per_element("burn") == 5
        with pytest.raises(NotRun, match=r"CPU budget of 1\.2 s ran out"):
            impl.precision.bytes_per_element("burn")  # runs out during this call
        with pytest.raises(NotRun):
            impl.precision.bytes_per_element("ok")
        assert not issubclass(NotRun, Exception)
    finally:
        impl.close()
    assert 1.1 < impl.states["precision"].cpu_used < 1.6


def test_a_call_that_sleeps_is_stopped_by_the_wall_clock_backstop(work):
    impl = make_impl(work, call_cpu=1.0, wall_factor=2.0, min_wall=2.0)
    try:
        t = time.monotonic()
        with pytest.raises(WorkerTimeout, match="waited 2 s while hardly using the CPU"):
            impl.precision.bytes_per_element("sleep")
        assert time.monotonic() - t < 30
    finally:
        impl.close()


def test_a_worker_that_cannot_start_is_a_grader_fault(work, monkeypatch):
    """Nothing of the submission runs before the worker's hello: a sandbox that
    fails to start it (bubblewrap gone: exit 127) is the machine's fault."""
    impl = make_impl(work)
    real = impl._sandbox.command

    def missing_sandbox(*args, **kwargs):
        argv, env, cwd = real(*args, **kwargs)
        return ["/nonexistent-bwrap-binary", *argv[1:]], env, cwd

    monkeypatch.setattr(impl._sandbox, "command", missing_sandbox)
    try:
        with pytest.raises(GraderFault, match="could not start") as e:
            impl.precision.bytes_per_element("ok")
        assert "did the submission" not in str(e.value)
        with pytest.raises(GraderFault):  # the problem is not graded any further
            impl.precision.bytes_per_element("ok")
    finally:
        impl.close()
    assert impl.states["precision"].fault and not impl.states["precision"].crashes


@pytest.mark.skipif(__import__("sys").platform != "linux", reason="renices the worker through /proc")
def test_a_worker_starved_of_cpu_is_a_grader_fault_not_a_timeout(work):
    """A call stopped by its wall-clock backstop while the worker wanted a CPU
    and got none (here: reniced to 19 on a machine running 3 busy processes per
    core) was starved by the machine: a grader fault, not the submission's."""
    import contextlib
    import os

    from selftest.load import busy_machine
    from tests.memwatch import process_tree

    impl = make_impl(work, call_cpu=30.0)
    try:
        assert impl.precision.bytes_per_element("ok") == 4
        # Tight backstops only once the worker is up: its start-up (importing torch) on a busy CI machine is not
        # what this test is about.
        impl.limits, impl.min_wall = replace(impl.limits, wall_factor=0.05), 1.5
        worker = impl._workers["precision"]
        for pid in process_tree(worker.pid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)
            # With autogroup scheduling a session's weight is its group's nice (the worker leads its own session).
            with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as f:
                f.write("19")
        with busy_machine(per_core=3, seconds=120), pytest.raises(GraderFault, match="too busy"):
            for _ in range(20):  # a burn needs 0.5 CPU s: starved, it cannot get it within 1.5 s
                impl.precision.bytes_per_element("burn")
    finally:
        impl.close()
    assert not impl.states["precision"].timeouts

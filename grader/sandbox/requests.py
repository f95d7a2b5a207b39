"""What one call of a :class:`grader.sandbox.remote.RemoteImpl` does.

Each function serves the ``RemoteImpl`` it is given (its methods, moved
here to keep the lifecycle and the calls apart): :func:`request` sends one
request to the current problem's worker within the call's CPU limit and
wall-clock backstop, and turns what comes back (a reply, a timeout, a crash,
garbage) into a value or the exception the check sees, keeping count in the
problem's :class:`grader.sandbox.problemstate.ProblemState`; before a
problem's first call it tries its imports (:func:`probe_imports`). What a
student reads of a hidden run's troubles is fixed wording (see
:mod:`grader.sandbox.remote`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grader.imports import NOT_IMPORTED, import_failure, problem_modules
from grader.sandbox.errors import (
    GraderFault,
    KilledForMemory,
    Limit,
    NotRun,
    OutOfTime,
    ProtocolError,
    WorkerCrashed,
    WorkerTimeout,
)
from grader.sandbox.meter import StorageWatch
from grader.sandbox.problemstate import CRASHED, TIMED_OUT, ProblemState
from grader.sandbox.workerproc import decode_reply
from tests import wire
from tests.harness import Interrupted, stubs_fail_fast
from tests.memwatch import MemoryWatch

if TYPE_CHECKING:
    from grader.sandbox.remote import RemoteImpl

__all__ = ["budget_spent", "crashed", "cut", "describe", "garbage", "probe_imports", "refuse", "request", "unpack",
           "wall"]


def refuse(impl: RemoteImpl, st: ProblemState) -> None:
    """Raise what a call of a problem that cannot run any more raises."""
    assert impl.problem is not None
    if impl._scratch_error:
        st.fault = st.fault or impl._scratch_error
    if st.fault:
        raise GraderFault(f"{impl.problem}: not graded: {st.fault}")
    if st.cut:
        raise NotRun(f"{impl.problem}: {st.cut}; this check did not run")


def probe_imports(impl: RemoteImpl, st: ProblemState) -> None:
    """Before a problem's first check: import the modules it needs in a
    worker, then retire that worker (so a check that wants a process that
    has run nothing of the submission still gets one). A module that does
    not import cuts the problem: its checks do not run, and
    ``st.import_error`` says where and why (the submission's own words,
    one bounded line; in a hidden run, fixed words). A timeout or a crash
    while importing is that check's, as in any call. What the worker says
    can only cost the submission points, never earn them."""
    assert impl.problem is not None
    st.probed = True
    for module in problem_modules(impl.problem):
        try:
            request(impl, {"op": "import", "module": module})
        except Exception as e:  # (WorkerError is no Exception: a timeout or crash is the check's)
            st.import_error = (f"student/{module}.py did not import in the run of the hidden checks"
                               if impl.hidden else import_failure(module, e))
            impl._retire(impl.problem)
            raise cut(impl, st, f"{NOT_IMPORTED} ({st.import_error})") from None
    impl._retire(impl.problem)


def cut(impl: RemoteImpl, st: ProblemState, why: str) -> NotRun:
    """Cut the problem short (the first reason stays); what its calls raise from now on."""
    st.cut = st.cut or why
    return NotRun(f"{impl.problem}: {st.cut}; this check did not run")


def budget_spent(impl: RemoteImpl, st: ProblemState) -> NotRun:
    """Cut the problem short: its CPU budget ran out."""
    return cut(impl, st, f"the problem's CPU budget of {st.cpu_budget:.4g} s ran out")


def wall(impl: RemoteImpl, cpu: float) -> float:
    """The wall-clock backstop of a wait whose CPU limit is ``cpu`` seconds."""
    return max(impl.min_wall, impl.limits.wall_factor * cpu)


def request(impl: RemoteImpl, req: dict[str, Any], *, kill_when: Callable[[], bool] | None = None,
            measure: bool = False) -> Any:
    """Send ``req`` to the current problem's worker and return its value: with
    ``kill_when``, an :class:`tests.harness.Interrupted`; with ``measure``, the
    value and the most bytes the call held. Raises what the check sees when
    there is no value (:mod:`grader.sandbox.errors`), counting it in the
    problem's state."""
    if impl.problem is None:
        raise RuntimeError("RemoteImpl: no problem selected (the grader plugin calls enter())")
    st = impl.states[impl.problem]
    refuse(impl, st)
    if st.cpu_budget - impl.cpu_used(max_age=0.5) <= 0:
        raise budget_spent(impl, st)
    if not st.probed:
        probe_imports(impl, st)
    payload = wire.encode(req)  # the test's own arguments: a WireError here is a test bug
    st.calls += 1
    worker = impl._worker()
    left = st.cpu_budget - impl.cpu_used(max_age=0.5)
    cpu = min(impl.limits.call_cpu, left)
    limit = Limit(cpu=worker.meter.last.cpu + cpu, wall=time.monotonic() + wall(impl, cpu))
    try:
        watch = MemoryWatch(worker.pid) if measure else None
        # What the call stores in files (tmpfs pages, scratch blocks) is held as surely as its memory.
        stored = StorageWatch(worker.pid, impl._scratch, impl._sandbox.mode == "bwrap",
                              owner=impl._sandbox.uid if impl._sandbox.mode == "uid" else None) if measure else None
        if watch is not None and stored is not None:
            worker.measure_memory()  # (the kernel's accounting too, where a memory cgroup can be made)
            watch.start()
            stored.start()
        worker.check(limit, "no reply in time")  # (one left running by its last call's doing is ended here)
        worker.write_frame(payload, limit)
        if kill_when is not None:
            polls = 0
            while not worker.readable(0.001):
                if kill_when():  # the test saw its moment: kill, as a crash would
                    worker.kill_tree()
                    impl._retire(impl.problem)
                    return Interrupted(True)
                polls += 1
                if polls % 50 == 0:
                    worker.check(limit, "no reply in time")
        try:
            reply = decode_reply(worker.read_frame(limit), worker)
        finally:
            # What it holds in its memory and files, or what the kernel charged it: the most of the two.
            peak = max(watch.stop() + stored.stop(), worker.kernel_memory()) \
                if watch is not None and stored is not None else 0
    except OutOfTime as e:
        impl._retire(impl.problem)
        if e.cpu and cpu < impl.limits.call_cpu:  # the problem's budget ran out, not the call's own limit
            raise budget_spent(impl, st) from None
        if not e.cpu and e.limit.starved:
            st.note(f"{describe(req)} waited {wall(impl, cpu):.0f} s for a CPU")
            st.fault = st.fault or "the machine was too busy: a call waited too long for a CPU"
            raise GraderFault(f"{impl.problem}: not graded: {st.fault}") from None
        what = (f"a call used more than {cpu:.4g} CPU s" if e.cpu else
                f"a call waited {wall(impl, cpu):.0f} s below the priority it was started at (it lowered "
                "its own)" if e.limit.lowered else
                f"a call waited {wall(impl, cpu):.0f} s while hardly using the CPU (asleep or blocked)")
        st.note(f"timeout: {what} ({describe(req)})")
        shown = TIMED_OUT if impl.hidden else f"{what} ({describe(req)})"
        st.timeouts.append(shown)
        if len(st.timeouts) >= impl.max_timeouts:
            st.cut = st.cut or f"{len(st.timeouts)} calls ran past their limits"
        raise WorkerTimeout(f"{impl.problem}: {shown}") from None
    except WorkerCrashed as e:
        impl._retire(impl.problem)
        st.note(f"crash: {describe(req)}: {e}")
        if isinstance(e, KilledForMemory):
            # Its private memory is capped (RLIMIT_DATA) at what a worker is
            # promised: the kernel killing it for memory is the machine's shortage.
            st.fault = st.fault or ("the machine ran out of memory while a worker held no more than the "
                                    f"{impl._sandbox.limits.growth_bytes >> 20} MiB it is promised")
            raise GraderFault(f"{impl.problem}: not graded: {st.fault}") from None
        # (the grader's own reasons for killing it, the scratch folder's caps, are fixed words)
        shown = CRASHED if impl.hidden and not worker.killed_for else f"{describe(req)}: {e}"
        crashed(impl, st, shown)
        raise type(e)(f"{impl.problem}: {shown}") from None
    value = unpack(impl, reply, req)
    if kill_when is not None:
        return Interrupted(False, value)
    return (value, peak) if measure else value


def crashed(impl: RemoteImpl, st: ProblemState, what: str) -> None:
    """Count a crash (``what``: as a student may read it); ``max_crashes`` of them cut the problem."""
    st.crashes.append(what)
    if len(st.crashes) >= impl.max_crashes:
        st.cut = st.cut or (f"the worker crashed {len(st.crashes)} times" +
                            ("" if impl.hidden else f" (last: {st.crashes[-1][:300]})"))


def garbage(impl: RemoteImpl, req: dict[str, Any], what: str) -> ProtocolError:
    """A reply to ``req`` that is no well-formed reply: retire the worker, count a crash."""
    assert impl.problem is not None
    impl._retire(impl.problem)
    st = impl.states[impl.problem]
    st.note(f"{describe(req)}: {what}")
    shown = CRASHED if impl.hidden else f"{describe(req)}: {what}"
    crashed(impl, st, shown)
    return ProtocolError(f"{impl.problem}: {shown}")


def unpack(impl: RemoteImpl, reply: Any, req: dict[str, Any]) -> Any:
    """The value of a decoded reply, or the exception the worker named (:func:`tests.wire.reply_value`)."""
    try:
        with stubs_fail_fast():  # an untouched stub fails its check at once, as in a student's pytest
            return wire.reply_value(reply)
    except wire.MalformedReply as e:
        raise garbage(impl, req, str(e)) from None


def describe(req: dict[str, Any]) -> str:
    """``req`` in a few words, for the instructors' log and the public checks' messages."""
    if req.get("op") == "scenario":
        return f"scenario {req.get('name')}"
    if req.get("op") == "prepare":
        return "readying a worker for a measured call"
    if req.get("op") == "import":
        return f"import {req.get('module')}"
    return f"{req.get('module')}.{req.get('function')}"

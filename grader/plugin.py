"""The grader's pytest plugin, loaded with ``-p grader.plugin`` in the trusted
pytest process that :mod:`grader.engine` starts.

It does nothing unless ``GRADER_PLAN`` names a plan file (JSON written by the
engine). Then it:

* puts a :class:`grader.remote.RemoteImpl` into ``config.stash[IMPL_KEY]``
  before tests/plugin.py would build a LocalImpl, so the very same public tests
  and hidden checks run against the sandboxed worker;
* runs the tests problem by problem (the rubric's order), telling the
  RemoteImpl which problem each test belongs to;
* skips ``gpu``-marked tests where CUDA is unavailable ("not run on a GPU");
* records every test's outcome, failure details and duration (setup + call +
  teardown, on this trusted process's monotonic clock: nothing the worker
  reports about time is used), and for hidden checks the public test their
  ``extends`` marker names and the kind of input they declared with
  ``input_kind`` (read here, on the trusted side: the submission's worker
  never sees the test items), and at the end writes them
  with each problem's worker record (timeouts, crashes, capped log) as JSON to
  the inherited file descriptor ``results_fd`` (a pipe to the engine: there is
  no results file a submission could find and forge).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.plugin import IMPL_KEY

PLAN_ENV = "GRADER_PLAN"
_STATE: dict[str, Any] = {}


def _plan() -> dict[str, Any] | None:
    path = os.environ.get(PLAN_ENV)
    return json.loads(Path(path).read_text()) if path else None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    plan = _plan()
    if plan is None:
        return
    from grader.remote import RemoteImpl
    from grader.sandbox import Limits, Sandbox, ScratchWatch

    sb = plan["sandbox"]
    sandbox = Sandbox(limits=Limits(**sb["limits"]), gpu=sb["gpu"], want=sb["mode"])
    worker_config = json.dumps({"rlimits": sandbox.limits.rlimits(sandbox.gpu), "cuda": sandbox.gpu,
                                "preimport": plan.get("preimport", [])})
    impl = RemoteImpl(
        plan["name"], sandbox, Path(plan["work"]), Path(plan["scratch"]),
        problems={p["name"]: p["time_limit"] for p in plan["problems"]},
        call_timeout=plan["call_timeout"], start_timeout=plan["start_timeout"], config=worker_config,
        processes={p["name"]: int(p.get("processes", 0)) for p in plan["problems"]},
    )
    config.stash[IMPL_KEY] = impl
    watch = ScratchWatch(Path(plan["scratch"]), sandbox.limits, impl.stop_workers).start()
    _limit_own_memory(int(sb["limits"].get("trusted_memory_bytes", 0)), gpu=bool(sb["gpu"]))
    files: dict[str, tuple[str, int, int]] = {}
    for i, p in enumerate(plan["problems"]):
        for j, f in enumerate(p["files"]):
            files[str((Path(plan["repo"]) / f).resolve())] = (p["name"], i, j)
    _STATE.update(start=time.monotonic(), plan=plan, impl=impl, files=files, watch=watch, tests={}, cuda=_cuda(),
                  pfiles={p["name"]: p["files"] for p in plan["problems"]})


def pytest_sessionstart(session: pytest.Session) -> None:
    """Grading is reproducible: derandomized public examples (hidden checks
    draw from the run's recorded seed, see :func:`hidden_seed`), no example
    database (a regrade gives the same verdict, whatever was graded before),
    and fast on failures (no shrinking)."""
    if not _STATE:
        return
    from hypothesis import Phase, settings

    base = settings.get_profile(_STATE["plan"]["profile"])
    # No shrinking: a failing check reports the first falsifying example at
    # once (students shrink it with the reproduction line); shrinking every
    # failure of a half-done submission would cost minutes per problem.
    settings.register_profile("grader", parent=base, derandomize=True, database=None,
                              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
    settings.load_profile("grader")


def _limit_own_memory(limit: int, gpu: bool) -> None:
    """Cap this trusted process's data (private writable memory: the heap and
    every anonymous mapping, not mere address-space reservations, which grow
    with the number of CPUs). Soft limit only: the workers it starts inherit
    it and lift it first thing. Whatever a reply makes the checks allocate then
    ends this run with an error, not the machine. Not with CUDA."""
    if not limit or gpu:
        return
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, AttributeError, ValueError, OSError):  # not enforceable here: nothing to cap with
        pass


def hidden_seed(run_seed: int, nodeid: str) -> int:
    """The seed of one hidden check's hypothesis draws: the run's seed (recorded
    in the instructors' JSON; ``--seed`` replays it) mixed with the check's id,
    so each check draws its own inputs and no two runs draw the same ones."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{run_seed}:{nodeid}".encode()).digest()[:8], "big")


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _is_hidden(file: str) -> bool:
    from grader.rubric import is_hidden

    return is_hidden(file)


def _where(item: pytest.Item) -> tuple[str, int, int]:
    return _STATE["files"].get(str(Path(str(item.fspath)).resolve()), ("", 10**6, 0))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _STATE:
        items.sort(key=lambda it: _where(it)[1:])  # stable: file order kept within a problem


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _STATE:
        return
    problem, _, index = _where(item)
    _STATE["impl"].enter(problem)
    if problem and _is_hidden(_STATE["pfiles"][problem][index]) and hasattr(item, "obj") \
            and hasattr(item.obj, "hypothesis"):
        # Hidden checks draw fresh inputs each run (a leak is not replayable);
        # public tests stay derandomized (students reproduce their failures).
        from hypothesis import seed

        seed(hidden_seed(int(_STATE["plan"].get("seed", 0)), item.nodeid))(item.obj)
    if item.get_closest_marker("gpu") is not None and not _STATE["cuda"]:
        pytest.skip("needs a CUDA device: not run on a GPU")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Hold a GPU problem's device lock (:func:`_hold_gpu_lock`), then time each
    test on the trusted side (worker start-up included where the test is the
    first of its problem: that is where the time goes)."""
    if not _STATE:
        return (yield)
    _hold_gpu_lock(item)
    start = time.monotonic()
    try:
        return (yield)
    finally:
        entry = _STATE.get("tests", {}).get(getattr(item, "nodeid", ""))
        if entry is not None:
            entry["duration"] = round(time.monotonic() - start, 4)


def _exception_names(exc: BaseException | None, seen: set[int]) -> list[str]:
    if exc is None or id(exc) in seen:
        return []
    seen.add(id(exc))
    names = [type(exc).__name__]
    remote = getattr(exc, "remote_type", "")
    if remote:
        names.append(f"remote:{remote}")
    for sub in getattr(exc, "exceptions", ()) or ():
        names += _exception_names(sub, seen)
    return names + _exception_names(exc.__cause__, seen) + _exception_names(exc.__context__, seen)


def _describe(exc: BaseException) -> tuple[str, str]:
    """(message, falsifying example) of a failure."""
    message = f"{type(exc).__name__}: {exc}"
    notes = [str(n) for n in getattr(exc, "__notes__", []) or []]
    for sub in getattr(exc, "exceptions", ()) or ():  # hypothesis groups distinct failures
        notes += [str(n) for n in getattr(sub, "__notes__", []) or []]
    example = "\n".join(n for n in notes if n.startswith(("Falsifying", "Draw", "You can reproduce")))
    return message[:4000], example[:4000]


def _extends(item: pytest.Item) -> str:
    """The public test a hidden check names with ``@pytest.mark.extends(...)`` ("" if none)."""
    marker = item.get_closest_marker("extends")
    value = marker.args[0] if marker is not None and marker.args else ""
    return value if isinstance(value, str) else ""


def _input_kind(item: pytest.Item) -> dict[str, str]:
    """The facts a hidden check recorded with ``input_kind(...)`` (the last call wins)."""
    kinds = [v for k, v in item.user_properties if k == "input_kind" and isinstance(v, dict)]
    return {str(k): str(v) for k, v in kinds[-1].items()} if kinds else {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if not _STATE:
        return report
    problem, _, index = _where(item)
    entry = _STATE["tests"].setdefault(item.nodeid, {
        "problem": problem, "file": _STATE["pfiles"][problem][index] if problem else item.nodeid,
        "outcome": "passed", "exceptions": [], "message": "", "example": "",
        "gpu": item.get_closest_marker("gpu") is not None, "duration": 0.0, "extends": _extends(item),
        "input_kind": {},
    })
    entry["input_kind"] = _input_kind(item) or entry["input_kind"]
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
    if (report.failed or report.skipped) and not entry["message"]:
        if call.excinfo is not None and report.failed:
            entry["exceptions"] = _exception_names(call.excinfo.value, set())
            entry["message"], entry["example"] = _describe(call.excinfo.value)
        else:
            longrepr = report.longrepr
            entry["message"] = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))[-2000:]
    return report


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _STATE and report.failed:
        _STATE["tests"][f"<collect>{report.nodeid}"] = {
            "problem": "", "file": report.nodeid, "outcome": "collect-error", "exceptions": [],
            "message": str(report.longrepr)[-3000:], "example": "", "gpu": False}


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _STATE:
        return
    impl = _STATE["impl"]
    _STATE["watch"].stop()
    impl.close()
    problems = {
        name: {"calls": st.calls, "crashes": st.crashes, "timeout": st.timeout, "seccomp": st.seccomp,
               "log": bytes(st.log).decode("utf-8", "replace"), "log_dropped": st.log_dropped,
               "started": bool(st.started)}
        for name, st in impl.states.items()
    }
    watch = _STATE["watch"]
    data = json.dumps({"tests": _STATE["tests"], "problems": problems, "cuda": _STATE["cuda"],
                       "scratch": {"peak_bytes": watch.peak_bytes, "peak_entries": watch.peak_entries},
                       "session_time": round(time.monotonic() - _STATE["start"], 4)}).encode()
    fd = int(_STATE["plan"]["results_fd"])
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)


# ------------------------------------------------------------------ one GPU problem per device (grader/gpulock.py)
def _hold_gpu_lock(item: pytest.Item) -> None:
    """Hold the device's lock from the first check of a GPU problem to its last.

    Called from the runtest-protocol wrapper, outside setup (where
    RemoteImpl.enter starts the problem's clock) and outside pytest-timeout's
    per-test timer, so waiting for another grading's GPU problem costs this
    problem none of its time.
    """
    if _STATE and _STATE["cuda"]:
        problem = _where(item)[0]
        held = _STATE.get("gpu_lock")
        if held is not None and held[0] != problem:
            _release_gpu_lock()
        if problem in _STATE["plan"].get("gpu_problems", []) and _STATE.get("gpu_lock") is None \
                and problem not in _STATE.setdefault("gpu_busy", {}):
            _acquire_gpu_lock(problem)


def _acquire_gpu_lock(problem: str) -> None:
    import contextlib

    from grader import gpulock

    stack = contextlib.ExitStack()
    key = _device_key()
    try:
        stack.enter_context(gpulock.device_lock(key, timeout=gpulock.WAIT_SECONDS))
    except gpulock.DeviceBusy as e:
        _STATE["gpu_busy"][problem] = str(e)
        return
    _STATE["gpu_lock"] = (problem, stack)


def _device_key() -> str:
    import torch

    from grader import gpulock

    return gpulock.device_key(torch.cuda.current_device())


def _release_gpu_lock() -> None:
    held = _STATE.pop("gpu_lock", None)
    if held is not None:
        held[1].close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    busy = _STATE.get("gpu_busy", {}).get(_where(item)[0]) if _STATE else None
    if busy:
        pytest.fail(f"not graded: {busy}", pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STATE:
        _release_gpu_lock()  # (the kernel would drop it at exit anyway)

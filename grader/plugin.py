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
* records every test's outcome and failure details, and for hidden checks the
  public test their ``extends`` marker names and the kind of input they declared
  with ``input_kind`` (read here, on the trusted side: the submission's worker
  never sees the test items), and at the end writes them
  with each problem's worker record (timeouts, crashes, capped log) as JSON to
  the inherited file descriptor ``results_fd`` (a pipe to the engine: there is
  no results file a submission could find and forge).
"""

from __future__ import annotations

import json
import os
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
    from grader.sandbox import Limits, Sandbox

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
    files: dict[str, tuple[str, int, int]] = {}
    for i, p in enumerate(plan["problems"]):
        for j, f in enumerate(p["files"]):
            files[str((Path(plan["repo"]) / f).resolve())] = (p["name"], i, j)
    _STATE.update(plan=plan, impl=impl, files=files, tests={}, cuda=_cuda(),
                  pfiles={p["name"]: p["files"] for p in plan["problems"]})


def pytest_sessionstart(session: pytest.Session) -> None:
    """Grading is reproducible: derandomized examples, no example database
    (a regrade gives the same verdict, whatever was graded before), and fast
    on failures (no shrinking)."""
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


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


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
    problem = _where(item)[0]
    _STATE["impl"].enter(problem)
    if item.get_closest_marker("gpu") is not None and not _STATE["cuda"]:
        pytest.skip("needs a CUDA device: not run on a GPU")


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
        "gpu": item.get_closest_marker("gpu") is not None, "extends": _extends(item), "input_kind": {},
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
    impl.close()
    problems = {
        name: {"calls": st.calls, "crashes": st.crashes, "timeout": st.timeout, "seccomp": st.seccomp,
               "log": bytes(st.log).decode("utf-8", "replace"), "log_dropped": st.log_dropped,
               "started": bool(st.started)}
        for name, st in impl.states.items()
    }
    data = json.dumps({"tests": _STATE["tests"], "problems": problems, "cuda": _STATE["cuda"]}).encode()
    fd = int(_STATE["plan"]["results_fd"])
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)

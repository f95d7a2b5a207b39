"""A pytest plugin recording, per test, its outcome and the exception types raised.

Used by the honesty check: ``pytest -p selftest.outcomes --outcomes FILE``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_RESULTS: dict[str, dict[str, Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--outcomes", default=None, help="write per-test outcomes as JSON here")


def _exception_types(exc: BaseException | None, seen: set[int] | None = None) -> list[str]:
    """Names of ``exc``, its causes/contexts and group members."""
    seen = seen if seen is not None else set()
    if exc is None or id(exc) in seen:
        return []
    seen.add(id(exc))
    names = [type(exc).__name__]
    for sub in getattr(exc, "exceptions", ()) or ():
        names += _exception_types(sub, seen)
    names += _exception_types(exc.__cause__, seen) + _exception_types(exc.__context__, seen)
    return names


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    entry = _RESULTS.setdefault(item.nodeid, {"outcome": "passed", "exceptions": [], "messages": [],
                                              "markers": sorted(m.name for m in item.iter_markers())})
    if report.failed or report.skipped:
        if entry["outcome"] == "passed" or report.failed:
            entry["outcome"] = "failed" if report.failed else "skipped"
        if call.excinfo is not None:
            entry["exceptions"] += _exception_types(call.excinfo.value)
            entry["messages"].append(str(call.excinfo.value)[:300])
        entry["when"] = report.when
    return report


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _RESULTS[f"<collect>{report.nodeid}"] = {"outcome": "collect-error", "exceptions": [],
                                                 "messages": [str(report.longrepr)[-2000:]], "markers": []}


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--outcomes")
    if path and not hasattr(session.config, "workerinput"):
        Path(path).write_text(json.dumps(_RESULTS, indent=1))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:  # xdist controller: merge workers
    _RESULTS.update(node.workeroutput.get("outcomes", {}))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["outcomes"] = _RESULTS

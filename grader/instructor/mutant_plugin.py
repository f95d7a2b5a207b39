"""pytest plugin for ``python -m grader mutants`` (loaded with ``-p``, driven by environment variables).

Baseline run, ``GRADER_MUTANTS_TRACE=<module file>`` and ``GRADER_MUTANTS_BASELINE=<json>``:
records, with coverage.py, which public test executes which line of the
module, and how long each test takes; written as
``{"lines": {line: [node ids]}, "seconds": {node id: s}}``.

Mutant run, ``GRADER_MUTANTS_SELECT=<json list of node ids>``: runs only those
tests, in that order (the cheapest test that executes the mutated line first).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

_TRACE = os.environ.get("GRADER_MUTANTS_TRACE")
_BASELINE = os.environ.get("GRADER_MUTANTS_BASELINE")
_SELECT = os.environ.get("GRADER_MUTANTS_SELECT")
_state: dict[str, Any] = {"seconds": {}}


def pytest_configure(config: pytest.Config) -> None:
    if _TRACE and _BASELINE:
        import coverage

        cov = coverage.Coverage(data_file=None, include=[_TRACE], config_file=False)
        cov.start()
        _state["cov"] = cov


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _SELECT:
        return
    with open(_SELECT) as f:
        order = {nodeid: i for i, nodeid in enumerate(json.load(f))}
    chosen = sorted((it for it in items if it.nodeid in order), key=lambda it: order[it.nodeid])
    config.hook.pytest_deselected(items=[it for it in items if it.nodeid not in order])
    items[:] = chosen


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cov = _state.get("cov")
    if cov is None:
        return (yield)
    # Lines run while importing the module land in the first test's context; the
    # driver never narrows mutants of module-level lines (it runs the whole file).
    cov.switch_context(item.nodeid)
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        _state["seconds"][item.nodeid] = time.perf_counter() - start
        cov.switch_context("")


def pytest_unconfigure(config: pytest.Config) -> None:
    cov = _state.pop("cov", None)
    if cov is None or not _BASELINE:
        return
    cov.stop()
    data = cov.get_data()
    lines: dict[int, set[str]] = {}
    for path in data.measured_files():
        for line, contexts in data.contexts_by_lineno(path).items():
            lines.setdefault(line, set()).update(c for c in contexts if c)
    with open(_BASELINE, "w") as f:
        json.dump({"lines": {str(k): sorted(v) for k, v in lines.items()}, "seconds": _state["seconds"]}, f)

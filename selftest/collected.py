"""A pytest plugin writing, per collected test, what the rubric needs to map it
to an item: ``pytest --collect-only -p selftest.collected --collected FILE``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--collected", default=None, help="write the collected tests as JSON here")


def pytest_collection_finish(session: pytest.Session) -> None:
    path = session.config.getoption("--collected")
    if not path:
        return
    out = {}
    for item in session.items:
        marker = item.get_closest_marker("extends")
        out[item.nodeid] = {"extends": marker.args[0] if marker is not None and marker.args else "",
                            "gpu": item.get_closest_marker("gpu") is not None,
                            "feedback_only": item.get_closest_marker("feedback_only") is not None}
    Path(path).write_text(json.dumps(out, indent=1))

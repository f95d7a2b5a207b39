"""Run one rubric item's checks on wrong-corpus entries, all in one process.

``python -m grader check`` uses it (in a child process, so the check itself
imports no torch) to learn whether the bug of each entry it names loses an item
the entries were never checked against (a new function's). The question is
``selftest/test_wrong_corpus.py``'s, asked of one item's checks only: the
item's public tests and the hidden checks extending them, selected by the
rubric as the grader selects them, in the ``detect`` hypothesis profile, each
entry stopping at its first failing check. One process imports torch once;
each entry is one pytest run of the item's checks.

Input (JSON on stdin): a list of ``{"problem": P, "item": I, "entries": [names]}``.
Output (JSON on stdout): for each, ``{entry: [node ids of the failing checks]}``
(an empty list: the entry keeps the item; null: pytest could not say). Run it with the repository to probe as
the working directory: the entries are built from its ``reference/``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from grader.corpus import build_wrong, wrong_submissions
from grader.rubric import load


class _OneItem:
    """A pytest plugin: keep only the checks counting toward ``item``; record the failures."""

    def __init__(self, problem: str, item: str) -> None:
        self.problem = load().problem(problem)
        self.item = item
        self.failed: list[str] = []

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for it in items:
            extends = it.get_closest_marker("extends")
            target = str(extends.args[0]) if extends is not None and extends.args else ""
            mine = it.get_closest_marker("feedback_only") is None and any(
                i.name == self.item for i in self.problem.items_of(it.nodeid, target))
            (keep if mine else drop).append(it)
        items[:] = keep
        config.hook.pytest_deselected(items=drop)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def probe(problem: str, item: str, entries: list[str]) -> dict[str, list[str] | None]:
    """Each entry's failing checks of ``item`` (see the module docstring); None
    where pytest could not say (the checks did not collect, or none was selected)."""
    subs = {s.name: s for s in wrong_submissions()}
    files = list(load().problem(problem).files)
    out: dict[str, list[str] | None] = {}
    with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
        for name in entries:
            folder = build_wrong(subs[name], Path(tmp))
            plugin = _OneItem(problem, item)
            # pytest's own output would interleave with the JSON answer.
            with contextlib.redirect_stdout(io.StringIO()):
                code = pytest.main([*files, f"--impl={folder}", "-x", "-q", "-p", "no:cacheprovider", "-p",
                                    "no:xdist", "--hypothesis-profile", "detect"], plugins=[plugin])
            # Anything but "passed" or "failed" (a collection error, no check selected) answers nothing.
            out[name] = plugin.failed if code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else None
    return out


def main() -> int:
    jobs: list[dict[str, Any]] = json.load(sys.stdin)
    answers = [probe(job["problem"], job["item"], list(job["entries"])) for job in jobs]
    json.dump(answers, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

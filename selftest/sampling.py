"""Which corpus entries the project's CI runs.

Every entry of the corpora (wrong, correct, the MFU stand-in widths) costs a
pytest or grader subprocess of up to a minute; all of them together take well
over an hour on CI's two cores. ``./lab test`` (and so CI) runs a fixed sample:
the first entry of every problem and every ``every``-th entry after it, in
name order, so each problem and each kind of bug is represented and a run is
reproducible. ``LAB_FULL_CORPUS=1 ./lab test`` runs every entry (instructors:
before a release, or after changing the reference or the tests).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

FULL = os.environ.get("LAB_FULL_CORPUS", "") == "1"


def sample(entries: Sequence[T], every: int, problem: Callable[[T], str]) -> list[T]:
    """``entries`` (all of them under ``LAB_FULL_CORPUS=1``), else the first of
    each problem and every ``every``-th one."""
    if FULL:
        return list(entries)
    seen: set[str] = set()
    out = []
    for i, e in enumerate(entries):
        if problem(e) not in seen or i % every == 0:
            out.append(e)
        seen.add(problem(e))
    return out

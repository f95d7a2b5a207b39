"""Readers of the similarity report's CSVs, shared by the selftests of
grader/instructor/similarity/ (test_similarity*.py)."""

from __future__ import annotations

import csv
import io
from pathlib import Path


def _pairs(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "pairs.csv").read_text())))


def _row(out: Path, a: str, b: str, module: str = "views") -> dict[str, str]:
    for row in _pairs(out):
        if row["module"] == module and {row["submission_a"], row["submission_b"]} == {a, b}:
            return row
    return {"score": "0", "flagged": "0", "raw_similarity": "0"}  # no shared code at all


def _score(out: Path, a: str, b: str, module: str = "views") -> float:
    return float(_row(out, a, b, module)["score"])


def _flagged(out: Path, a: str, b: str, module: str = "views") -> bool:
    return _row(out, a, b, module)["flagged"] == "1"


def _submissions(out: Path) -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in csv.DictReader(io.StringIO((out / "similarity.csv").read_text()))}

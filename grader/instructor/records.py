"""A submission's record: what happened to it, as written to ``results/<id>.json``.

Contract: a record is a JSON object with ``batch_version`` (:data:`RECORD_VERSION`),
``id``, ``source``, ``submitters``, ``status`` (one of :data:`STATUSES`),
``reason``, ``score``, ``max_score``, ``grader_args``, ``wall_time`` and
``result`` (the grader's ``--json`` output, only when "graded"). A record that
is not complete under :func:`record_complete` is treated as missing, so the
submission is graded again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.instructor.discovery import Submission

__all__ = ["RECORD_VERSION", "STATUSES", "error_record", "load_record", "load_records", "new_record",
           "record_complete", "valid_result"]

RECORD_VERSION = 1

#: What can happen to a submission. Only "graded" carries the grader's JSON.
#: "rejected": it holds what staging never follows (a symbolic link, a device, a FIFO).
STATUSES = ("graded", "timeout", "grader error", "bad zip", "no student/", "rejected")


def new_record(sub: Submission, grader_args: list[str]) -> dict[str, Any]:
    """The record of ``sub`` before anything happened to it (status still empty)."""
    return {
        "batch_version": RECORD_VERSION, "id": sub.id, "source": str(sub.path),
        "submitters": sub.submitters, "status": "", "reason": "", "score": 0.0, "max_score": None,
        "grader_args": grader_args, "grader_exit": None, "wall_time": 0.0, "result": None,
    }


def error_record(sub: Submission, grader_args: list[str], error: Exception) -> dict[str, Any]:
    """The record of a submission the batch itself failed on (a bug costs one row, not the batch)."""
    return {"batch_version": RECORD_VERSION, "id": sub.id, "source": str(sub.path),
            "submitters": sub.submitters, "status": "grader error",
            "reason": f"batch could not run the grader: {type(error).__name__}: {error}",
            "score": 0.0, "max_score": None, "grader_args": grader_args, "result": None}


def valid_result(obj: Any) -> str:
    """Empty when ``obj`` looks like the grader's --json output, else what is wrong."""
    if not isinstance(obj, dict):
        return "the grader's JSON is not an object"
    for key in ("score", "max_score"):
        if not isinstance(obj.get(key), (int, float)) or isinstance(obj.get(key), bool):
            return f"the grader's JSON has no numeric {key!r}"
    if not isinstance(obj.get("problems"), list):
        return "the grader's JSON has no 'problems' list"
    return ""


def record_complete(obj: Any, sub_id: str | None = None) -> bool:
    """Whether ``obj`` is a complete record (of ``sub_id``, when given)."""
    return (isinstance(obj, dict) and obj.get("batch_version") == RECORD_VERSION
            and obj.get("status") in STATUSES and (sub_id is None or obj.get("id") == sub_id)
            and (obj["status"] != "graded" or not valid_result(obj.get("result"))))


def load_record(path: Path, sub_id: str | None = None) -> dict[str, Any] | None:
    """The record in ``path`` if it is complete, else None (then it is regraded)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if record_complete(obj, sub_id) else None


def load_records(out: Path) -> dict[str, dict[str, Any]]:
    """Every complete record in ``out/results``, by id."""
    records = {}
    for p in sorted((out / "results").glob("*.json")):
        rec = load_record(p)
        if rec is not None:
            records[rec["id"]] = rec
    return records

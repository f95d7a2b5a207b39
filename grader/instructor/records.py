"""A submission's record: what happened to it, as written to ``results/<id>.json``.

Contract: a record is a JSON object with ``batch_version`` (:data:`RECORD_VERSION`),
``id``, ``source``, ``content`` (:func:`content_hash` of the entry when it was
graded), ``submitters``, ``status`` (one of :data:`STATUSES`), ``reason``,
``score``, ``max_score``, ``grader_args``, ``wall_time``, ``attempts`` (how
many times this content was graded) and ``result`` (the grader's ``--json``
output: when "graded", and for "grader error" and "timeout" what the grader
finished). A record that is not complete
under :func:`record_complete` is treated as missing, so the submission is
graded again; so is one whose ``content`` is not the entry's now (a
resubmission under the same name).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from grader.instructor.discovery import Submission
from grader.results import NO_CHECKS

__all__ = [
    "NOT_COUNTED_STATUSES", "NOT_GRADED_STATUSES", "RECORD_VERSION", "STATUSES", "combine_records", "content_hash",
    "error_record", "load_record", "load_records", "new_record", "record_complete", "stand_in", "valid_result",
]

RECORD_VERSION = 1

#: What can happen to a submission. Only "graded" carries the grader's JSON.
#: "rejected": it holds what staging never follows (a symbolic link, a device, a FIFO).
STATUSES = ("graded", "timeout", "grader error", "bad zip", "no student/", "rejected")
#: A problem's statuses in a result that are no verdict on it: the record is then "grader error".
NOT_GRADED_STATUSES = ("grader error", "not graded yet")
#: A problem's statuses whose points are left out of every total (grader.results.NOT_COUNTED):
#: the gradebook shows them as not run, never as 0.
NOT_COUNTED_STATUSES = ("not run on a GPU", "no checks")
#: A problem's status when it needs a GPU the grading machine lacked.
NOT_RUN_GPU = "not run on a GPU"


#: Folders of an entry that hold nothing the grader reads (version control, caches).
UNHASHED_FOLDERS = frozenset({".git", ".hg", ".svn", "__pycache__"})


def content_hash(path: Path) -> str:
    """A SHA-256 of what the entry ``path`` holds: a file's bytes, or a folder's
    tree (every entry's relative path and kind, a regular file's bytes, a link's
    target, never followed), ``.git``-like folders and ``__pycache__`` left out.
    Whatever cannot be read hashes as its error, so a later read differs."""
    digest = hashlib.sha256()

    def add_file(file: Path) -> None:
        try:
            with open(file, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
        except OSError as e:
            digest.update(f"unreadable: {e.strerror}".encode())

    try:
        st = path.lstat()
    except OSError as e:
        return f"unreadable: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        digest.update(b"file\0")
        add_file(path)
        return digest.hexdigest()
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in UNHASHED_FOLDERS)
        rel = Path(root).relative_to(path)
        for name in sorted(names + [d for d in dirs if (Path(root) / d).is_symlink()]):
            entry = Path(root) / name
            digest.update(f"\0{(rel / name).as_posix()}\0".encode())
            try:
                mode = entry.lstat().st_mode
            except OSError as e:
                digest.update(f"gone: {e.strerror}".encode())
                continue
            if stat.S_ISLNK(mode):
                digest.update(b"link\0" + os.fsencode(os.readlink(entry)))
            elif stat.S_ISREG(mode):
                digest.update(b"file\0")
                add_file(entry)
            else:
                digest.update(f"special {stat.S_IFMT(mode)}".encode())
        digest.update(f"\0dir {rel.as_posix()}".encode())
    return digest.hexdigest()


def new_record(sub: Submission, grader_args: list[str]) -> dict[str, Any]:
    """The record of ``sub`` before anything happened to it (status still empty),
    with the hash of its content now (before it is staged and graded)."""
    return {
        "batch_version": RECORD_VERSION, "id": sub.id, "source": str(sub.path), "content": content_hash(sub.path),
        "submitters": sub.submitters, "status": "", "reason": "", "score": 0.0, "max_score": None,
        "grader_args": grader_args, "grader_exit": None, "wall_time": 0.0, "result": None,
    }


def error_record(sub: Submission, grader_args: list[str], error: Exception) -> dict[str, Any]:
    """The record of a submission the batch itself failed on (a bug costs one row, not the batch)."""
    return {"batch_version": RECORD_VERSION, "id": sub.id, "source": str(sub.path),
            "content": content_hash(sub.path), "submitters": sub.submitters, "status": "grader error",
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


def stand_in(problem: dict[str, Any]) -> bool:
    """Whether a problem of a result was graded with the CPU standing in for a
    GPU (``--cpu-stand-in``: a rehearsal, never a GPU's grade): its
    ``stand_in`` field, which the grader's trusted side sets. A record written
    before results had that field (batch reruns read old records) says so only
    by :data:`grader.scoring.STAND_IN_NOTE` first in the problem's output,
    which the trusted side writes there and nowhere else: that is read instead."""
    if "stand_in" in problem:
        return problem["stand_in"] is True
    from grader.scoring import STAND_IN_NOTE

    return str(problem.get("output", "")).startswith(STAND_IN_NOTE)


def _rank(problem: dict[str, Any]) -> int:
    """How much a problem's result says, for a merge: a verdict on a GPU (or on
    a problem that needs none) 3, a verdict of the CPU standing in for a GPU 2,
    no verdict (a grader error, not graded yet) 1, not run (no GPU, no checks) 0."""
    if problem.get("status") in NOT_COUNTED_STATUSES:
        return 0
    if problem.get("status") in NOT_GRADED_STATUSES:
        return 1
    return 2 if stand_in(problem) else 3


def _outcome(problem: dict[str, Any]) -> tuple[Any, ...]:
    """What two gradings of a problem must agree on: its status and points, per item
    (not its seconds or its text, which differ between any two runs)."""
    return (problem.get("status"), problem.get("score"), problem.get("max_score"),
            [(i.get("name"), i.get("status"), i.get("score")) for i in problem.get("items", [])])


def _not_counted(problems: list[dict[str, Any]], status: str) -> float:
    """The points of ``status`` (not counted) in ``problems``: whole problems' and items'."""
    return sum(p.get("not_counted", 0.0) for p in problems if p.get("status") == status) + sum(
        i.get("not_counted", 0.0) for p in problems if p.get("status") != status
        for i in p.get("items", []) if i.get("status") == status)


def combine_records(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One record from two gradings of the same content that split its
    problems: typically a CPU batch (the GPU problem "not run on a GPU", or not
    graded at all) and a GPU batch of that problem alone (``--problems mfu``).

    Each problem takes the result of the grading that says most about it
    (:func:`_rank`: a GPU's verdict over the CPU standing in for one, over no
    verdict, over not run); score, max_score, ``gpu_points_not_run`` and
    ``points_without_checks`` are summed again from the problems kept. The
    record is "graded" when both were; else it keeps the status and reason of
    the first that was not (a rerun of that batch regrades it). Neither has a
    result (a bad zip, no ``student/``): the first record.

    ValueError (its message says why) where they do not combine: another
    content (resubmitted between the two batches), a problem graded in both
    with different results (status or points, in all or per item), or no
    result in either and another status or reason in each."""
    if a.get("content") != b.get("content"):
        raise ValueError("graded from different contents (resubmitted between the batches?)")
    base = next((r for r in (a, b) if r["status"] != "graded"), a)
    merged = {**base, "wall_time": a.get("wall_time", 0.0) + b.get("wall_time", 0.0),
              "grader_args": [*a.get("grader_args", []), "+", *b.get("grader_args", [])]}
    results = [r["result"] for r in (a, b) if isinstance(r.get("result"), dict)]
    if not results:
        if (a["status"], a.get("reason")) != (b["status"], b.get("reason")):
            raise ValueError(f"no result in either, and two accounts of why ({a['status']}: {a.get('reason')}; "
                             f"{b['status']}: {b.get('reason')})")
        return merged
    problems: dict[str, dict[str, Any]] = {}
    for p in (p for r in results for p in r.get("problems", [])):
        have = problems.get(p.get("name"))
        if have is None or _rank(p) > _rank(have):
            problems[p.get("name")] = p
        elif _rank(p) == _rank(have) >= 2 and _outcome(p) != _outcome(have):
            raise ValueError(f"problem {p.get('name')!r} was graded in both with different results "
                             f"({have.get('status')} {have.get('score')} and {p.get('status')} {p.get('score')})")
    chosen = list(problems.values())
    score = sum(p.get("score", 0.0) for p in chosen)
    max_score = sum(p.get("max_score", 0.0) for p in chosen)
    notes = list(dict.fromkeys(n for r in results for n in r.get("notes", [])))
    merged["result"] = {**results[0], "problems": chosen, "score": score, "max_score": max_score, "notes": notes,
                        "gpu_points_not_run": _not_counted(chosen, NOT_RUN_GPU),
                        "points_without_checks": _not_counted(chosen, NO_CHECKS)}
    merged.update(score=score, max_score=max_score)
    return merged

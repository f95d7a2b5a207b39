"""Grading one submission of a batch: its own grader process, under a supervisor.

Contract: :func:`grade_submission` never raises for anything the submission or
its grader does; it returns the submission's record (see :mod:`.records`) with
one of the statuses. The grader is ``python -m grader SUB --json FILE ...`` (or
``$LAB_GRADER_CMD``), run in its own process group under
:mod:`grader.instructor.supervisor`, so that a timeout, or the batch's death,
kills it with every process it started. Its stdout and stderr reach the record
only as printable text (the tail of stderr; the reason's last line).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.imports import NOT_IMPORTED
from grader.instructor.discovery import Submission
from grader.instructor.precheck import precheck
from grader.instructor.records import NOT_COUNTED_STATUSES, NOT_GRADED_STATUSES, new_record, valid_result
from grader.results import stub_in
from grader.util import REPO, printable

__all__ = ["GRADER_ENV", "grade_submission", "graded_reason", "grader_command"]

#: A shell-quoted command replacing ``python -m grader`` (the project's tests use a fake grader).
GRADER_ENV = "LAB_GRADER_CMD"
SUPERVISOR = "grader.instructor.supervisor"


def grader_command() -> list[str]:
    """``python -m grader --no-progress``, or the command in ``$LAB_GRADER_CMD`` (tests)."""
    custom = os.environ.get(GRADER_ENV, "").strip()
    # Batch shows its own progress; the grader's per-problem lines would only fill stderr_tail.
    return shlex.split(custom) if custom else [sys.executable, "-m", "grader", "--no-progress"]


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def graded_reason(result: dict[str, Any]) -> str:
    """A graded row's why, in a few words: the modules that do not import (with
    what they cost), then the other problems not passed by what happened to
    them ("not started" when each lost item met an untouched stub), or "full
    marks" when nothing was lost."""
    broken = [x for x in result.get("import_errors") or [] if isinstance(x, str)]
    lost: dict[str, list[str]] = {}
    for p in result.get("problems") or []:
        if not isinstance(p, dict) or p.get("status") in ("passed", *NOT_COUNTED_STATUSES) \
                or str(p.get("output", "")).startswith(NOT_IMPORTED):
            continue
        items = [i for i in p.get("items") or [] if isinstance(i, dict) and i.get("score", 0) < i.get("points", 0)]
        stubs = p.get("status") == "failed" and not p.get("score") and items and all(
            stub_in(str((i.get("failure") or {}).get("message", ""))) for i in items)
        lost.setdefault("not started" if stubs else str(p.get("status")), []).append(str(p.get("name")))
    parts = ([f"does not import: {'; '.join(broken)}"] if broken else []) + [
        f"{why}: {', '.join(names)}" for why, names in lost.items()]
    return "; ".join(parts) or "full marks"


def grade_submission(sub: Submission, out: Path, grader_args: Sequence[str], timeout: float,
                     machine_args: Sequence[str] = (), attempt: int = 1) -> dict[str, Any]:
    """Grade one submission and return its record (not yet written).

    ``out``: the batch's output folder (staged copies go to ``out/staged/<id>``,
    the grader's JSON to ``out/tmp``, removed afterwards); ``timeout``: wall-clock
    seconds before the grader's process group is killed (the points it had
    finished stay in the record: the grader writes its JSON as it goes);
    ``machine_args``: options the batch set for this machine (not recorded);
    ``attempt``: how many times this content has been graded, this time included.
    A result with a problem not graded (a grader error, or one the grade did
    not reach) is the record's status "grader error": no verdict, regraded by
    a rerun up to the batch's bound."""
    start = time.monotonic()
    record = new_record(sub, list(grader_args))
    record["attempts"] = attempt
    target, status, reason = precheck(sub.path, out / "staged" / sub.id)
    if target is None:
        record.update(status=status, reason=reason)
        return record
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    json_path = tmp / f"{sub.id}.{uuid.uuid4().hex[:8]}.json"
    cmd = [*grader_command(), str(target), "--json", str(json_path), *grader_args, *machine_args]
    # -E -s: neither PYTHON* variables nor the user's site change how the supervisor
    # starts (cwd=REPO puts this package on its path); the grader gets the environment.
    proc = subprocess.Popen(
        [sys.executable, "-E", "-s", "-m", SUPERVISOR, str(os.getpid()), *cmd],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        start_new_session=True, cwd=REPO,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
        record.update(status="timeout", reason=f"grading took longer than {timeout:g} s of wall-clock time and was "
                                               "killed (the grader bounds the submission's checks by CPU time: "
                                               "a busy machine? a rerun of the batch regrades it)")
    record["wall_time"] = round(time.monotonic() - start, 3)
    err = stderr.decode(errors="replace")
    record["grader_exit"] = proc.returncode
    record["stderr_tail"] = printable(_tail(err))
    if record["status"] == "timeout":
        with contextlib.suppress(OSError, ValueError):  # what it finished before it was stopped
            partial = json.loads(json_path.read_text())
            if not valid_result(partial):
                record.update(score=float(partial["score"]), max_score=float(partial["max_score"]), result=partial)
        json_path.unlink(missing_ok=True)
        return record
    result, problem = None, ""
    try:
        result = json.loads(json_path.read_text())
        problem = valid_result(result)
    except FileNotFoundError:
        problem = "the grader wrote no JSON"
    except (ValueError, OSError) as e:
        problem = f"the grader's JSON is unreadable: {e}"
    finally:
        json_path.unlink(missing_ok=True)
    if proc.returncode != 0 or problem or not isinstance(result, dict):  # no problem: a dict
        why = printable(_last_line(err) or _last_line(stdout.decode(errors="replace")) or problem)
        record.update(status="grader error", reason=f"grader exit code {proc.returncode}: {why}"[:500])
        return record
    record.update(status="graded", score=float(result["score"]), max_score=float(result["max_score"]),
                  result=result)
    record["reason"] = printable(graded_reason(result))[:500]
    ungraded = [p.get("name", "?") for p in result["problems"]
                if isinstance(p, dict) and p.get("status") in NOT_GRADED_STATUSES]
    if ungraded:  # no verdict on those: the rows says so, and a rerun tries again (bounded)
        record.update(status="grader error", reason=f"{', '.join(map(str, ungraded))} could not be graded here (the "
                                                    "machine's or the grader's fault; a rerun of the batch regrades)")
    return record

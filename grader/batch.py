"""Batch grading of a class: ``python -m grader batch SUBMISSIONS_DIR --jobs N --out DIR``.

Contract (instructors rely on each point):

* A submission is a folder or a ``.zip`` directly inside ``SUBMISSIONS_DIR`` (a
  Gradescope export: one folder per submission plus ``submission_metadata.yml``;
  a GitHub Classroom export: one folder per student repo). ``SUBMISSIONS_DIR`` may
  itself be the export's ``.zip``.
* Each submission is graded by its own ``python -m grader SUB --json FILE``
  subprocess (so a grader crash on one never takes down the batch), at most
  ``--jobs`` at a time, sharing one budget of worker slots (min(cores, memory
  slots)): ``--jobs`` is capped by it and each grader gets ``--parallel
  slots // jobs``, so jobs x problems at once never exceeds it. Each runs under
  a wall-clock ``--timeout`` after which its whole process group is killed.
* Every submission gets ``DIR/results/<id>.json`` (written atomically) and one row of
  ``DIR/gradebook.csv`` (rewritten atomically after every submission), whatever
  happened to it: graded, timeout, grader error, bad zip, no ``student/``; the row
  says why.
* A rerun resumes: a submission whose results file exists and is complete is not
  graded again (``--force`` regrades). Killing the batch (even SIGKILL) loses at
  most the submissions in flight, never a row already written; the graders it had
  started die with it.
* ``DIR/summary.md`` and ``DIR/summary.png``: per-problem pass rates and the score
  distribution of the class (also printed as a table).
* ``--similarity``: also ``DIR/similarity/`` (pairs of submissions ranked by shared
  code per module; :mod:`grader.similarity`), from the same staged copies.
* Classes larger than one machine: ``--shard i/N`` grades a deterministic shard
  (0-based ``i``), ``--slurm N`` writes a Slurm array job grading shard ``i`` per
  array task, and ``--merge DIR... --out DIR`` builds one gradebook from the shards.

``LAB_GRADER_CMD`` (environment; a shell-quoted command) replaces
``python -m grader`` for every submission; the project's tests use it to
substitute a fake grader.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.sandbox import MAX_BYTES, plan_jobs, printable, remove_tree
from tests.harness import HANDOUT_MODULES

__all__ = [
    "STATUSES",
    "Submission",
    "discover",
    "grade_submission",
    "load_records",
    "main",
    "parse_gradescope_metadata",
    "shard_index",
    "write_json_atomic",
]

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "templates"
GRADER_ENV = "LAB_GRADER_CMD"
RECORD_VERSION = 1

#: What can happen to a submission. Only "graded" carries the grader's JSON.
#: "rejected": it holds what staging never follows (a symbolic link, a device, a FIFO).
STATUSES = ("graded", "timeout", "grader error", "bad zip", "no student/", "rejected")

#: Entries of an export that are never submissions.
_IGNORED = {"__MACOSX", "submission_metadata.yml", "submission_metadata.yaml"}


# --------------------------------------------------------------------------- files


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so that readers only ever see the old
    file or the complete new one (temporary file in the same folder, fsync, rename)."""
    _write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ discovery


@dataclass
class Submission:
    """One submission: ``id`` names its results file and gradebook row."""

    id: str
    path: Path
    submitters: list[dict[str, str]] = field(default_factory=list)


def _safe_id(name: str) -> str:
    stem = name[:-4] if name.lower().endswith(".zip") else name
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem).strip("._") or "submission"


def _record_id(name: str) -> str:
    """The id of the entry ``name``: its name (without ``.zip``) when that is
    already a safe file name, else the safe form plus a hash of the original,
    so that two different names ("a b", "a_b") never share a record."""
    stem = name[:-4] if name.lower().endswith(".zip") else name
    safe = _safe_id(name)
    return safe if safe == stem else f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _kind(path: Path) -> str:
    """"dir", "file", "link" or "other" (device, FIFO, socket), never following a link."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "other"
    return ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
            else "link" if stat.S_ISLNK(mode) else "other")


def parse_gradescope_metadata(text: str) -> dict[str, list[dict[str, str]]]:
    """Submitters per submission folder from Gradescope's ``submission_metadata.yml``.

    The export is YAML written by Ruby (``submission_123:`` at the top level, then
    ``:submitters:`` holding ``- :name: ...``, ``:sid:``, ``:email:``). The project
    has no YAML dependency, so this reads exactly that shape line by line and
    ignores everything else (scores, timestamps, previous results).
    """
    out: dict[str, list[dict[str, str]]] = {}
    current: str | None = None
    in_submitters = False
    people: list[dict[str, str]] = []
    sub_indent = -1
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        top = re.match(r"^([^\s:#][^:]*):\s*$", line)
        if indent == 0 and top:
            current, in_submitters = top.group(1).strip().strip("'\""), False
            out[current] = people = []
            continue
        if current is None:
            continue
        stripped = line.strip()
        if re.match(r"^:?submitters:\s*$", stripped):
            in_submitters, sub_indent = True, indent
            continue
        if in_submitters:
            item = re.match(r"^(-\s+)?:?(\w+):\s*(.*)$", stripped)
            if indent <= sub_indent and not stripped.startswith("-"):
                in_submitters = False
                continue
            if item:
                dash, key, value = item.groups()
                if dash or not people:
                    people.append({})
                if key in ("name", "sid", "email") and value:
                    people[-1][key] = value.strip().strip("'\"")
    return {k: [p for p in v if p] for k, v in out.items()}


def discover(root: Path, exclude: Iterable[Path] = ()) -> list[Submission]:
    """The submissions directly inside ``root`` (folders and zips), sorted by id."""
    excluded = {p.resolve() for p in exclude}
    meta_file = next((root / n for n in ("submission_metadata.yml", "submission_metadata.yaml")
                      if (root / n).is_file()), None)
    meta = parse_gradescope_metadata(meta_file.read_text(errors="replace")) if meta_file else {}
    subs: list[Submission] = []
    seen: set[str] = set()
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name in _IGNORED or entry.resolve() in excluded:
            continue
        kind = _kind(entry)
        # A link is listed (and rejected by precheck, so the instructor sees it), never followed.
        if not (kind in ("dir", "link") or (kind == "file" and entry.suffix.lower() == ".zip")):
            continue
        sid = base = _record_id(entry.name)
        k = 2
        while sid in seen:  # "alice/" and "alice.zip": both are graded, under distinct ids
            sid, k = f"{base}-{k}", k + 1
        seen.add(sid)
        people = meta.get(entry.name) or meta.get(entry.stem) or []
        subs.append(Submission(sid, entry, people))
    return subs


def shard_index(submission_id: str, shards: int) -> int:
    """The shard of a submission: a hash of its id, so it does not move when
    other submissions are added or removed (a resumed shard stays valid)."""
    digest = hashlib.sha256(submission_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def _parse_shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--shard expects i/N with 0 <= i < N, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _unpack_export(archive: Path, dest: Path) -> Path:
    """Extract an export zip (refusing paths that escape ``dest``); return the
    folder holding the submissions (the single top folder if there is one)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            target = (dest / name).resolve()
            if not target.is_relative_to(dest.resolve()):
                raise ValueError(f"{archive}: member {name!r} escapes the extraction folder")
        z.extractall(dest)
    entries = [p for p in dest.iterdir() if p.name not in _IGNORED and not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


# ------------------------------------------------------------------ pre-checks


def _zip_student(path: Path) -> tuple[bool, str]:
    """(True, "") when ``path`` is a readable zip holding student/ at most one level deep."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                return False, f"bad zip: corrupt member {bad}"
            names = z.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError,
            NotImplementedError) as e:  # corrupt streams, encrypted or unsupported members
        return False, f"bad zip: {type(e).__name__}: {str(e)[:200]}"
    parts = [n.split("/") for n in names if not n.startswith("__MACOSX/")]
    if any((p[0] == "student" and len(p) > 1) or (len(p) > 2 and p[1] == "student") for p in parts):
        return True, ""
    return False, "no student/ folder in the zip (at its top or one level deep)"


def precheck(path: Path, staging: Path | None = None) -> tuple[Path | None, str, str]:
    """What to hand the grader for this submission, or why not.

    Returns ``(target, status, reason)``: ``target`` is ``None`` when the
    submission cannot be graded (``status`` "bad zip" or "no student/").
    A folder holding no ``student/`` but exactly one zip (a student who uploaded
    their zip to Gradescope) is graded through that zip; one holding the handout's
    modules loose (``precision.py``... dragged into Gradescope's upload box) is
    graded as if they were in ``student/``: a copy is staged under ``staging``,
    exactly as the Gradescope bundle's run_autograder does.
    """
    try:
        return _precheck(path, staging)
    except (OSError, ValueError, RuntimeError) as e:  # unreadable entries, names too long, too deep...
        return None, "rejected", f"the submission could not be read: {type(e).__name__}: {str(e)[:200]}"


def _precheck(path: Path, staging: Path | None) -> tuple[Path | None, str, str]:
    # Nothing here follows a symbolic link (it could name the reference, a
    # classmate's files or a device): links are rejected with their name.
    kind = _kind(path)
    if kind == "link":
        return None, "rejected", f"{path.name} is a symbolic link (never followed)"
    if kind == "file":
        ok, reason = _zip_student(path)
        return (path, "graded", "") if ok else (None, "bad zip" if reason.startswith("bad zip") else "no student/",
                                                 reason)
    if kind != "dir":
        return None, "rejected", f"{path.name} is not a regular file or folder"
    entries = sorted(path.iterdir(), key=lambda p: p.name)
    kinds = {p.name: _kind(p) for p in entries}
    if kinds.get("student") == "dir":
        return path, "graded", ""
    if kinds.get("student") == "link":
        return None, "rejected", "student is a symbolic link (never followed)"
    subdirs = [p for p in entries if kinds[p.name] == "dir" and p.name not in _IGNORED and not p.name.startswith(".")]
    nested = {p.name: _kind(p / "student") for p in subdirs}
    if "link" in nested.values():
        return None, "rejected", f"{next(n for n, k in nested.items() if k == 'link')}/student is a symbolic link " \
                                 "(never followed)"
    if "dir" in nested.values():
        return path, "graded", ""
    zips = [p for p in entries if p.suffix.lower() == ".zip" and kinds[p.name] in ("file", "link")]
    if len(zips) == 1:
        if kinds[zips[0].name] == "link":
            return None, "rejected", f"{zips[0].name} is a symbolic link (never followed)"
        ok, reason = _zip_student(zips[0])
        if ok:
            return zips[0], "graded", ""
        return None, "bad zip" if reason.startswith("bad zip") else "no student/", f"{zips[0].name}: {reason}"
    loose = [p for p in entries if p.suffix == ".py" and p.stem in HANDOUT_MODULES]
    if loose and staging is not None:
        odd = [p.name for p in entries if p.suffix == ".py" and kinds[p.name] != "file"]
        if odd:
            return None, "rejected", f"{', '.join(odd)}: not regular files (symbolic links are never followed)"
        pkg = staging / "student"
        remove_tree(staging)
        pkg.mkdir(parents=True)
        for p in entries:
            if p.suffix == ".py" and kinds[p.name] == "file":
                _copy_regular(p, pkg / p.name)
        if not (pkg / "__init__.py").exists():
            (pkg / "__init__.py").write_text("")
        return staging, "graded", ""
    return None, "no student/", "no student/ folder (at the top of the submission or one level deep)"


def _copy_regular(src: Path, dest: Path, cap: int = MAX_BYTES) -> None:
    """Copy the regular file ``src``: opened without following a link (so a
    link swapped in after the check is refused, not followed), checked to be
    a regular file, at most ``cap`` bytes."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise ValueError(f"{src.name} is not a regular file of at most {cap >> 20} MiB")
        dest.write_bytes(f.read(cap + 1)[:cap])


# ------------------------------------------------------------------ grading one

# The grader runs under a tiny supervisor in its own process group. The supervisor
# asks the kernel for SIGTERM when the batch dies (prctl PR_SET_PDEATHSIG, Linux)
# and then kills the whole group, so a SIGKILLed batch leaves no grader (nor
# sandbox worker) running behind it; a timeout kills the same group from the batch.
_SUPERVISOR = r"""
import os, signal, subprocess, sys
parent = int(sys.argv[1])
def die(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, die)
if sys.platform.startswith("linux"):
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))
    except Exception:
        pass
if os.getppid() != parent:
    die()
p = subprocess.Popen(sys.argv[2:])
rc = p.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def grader_command() -> list[str]:
    """``python -m grader``, or the command in ``$LAB_GRADER_CMD`` (tests)."""
    custom = os.environ.get(GRADER_ENV, "").strip()
    return shlex.split(custom) if custom else [sys.executable, "-m", "grader"]


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _valid_result(obj: Any) -> str:
    """Empty when ``obj`` looks like the grader's --json output, else what is wrong."""
    if not isinstance(obj, dict):
        return "the grader's JSON is not an object"
    for key in ("score", "max_score"):
        if not isinstance(obj.get(key), (int, float)) or isinstance(obj.get(key), bool):
            return f"the grader's JSON has no numeric {key!r}"
    if not isinstance(obj.get("problems"), list):
        return "the grader's JSON has no 'problems' list"
    return ""


def grade_submission(sub: Submission, out: Path, grader_args: Sequence[str], timeout: float,
                     parallel: int | None = None) -> dict[str, Any]:
    """Grade one submission and return its record (not yet written); ``parallel``:
    the grader's ``--parallel`` (its share of the batch's worker budget)."""
    start = time.monotonic()
    record: dict[str, Any] = {
        "batch_version": RECORD_VERSION, "id": sub.id, "source": str(sub.path),
        "submitters": sub.submitters, "status": "", "reason": "", "score": 0.0, "max_score": None,
        "grader_args": list(grader_args), "grader_exit": None, "wall_time": 0.0, "result": None,
    }
    target, status, reason = precheck(sub.path, out / "staged" / sub.id)
    if target is None:
        record.update(status=status, reason=reason)
        return record
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    json_path = tmp / f"{sub.id}.{uuid.uuid4().hex[:8]}.json"
    cmd = [*grader_command(), str(target), "--json", str(json_path), *grader_args,
           *(["--parallel", str(parallel)] if parallel else [])]
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", _SUPERVISOR, str(os.getpid()), *cmd],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        start_new_session=True, cwd=REPO,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
        record.update(status="timeout", reason=f"grading took longer than {timeout:g} s; killed")
    record["wall_time"] = round(time.monotonic() - start, 3)
    err = stderr.decode(errors="replace")
    record["grader_exit"] = proc.returncode
    record["stderr_tail"] = printable(_tail(err))
    if record["status"] == "timeout":
        json_path.unlink(missing_ok=True)
        return record
    result, problem = None, ""
    try:
        result = json.loads(json_path.read_text())
        problem = _valid_result(result)
    except FileNotFoundError:
        problem = "the grader wrote no JSON"
    except (ValueError, OSError) as e:
        problem = f"the grader's JSON is unreadable: {e}"
    finally:
        json_path.unlink(missing_ok=True)
    if proc.returncode != 0 or problem:
        why = printable(_last_line(err) or _last_line(stdout.decode(errors="replace")) or problem)
        record.update(status="grader error", reason=f"grader exit code {proc.returncode}: {why}"[:500])
        return record
    record.update(status="graded", score=float(result["score"]), max_score=float(result["max_score"]),
                  result=result)
    return record


def _record_complete(obj: Any, sub_id: str | None = None) -> bool:
    return (isinstance(obj, dict) and obj.get("batch_version") == RECORD_VERSION
            and obj.get("status") in STATUSES and (sub_id is None or obj.get("id") == sub_id)
            and (obj["status"] != "graded" or not _valid_result(obj.get("result"))))


def load_record(path: Path, sub_id: str | None = None) -> dict[str, Any] | None:
    """The record in ``path`` if it is complete, else None (then it is regraded)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if _record_complete(obj, sub_id) else None


def load_records(out: Path) -> dict[str, dict[str, Any]]:
    """Every complete record in ``out/results``, by id."""
    records = {}
    for p in sorted((out / "results").glob("*.json")):
        rec = load_record(p)
        if rec is not None:
            records[rec["id"]] = rec
    return records


# ------------------------------------------------------------------ gradebook


def _problem_names(records: Iterable[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for rec in records:
        for prob in (rec.get("result") or {}).get("problems", []):
            if prob.get("name") not in names:
                names.append(prob.get("name"))
    return names


def _class_max(records: Sequence[dict[str, Any]]) -> float | None:
    maxes = [r["max_score"] for r in records if r["status"] == "graded"]
    return max(maxes) if maxes else None


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def gradebook_csv(records: Sequence[dict[str, Any]]) -> str:
    """One row per record: who, what happened and why, total and per-problem scores."""
    problems = _problem_names(records)
    class_max = _class_max(records)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "name", "sid", "email", "status", "reason", "score", "max_score",
                "gpu_points_not_run", *problems, "wall_time_s", "source"])
    for rec in sorted(records, key=lambda r: r["id"]):
        people = rec.get("submitters") or []
        result = rec.get("result") or {}
        per = {p.get("name"): p.get("score", 0.0) for p in result.get("problems", [])}
        w.writerow([
            rec["id"],
            "; ".join(p.get("name", "") for p in people),
            "; ".join(p.get("sid", "") for p in people),
            "; ".join(p.get("email", "") for p in people),
            rec["status"], rec.get("reason", ""),
            _fmt(rec.get("score", 0.0)),
            _fmt(rec.get("max_score") if rec["status"] == "graded" else class_max),
            _fmt(result.get("gpu_points_not_run", 0.0)),
            *[_fmt(per.get(name, 0.0)) for name in problems],
            _fmt(rec.get("wall_time")), rec.get("source", ""),
        ])
    return buf.getvalue()


# ------------------------------------------------------------------ summary


def class_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-problem pass rates (over every submission: one that could not be graded
    did not pass) and the distribution of total scores."""
    n = len(records)
    statuses = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    problems = []
    for name in _problem_names(records):
        entries = [p for r in records for p in (r.get("result") or {}).get("problems", []) if p.get("name") == name]
        counts: dict[str, int] = {}
        for p in entries:
            counts[p.get("status", "?")] = counts.get(p.get("status", "?"), 0) + 1
        max_score = max((p.get("max_score", 0.0) for p in entries), default=0.0)
        mean = sum(p.get("score", 0.0) for p in entries) / n if n else 0.0
        problems.append({"name": name, "max_score": max_score, "mean_score": mean,
                         "pass_rate": counts.get("passed", 0) / n if n else 0.0, "counts": counts})
    scores = [float(r.get("score", 0.0)) for r in records]
    return {
        "submissions": n, "statuses": statuses, "problems": problems, "scores": scores,
        "max_score": _class_max(records),
        "mean": statistics.fmean(scores) if scores else 0.0,
        "median": statistics.median(scores) if scores else 0.0,
    }


def summary_markdown(summary: dict[str, Any]) -> str:
    s = summary
    lines = ["# Class summary", "",
             f"{s['submissions']} submissions: " + ", ".join(f"{v} {k}" for k, v in s["statuses"].items() if v) + ".",
             "", f"Total score: mean {s['mean']:.2f}, median {s['median']:.2f}"
             + (f" out of {s['max_score']:g}." if s["max_score"] is not None else "."), "",
             "| problem | points | mean score | pass rate | passed | failed | error | timeout | not run on a GPU |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in s["problems"]:
        c = p["counts"]
        lines.append(f"| {p['name']} | {p['max_score']:g} | {p['mean_score']:.2f} | {100 * p['pass_rate']:.0f}% | "
                     f"{c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0)} | {c.get('timeout', 0)} | "
                     f"{c.get('not run on a GPU', 0)} |")
    lines += ["", "Pass rates count every submission, including those that could not be graded.",
              "", "![pass rates and scores](summary.png)", ""]
    return "\n".join(lines)


def summary_png(summary: dict[str, Any], path: Path) -> None:
    """Pass rate per problem (bars) and the histogram of total scores."""
    import matplotlib

    matplotlib.use("Agg")  # no display on graders and CI machines
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [p["name"] for p in summary["problems"]]
    rates = [100 * p["pass_rate"] for p in summary["problems"]]
    bars = ax1.barh(names[::-1], rates[::-1], color="#4C72B0")
    for bar, rate in zip(bars, rates[::-1], strict=True):
        ax1.text(min(rate + 1, 92), bar.get_y() + bar.get_height() / 2, f"{rate:.0f}%", va="center")
    ax1.set_xlim(0, 100)
    ax1.set_xlabel("submissions passing (%)")
    ax1.set_title(f"Pass rate per problem ({summary['submissions']} submissions)")
    top = summary["max_score"] or max(summary["scores"], default=1.0) or 1.0
    ax2.hist(summary["scores"], bins=min(20, max(5, int(top) + 1)), range=(0, top), color="#55A868",
             edgecolor="white")
    ax2.set_xlabel(f"total score (out of {top:g})")
    ax2.set_ylabel("submissions")
    ax2.set_title(f"Scores: mean {summary['mean']:.2f}, median {summary['median']:.2f}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Class: {summary['submissions']} submissions, mean {summary['mean']:.2f}"
                  + (f" / {summary['max_score']:g}" if summary["max_score"] is not None else ""))
    for col in ("problem", "points", "mean", "pass rate", "passed", "failed", "error", "timeout"):
        table.add_column(col, justify="left" if col == "problem" else "right")
    for p in summary["problems"]:
        c = p["counts"]
        table.add_row(p["name"], f"{p['max_score']:g}", f"{p['mean_score']:.2f}", f"{100 * p['pass_rate']:.0f}%",
                      *(str(c.get(k, 0)) for k in ("passed", "failed", "error", "timeout")))
    Console().print(table)
    other = {k: v for k, v in summary["statuses"].items() if k != "graded" and v}
    if other:
        print("not graded: " + ", ".join(f"{v} {k}" for k, v in other.items()))


def write_outputs(out: Path, records: Sequence[dict[str, Any]], *, quiet: bool = False) -> dict[str, Any]:
    """gradebook.csv, summary.md and summary.png for ``records``."""
    _write_atomic(out / "gradebook.csv", gradebook_csv(records))
    summary = class_summary(records)
    _write_atomic(out / "summary.md", summary_markdown(summary))
    summary_png(summary, out / "summary.png")
    if not quiet:
        print_summary(summary)
    return summary


# ------------------------------------------------------------------ progress


class _Progress:
    """A rich progress bar on a terminal; one line per submission otherwise (CI logs)."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.bar = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.description}"), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("", total=total, completed=done)

    def advance(self, rec: dict[str, Any]) -> None:
        self.done += 1
        what = (f"{rec['score']:g}/{rec['max_score']:g}" if rec["status"] == "graded"
                else f"{rec['status']}: {rec['reason']}")
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"{rec['id']}: {what}"[:60])
        else:
            print(printable(f"[{self.done}/{self.total}] {rec['id']}: {what} ({rec.get('wall_time', 0):.1f} s)"),
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# ------------------------------------------------------------------ commands


@contextlib.contextmanager
def _locked(out: Path):
    """One batch per output folder at a time (the lock dies with its process)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".batch.lock", "w") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # Windows: no lock, no guarantee
            pass
        except BlockingIOError:
            raise SystemExit(f"batch: another batch is writing to {out}") from None
        yield


def _grader_args(args: argparse.Namespace) -> list[str]:
    extra = []
    if getattr(args, "worker_memory", None):
        extra += ["--memory-limit", f"{args.worker_memory / (1 << 30):.3f}"]
    if args.profile:
        extra += ["--profile", args.profile]
    if args.problems:
        extra += ["--problems", args.problems]
    if args.public_only:
        extra.append("--public-only")
    return extra


def share_budget(jobs: int) -> tuple[int, int]:
    """(submissions at once, problems at once within each): one budget of worker
    slots, min(cores, memory slots), shared so that jobs x problems never exceeds it."""
    from grader.engine import cores
    from grader.rubric import load
    from grader.sandbox import worker_slots

    slots = max(1, min(cores(), worker_slots(int(load().settings.memory_limit_gib * (1 << 30)))))
    if jobs > slots:
        print(f"batch: --jobs {jobs} exceeds this machine's {slots} worker slots (cores, memory); "
              f"grading {slots} at a time", file=sys.stderr, flush=True)
        jobs = slots
    return jobs, max(1, slots // jobs)


def run_batch(args: argparse.Namespace) -> int:
    out: Path = args.out.resolve()
    root: Path = args.submissions.resolve()
    if root.is_file() and zipfile.is_zipfile(root):
        root = _unpack_export(root, out / "export")
    if not root.is_dir():
        raise SystemExit(f"batch: {args.submissions} is not a folder (nor an export zip)")
    subs = discover(root, exclude=[out])
    if args.shard:
        i, n = args.shard
        subs = [s for s in subs if shard_index(s.id, n) == i]
    # All the workers that can run at once (two per grader: a problem's and
    # the spare) must fit the free memory: cap the per-worker limit, then --jobs.
    configured = int((args.memory_limit or _rubric_memory_gib()) * (1 << 30))
    args.jobs, args.worker_memory, message = plan_jobs(args.jobs, configured)
    if message:
        print(f"batch: {message}", flush=True)
    grader_args = _grader_args(args)
    with _locked(out):
        results = out / "results"
        results.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out / "tmp", ignore_errors=True)  # leftovers of a killed run
        records: dict[str, dict[str, Any]] = {}
        todo: list[Submission] = []
        changed = 0
        for s in subs:
            rec = None if args.force else load_record(results / f"{s.id}.json", s.id)
            if rec is not None and Path(str(rec.get("source", ""))).name != s.path.name:
                rec = None  # another entry had this id in an earlier run: its grade is not this one's
            if rec is None:
                todo.append(s)
            else:
                records[s.id] = rec
                changed += rec.get("grader_args") != grader_args
        if records:
            print(f"batch: resuming: {len(records)} of {len(subs)} submissions already have results"
                  + (f" ({changed} graded with other options; --force regrades)" if changed else ""), flush=True)
        lock = threading.Lock()
        progress = _Progress(len(subs), len(records))
        jobs, per_grader = share_budget(max(1, args.jobs))
        try:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(grade_submission, s, out, grader_args, args.timeout, per_grader): s
                           for s in todo}
                for fut in as_completed(futures):
                    s = futures[fut]
                    try:
                        rec = fut.result()
                    except Exception as e:  # a bug here must cost one row, not the batch
                        rec = {"batch_version": RECORD_VERSION, "id": s.id, "source": str(s.path),
                               "submitters": s.submitters, "status": "grader error",
                               "reason": f"batch could not run the grader: {type(e).__name__}: {e}",
                               "score": 0.0, "max_score": None, "grader_args": grader_args, "result": None}
                    write_json_atomic(results / f"{s.id}.json", rec)
                    with lock:
                        records[s.id] = rec
                        _write_atomic(out / "gradebook.csv", gradebook_csv(list(records.values())))
                    progress.advance(rec)
        finally:
            progress.close()
        shutil.rmtree(out / "tmp", ignore_errors=True)
        ordered = [records[s.id] for s in subs]
        write_outputs(out, ordered, quiet=args.quiet)
    print(f"batch: {len(ordered)} rows in {out / 'gradebook.csv'}; summary in {out / 'summary.md'}")
    if args.similarity:
        from grader import similarity

        similarity.report(root, out / "similarity", exclude=[out], quiet=args.quiet)
    return 0


def _rubric_memory_gib() -> float:
    from grader.rubric import load

    try:
        return float(load().settings.memory_limit_gib)
    except Exception:  # the rubric's own checks report a broken rubric; this only sizes --jobs
        return 8.0


def run_merge(args: argparse.Namespace) -> int:
    """One gradebook from shard output folders; a submission graded in two shards
    (shards made from different inputs) is an error, not a silent pick."""
    out: Path = args.out.resolve()
    merged: dict[str, dict[str, Any]] = {}
    origin: dict[str, Path] = {}
    for d in args.merge:
        if not (d / "results").is_dir():
            raise SystemExit(f"batch --merge: {d} has no results/ folder")
        for sub_id, rec in load_records(d).items():
            if sub_id in merged and merged[sub_id] != rec:
                raise SystemExit(f"batch --merge: {sub_id} was graded in both {origin[sub_id]} and {d}")
            merged[sub_id], origin[sub_id] = rec, d
    with _locked(out):
        for sub_id, rec in merged.items():
            write_json_atomic(out / "results" / f"{sub_id}.json", rec)
        records = [merged[k] for k in sorted(merged)]
        write_outputs(out, records, quiet=args.quiet)
    print(f"batch --merge: {len(records)} rows from {len(args.merge)} folders in {out / 'gradebook.csv'}")
    return 0


def _render(template: str, values: dict[str, str]) -> str:
    """Fill ``{{name}}`` placeholders (the templates' own ``${...}`` belong to bash)."""
    def sub(m: re.Match[str]) -> str:
        return values[m.group(1)]
    return re.sub(r"\{\{(\w+)\}\}", sub, template)


def write_slurm(args: argparse.Namespace) -> int:
    """``grade.sbatch`` (an array job, shard i of N per task) and ``merge.sbatch``."""
    n = args.slurm
    if n < 1:
        raise SystemExit("batch: --slurm N needs N >= 1")
    out: Path = args.out.resolve()
    passthrough = [*_grader_args(args), "--timeout", f"{args.timeout:g}"]
    values = {
        "shards": str(n), "last": str(n - 1), "jobs": str(max(1, args.jobs)),
        "repo": shlex.quote(str(REPO)), "python": shlex.quote(sys.executable),
        "submissions": shlex.quote(str(args.submissions.resolve())), "out": shlex.quote(str(out)),
        "out_raw": str(out),  # #SBATCH lines are not parsed by a shell: no quotes there
        "time": args.slurm_time, "grader_args": " ".join(shlex.quote(a) for a in passthrough),
        "shard_dirs": " ".join(shlex.quote(str(out / "shards" / f"shard-{i}")) for i in range(n)),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    for name in ("grade.sbatch", "merge.sbatch"):
        text = _render((TEMPLATES / "slurm" / name).read_text(), values)
        _write_atomic(out / name, text)
        (out / name).chmod(0o755)
    print(f"batch: wrote {out / 'grade.sbatch'} ({n} array tasks) and {out / 'merge.sbatch'}; submit with\n"
          f"  jid=$(sbatch --parsable {shlex.quote(str(out / 'grade.sbatch'))})\n"
          f"  sbatch --dependency=afterany:$jid {shlex.quote(str(out / 'merge.sbatch'))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grader batch",
        description="Grade every submission in a folder (Gradescope or GitHub Classroom export, or any folder "
                    "of submission folders and zips); resumable.",
    )
    p.add_argument("submissions", nargs="?", type=Path, help="folder of submissions (or an export zip)")
    p.add_argument("--out", type=Path, default=Path("grade-out"), help="output folder (default: grade-out)")
    p.add_argument("--jobs", "-j", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                   help="submissions graded in parallel (default: half the CPUs)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="wall-clock seconds per submission before it is killed (default: 1800)")
    p.add_argument("--profile", choices=("dev", "ci", "grade"), default=None, help="passed to the grader")
    p.add_argument("--problems", default=None, help="comma-separated problems, passed to the grader")
    p.add_argument("--public-only", action="store_true", help="passed to the grader")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                   help="address space per worker (default: the rubric's); lowered, and --jobs with it, "
                        "so that every worker that can run at once fits the free memory")
    p.add_argument("--force", action="store_true", help="regrade submissions that already have results")
    p.add_argument("--similarity", action="store_true",
                   help="also write the class similarity report (OUT/similarity; see grader/similarity.py)")
    p.add_argument("--quiet", action="store_true", help="no summary table on the console")
    p.add_argument("--shard", type=_parse_shard, default=None, metavar="i/N",
                   help="grade only shard i (0-based) of N; deterministic (a hash of the submission id)")
    p.add_argument("--slurm", type=int, default=None, metavar="N",
                   help="write a Slurm array job of N shards (OUT/grade.sbatch, OUT/merge.sbatch) and exit")
    p.add_argument("--slurm-time", default="04:00:00", help="time limit of each array task (default: 04:00:00)")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="DIR",
                   help="merge the results of shard output folders into --out and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader batch``."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.merge:
        if args.submissions is not None:
            parser.error("--merge takes shard folders, not a submissions folder")
        return run_merge(args)
    if args.submissions is None:
        parser.error("a submissions folder is required (or --merge DIR...)")
    if not args.submissions.exists():
        parser.error(f"{args.submissions} does not exist")
    if args.slurm is not None:
        return write_slurm(args)
    return run_batch(args)


if __name__ == "__main__":
    sys.exit(main())

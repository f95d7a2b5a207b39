"""Batch grading of a generated class of 16 with the real grader: killed (SIGKILL)
mid-run, rerun, and then exactly 16 rows with the expected scores.

To fit CI (2 cores) it grades two problems (precision, views) with the dev
profile, and holds each kind of submission once or twice (10 graded, 6 refused
before grading). A known-wrong submission loses the points of the rubric items it
breaks (its ``breaks`` list in grader/corpus/wrong) and keeps the others.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from grader.corpus import build_wrong, wrong_submissions
from grader.instructor.grading import GRADER_ENV
from grader.rubric import load
from grader.util import tomllib

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = ("precision", "views")
CLASS_SIZE = 16


def _points() -> dict[str, float]:
    rubric = tomllib.loads((REPO / "grader" / "rubric.toml").read_text())
    return {p["name"]: float(p["points"]) for p in rubric["problem"] if p["name"] in PROBLEMS}


def _lost(problem: str, breaks: tuple[str, ...]) -> float:
    """The points a wrong submission loses: its broken items' (the problem's when unstated)."""
    if not breaks:
        return _points()[problem]
    return sum(i.points for i in load().problem(problem).items if i.name in breaks)


def _zip_folder(folder: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                z.write(p, p.relative_to(folder).as_posix())
    shutil.rmtree(folder)


def generate_class(root: Path) -> dict[str, tuple[str, float]]:
    """16 submissions; returns id -> (status, expected score)."""
    pts = _points()
    full = sum(pts.values())
    root.mkdir(parents=True)
    expected: dict[str, tuple[str, float]] = {}
    ignore = shutil.ignore_patterns("__pycache__")

    def reference_copy(folder: Path) -> Path:
        shutil.copytree(REPO / "reference", folder / "student", ignore=ignore)
        return folder / "student"

    for i in range(4):  # correct: as folders, nested one level (a GitHub Classroom repo inside), zips
        sid = f"correct-{i}"
        reference_copy(root / sid / "repo" if i % 4 == 1 else root / sid)
        if i % 4 == 2:
            _zip_folder(root / sid, root / f"{sid}.zip")
        expected[sid] = ("graded", full)
    wrong = [w for w in wrong_submissions() if w.problem in PROBLEMS and w.breaks]  # known lost items
    for i in range(3):  # partly correct: one classic bug of the corpus each
        w = wrong[i % len(wrong)]
        sid = f"partial-{i}-{w.name}"
        folder = build_wrong(w, root / "_tmp")
        shutil.move(folder, root / sid)
        expected[sid] = ("graded", full - _lost(w.problem, w.breaks))
    shutil.rmtree(root / "_tmp", ignore_errors=True)
    for i in range(1):  # the untouched stubs
        shutil.copytree(REPO / "student", root / f"stubs-{i}" / "student", ignore=ignore)
        expected[f"stubs-{i}"] = ("graded", 0.0)
    for i in range(1):  # a syntax error in views.py costs views only
        pkg = reference_copy(root / f"syntax-{i}")
        (pkg / "views.py").write_text((pkg / "views.py").read_text() + "\ndef broken(:\n")
        expected[f"syntax-{i}"] = ("graded", full - pts["views"])
    pkg = reference_copy(root / "exits-on-import")  # hostile-ish: leaves at import
    (pkg / "views.py").write_text("import sys\nsys.exit(0)\n" + (pkg / "views.py").read_text())
    expected["exits-on-import"] = ("graded", full - pts["views"])
    for i in range(3):  # no student/: loose notes, an empty folder, a zip without it
        sid = f"missing-{i}"
        (root / sid).mkdir()
        if i % 2 == 0:
            (root / sid / "answers.txt").write_text("see attached\n")
        if i == 2:
            (root / sid / "other").mkdir()
            (root / sid / "other" / "x.txt").write_text("x")
            _zip_folder(root / sid, root / f"{sid}.zip")
        expected[sid] = ("no student/", 0.0)
    for i in range(3):  # bad zips: garbage, truncated, empty file
        sid = f"badzip-{i}"
        if i == 0:
            (root / f"{sid}.zip").write_bytes(os.urandom(200))
        elif i == 1:
            reference_copy(root / sid)
            _zip_folder(root / sid, root / f"{sid}.zip")
            data = (root / f"{sid}.zip").read_bytes()
            (root / f"{sid}.zip").write_bytes(data[: len(data) // 2])
        else:
            (root / f"{sid}.zip").write_bytes(b"")
        expected[sid] = ("bad zip", 0.0)
    assert len(expected) == CLASS_SIZE
    return expected


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> set[int]:
    import psutil

    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


@pytest.mark.slow
@pytest.mark.full  # ./lab test: test_batch.py's resume checks cover records and --force on small classes
@pytest.mark.timeout(2400)  # about 5 minutes on 2 busy cores; the project's default is 300 s
def test_class_killed_and_resumed(tmp_path):
    expected = generate_class(tmp_path / "class")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != GRADER_ENV}
    cmd = [sys.executable, "-m", "grader", "batch", str(tmp_path / "class"), "--out", str(out), "--jobs", "2",
           "--problems", ",".join(PROBLEMS), "--profile", "dev", "--timeout", "600"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    graded_before: set[str] = set()
    children: set[int] = set()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        children |= _descendants(proc.pid)
        done = {p.stem for p in (out / "results").glob("*.json")} if (out / "results").exists() else set()
        graded_before = {d for d in done if expected.get(d, ("",))[0] == "graded"}
        if len(graded_before) >= 3 and len(children) > 0:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the batch finished before it could be killed"
    children |= _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    snapshot = {p.name: p.read_bytes() for p in (out / "results").glob("*.json")}
    assert 3 <= len(snapshot) < CLASS_SIZE, sorted(snapshot)
    time.sleep(2)
    alive = [pid for pid in children if _alive(pid)]
    assert not alive, f"graders left running after the batch was killed: {alive}"

    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"resuming: {len(snapshot)} of {CLASS_SIZE}" in rerun.stdout, rerun.stdout[:2000]
    for name, data in snapshot.items():  # what was done is kept, not regraded
        assert (out / "results" / name).read_bytes() == data, f"{name} was graded twice"

    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == CLASS_SIZE and len({r["id"] for r in rows}) == CLASS_SIZE
    got = {r["id"]: (r["status"], float(r["score"])) for r in rows}
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    assert not wrong, "unexpected rows (got, expected):\n" + "\n".join(f"{k}: {v}" for k, v in wrong.items())
    for r in rows:
        assert r["status"] == "graded" or r["reason"], r
        assert float(r["max_score"]) == sum(_points().values()), r
        assert float(r["precision"]) + float(r["views"]) == float(r["score"]), r
    summary = (out / "summary.md").read_text()
    assert "| precision |" in summary and "| views |" in summary
    assert (out / "summary.png").stat().st_size > 10_000

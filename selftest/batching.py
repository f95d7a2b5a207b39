"""Shared by the batch selftests (test_batch*.py): a fake grader and the
submissions it grades.

The fake grader (``FAKE_GRADER``, installed by the ``fake_grader`` fixture:
import ``fake_grader_fixture``) honours the grader's CLI contract (SUBMISSION,
``--json``, ``--problems``; exit 0 whenever grading completed) and scores each
problem from markers in ``student/<problem>.py``, so the expected gradebook is
known exactly (a module that does not compile is reported as the grader
reports a module that does not import; ``mfu`` is not run, as on a machine
without a GPU). The real grader is exercised in ``test_batch_integration.py``.
"""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.instructor import grading

REPO = Path(__file__).resolve().parent.parent

FAKE_GRADER = r'''
import json, os, sys, time, zipfile
args = sys.argv[1:]
sub, out = args[0], args[args.index("--json") + 1]
problems = args[args.index("--problems") + 1].split(",") if "--problems" in args else ["precision", "views"]
log = os.environ.get("FAKE_GRADER_LOG")
if log:
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {os.path.basename(sub.rstrip('/'))}\n")
def sources():
    if zipfile.is_zipfile(sub):
        z = zipfile.ZipFile(sub)
        return {n.split("/")[-1]: z.read(n).decode() for n in z.namelist()
                if n.endswith(".py") and "student/" in n}
    for base in [sub] + [os.path.join(sub, d) for d in sorted(os.listdir(sub))]:
        pkg = os.path.join(base, "student")
        if os.path.isdir(pkg):
            return {n: open(os.path.join(pkg, n)).read() for n in os.listdir(pkg) if n.endswith(".py")}
    sys.exit("fake grader: no student/")
src = sources()
time.sleep(float(os.environ.get("FAKE_GRADER_SLEEP", "0")))
result = {"submission": sub, "score": 0.0, "max_score": 0.0, "gpu_points_not_run": 0.0, "execution_time": 0.1,
          "sandbox": "none", "profile": "dev", "problems": []}
for name in problems:
    if name == "mfu":  # the GPU problem on a machine without one: left out of the totals
        result["problems"].append({"name": name, "section": "3.1/6", "score": 0.0, "max_score": 0.0,
                                   "status": "not run on a GPU", "not_counted": 5.0, "visibility": "visible",
                                   "output": "", "checks": []})
        result["gpu_points_not_run"] = 5.0
        continue
    text = src.get(name + ".py", "")
    if "# HANG" in text:
        time.sleep(1000)
    if "# CRASH" in text:
        os._exit(3)
    try:
        compile(text, name, "exec")
        status = "failed" if ("NotImplementedError" in text or "# BUG" in text or not text) else "passed"
        if "# FAULT" in text and not os.environ.get("FAKE_GRADER_MACHINE_FIXED"):
            status = "grader error"
    except SyntaxError as e:  # as the grader reports a module that does not import
        status, where = "error", f"student/{name}.py, line {e.lineno}: SyntaxError: {e.msg}"
        result.setdefault("import_errors", []).append(f"{where}; not graded: {name}")
    score = 5.0 if status == "passed" else 0.0
    output = f"not graded: your code does not import ({where})" if status == "error" else ""
    result["problems"].append({"name": name, "section": "1", "score": score, "max_score": 5.0, "status": status,
                               "visibility": "visible", "output": output, "checks": []})
    result["score"] += score
    result["max_score"] += 5.0
tmp = out + ".part"
with open(tmp, "w") as f:
    json.dump(result, f)
os.replace(tmp, out)
'''


@pytest.fixture(name="fake_grader")
def fake_grader_fixture(tmp_path, monkeypatch):
    script = tmp_path / "fake_grader.py"
    script.write_text(FAKE_GRADER)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    monkeypatch.setenv(grading.GRADER_ENV, cmd)
    return cmd


def make_sub(root: Path, name: str, precision: str = "x = 1\n", views: str | None = "y = 2\n", *,
             nest: str | None = None, as_zip: bool = False) -> Path:
    """A submission folder (or zip) whose student/ modules hold the given text."""
    folder = root / name
    pkg = folder / nest / "student" if nest else folder / "student"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "precision.py").write_text(precision)
    if views is not None:
        (pkg / "views.py").write_text(views)
    if not as_zip:
        return folder
    archive = root / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(folder).as_posix())
    import shutil

    shutil.rmtree(folder)
    return archive


def run_batch(subs: Path, out: Path, *extra: str, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def read_gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as f:
        return {row["id"]: row for row in csv.DictReader(f)}


def small_class(root: Path) -> dict[str, tuple[str, float]]:
    """Submissions of every kind; returns id -> (status, score)."""
    root.mkdir()
    make_sub(root, "alice")                                                    # 10
    make_sub(root, "bob", views="# BUG\n")                                     # 5
    make_sub(root, "carol", precision="raise NotImplementedError\n", views="raise NotImplementedError\n")  # 0
    make_sub(root, "dave", views="def f(:\n")                                  # syntax error: 5
    make_sub(root, "erin", nest="erin-repo")                                   # one level deep: 10
    make_sub(root, "frank", as_zip=True)                                       # zip: 10
    make_sub(root, "grace", nest="inner", as_zip=True)                         # zip, one level deep: 10
    (root / "heidi").mkdir()                                                   # no student/
    (root / "heidi" / "README.md").write_text("I could not finish\n")
    (root / "ivan.zip").write_bytes(b"PK\x03\x04 this is not really a zip")   # bad zip
    make_sub(root, "judy", views="# CRASH\n")                                  # grader crashes
    (root / "notes.txt").write_text("not a submission")
    return {"alice": ("graded", 10), "bob": ("graded", 5), "carol": ("graded", 0), "dave": ("graded", 5),
            "erin": ("graded", 10), "frank": ("graded", 10), "grace": ("graded", 10), "heidi": ("no student/", 0),
            "ivan": ("bad zip", 0), "judy": ("grader error", 0)}

"""The Gradescope bundle: its contents, and ``run_autograder`` run against a
simulated ``/autograder`` layout (``AUTOGRADER_ROOT``) producing a results.json
valid against Gradescope's fields."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest

from grader.instructor import gradescope

REPO = Path(__file__).resolve().parent.parent

#: The fields Gradescope reads from results.json (its "Autograder Specifications").
GRADESCOPE_SCHEMA = {
    "type": "object",
    "required": ["score", "execution_time", "output", "tests"],
    "properties": {
        "score": {"type": "number", "minimum": 0},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "visibility": {"enum": ["visible", "hidden", "after_due_date", "after_published"]},
        "tests": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "score", "max_score", "status", "output", "visibility"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "score": {"type": "number", "minimum": 0},
                "max_score": {"type": "number", "minimum": 0},
                "status": {"enum": ["passed", "failed"]},
                "output": {"type": "string"},
                "visibility": {"enum": ["visible", "hidden", "after_due_date", "after_published"]},
            },
        }},
    },
}

# Stands in for the venv's python until the grader CLI exists: `-m grader SUB
# --gradescope FILE` writes a Gradescope result from the submission's layout;
# anything else runs the real interpreter (run_autograder's fallback writer).
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "grader" ]; then
    exec {python} - "$@" <<'PYEOF'
import json, os, sys
args = sys.argv[1:]
sub, out = args[2], args[args.index("--gradescope") + 1]
if os.environ.get("FAKE_CRASH"):
    sys.exit(7)
ok = os.path.isdir(os.path.join(sub, "student")) or sub.endswith(".zip")
tests = [{{"name": n, "score": 5.0 if ok else 0.0, "max_score": 5.0, "status": "passed" if ok else "failed",
          "output": sub, "visibility": "visible"}} for n in ("precision", "views")]
json.dump({{"score": sum(t["score"] for t in tests), "execution_time": 0.1, "output": " ".join(args),
           "tests": tests}}, open(out, "w"))
if os.environ.get("FAKE_KILLED_AFTER_WRITING"):  # stopped midway, its results.json as it last wrote it
    sys.exit(137)
PYEOF
fi
exec {python} "$@"
"""


@pytest.fixture(scope="module")
def bundle_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    proc = subprocess.run([sys.executable, "-m", "grader", "gradescope", str(out), "--profile", "dev",
                           "--problems", "precision,views"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_bundle_contents(bundle_zip):
    with zipfile.ZipFile(bundle_zip) as z:
        infos = {i.filename: i for i in z.infolist()}
        setup = z.read("setup.sh").decode()
        run = z.read("run_autograder").decode()
        reqs = z.read("requirements.txt").decode().split()
    for name in ("setup.sh", "run_autograder"):
        assert (infos[name].external_attr >> 16) & 0o111, f"{name} is not executable in the zip"
    names = set(infos)
    assert {"conftest.py", "pyproject.toml", "constraints.txt", "student/__init__.py"} <= names
    for d in ("grader/", "reference/", "tests/", "grader/hidden/"):
        assert any(n.startswith(d) for n in names), f"no {d} in the bundle"
    for d in ("selftest/", "grader/corpus/", "benchmarks/", "docs/", ".venv/", ".git/"):
        assert not any(n.startswith(d) for n in names), f"{d} is in the bundle"
    assert not any(n.startswith("student/") and n != "student/__init__.py" for n in names)
    assert "-c constraints.txt -r requirements.txt" in setup and "bubblewrap" in setup
    # The build fails where the worker can be isolated neither by bubblewrap nor by uid (on a locked checkout).
    uid_check = "if ! \"$SOURCE/.venv/bin/python\" -m grader.sandbox check"
    assert "-m grader.sandbox lock" in setup and uid_check in setup and "exit 1" in setup
    assert any(r.startswith("torch") for r in reqs) and not any(r.startswith("matplotlib") for r in reqs)
    assert "--profile dev --problems precision,views" in run and "{{" not in run
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", "/dev/stdin"], input=(setup if script == "setup.sh" else run),
                              text=True).returncode == 0


def test_bundle_is_reproducible(bundle_zip, tmp_path):
    again = tmp_path / "again.zip"
    assert gradescope.main([str(again), "--profile", "dev", "--problems", "precision,views"]) == 0
    assert again.read_bytes() == bundle_zip.read_bytes()


def autograder_layout(root: Path, bundle_zip: Path, submission: Path | None) -> Path:
    """What Gradescope sets up: the bundle unpacked in source/ (permissions kept,
    as unzip does), run_autograder copied to the root, the upload in submission/."""
    source = root / "source"
    with zipfile.ZipFile(bundle_zip) as z:
        for info in z.infolist():
            path = Path(z.extract(info, source))
            path.chmod((info.external_attr >> 16) & 0o777)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    if submission is not None:
        shutil.copytree(submission, root / "submission", dirs_exist_ok=True)
    (root / "results").mkdir()
    return root


def run_autograder(root: Path, python: str | None = None, **env: str) -> dict:
    full_env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python or sys.executable, **env}
    full_env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(root / "run_autograder")], cwd=root, env=full_env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, GRADESCOPE_SCHEMA)
    return results


@pytest.fixture
def fake_python(tmp_path) -> str:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_PYTHON.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def _submission(tmp_path: Path, kind: str) -> Path:
    sub = tmp_path / f"upload-{kind}"
    sub.mkdir(parents=True)
    if kind == "folder":
        shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
    elif kind == "loose":
        for p in (REPO / "reference").glob("*.py"):
            if p.name != "__init__.py":
                shutil.copy(p, sub / p.name)
    elif kind == "zip":
        with zipfile.ZipFile(sub / "work.zip", "w") as z:
            for p in sorted((REPO / "reference").glob("*.py")):
                z.write(p, f"student/{p.name}")
    return sub


@pytest.mark.parametrize("kind", ["folder", "loose", "zip"])
def test_run_autograder_puts_the_upload_in_place(tmp_path, bundle_zip, fake_python, kind):
    root = autograder_layout(tmp_path / "autograder", bundle_zip, _submission(tmp_path, kind))
    results = run_autograder(root, fake_python)
    assert results["score"] == 10.0, results
    graded = results["tests"][0]["output"]
    assert graded.endswith("/submission/work.zip" if kind == "zip" else "/submission"), graded
    assert not graded.startswith(str(root)), "graded in the upload folder instead of a copy"
    assert "--profile dev --problems precision,views" in results["output"]
    # the upload itself is untouched; the solutions and hidden checks are the grading user's only
    assert sorted(p.name for p in (root / "submission").iterdir()) == \
        sorted(p.name for p in _submission(tmp_path / "again", kind).iterdir())
    for d in ("reference", "grader/hidden"):
        for p in [root / "source" / d, *(root / "source" / d).rglob("*")]:
            assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is readable by others"


def test_run_autograder_explains_an_empty_upload(tmp_path, bundle_zip, fake_python):
    root = autograder_layout(tmp_path / "autograder", bundle_zip, None)
    (root / "submission" / "notes.txt").write_text("oops")
    results = run_autograder(root, fake_python)
    assert results["score"] == 0 and "No student/ folder" in results["output"], results


def test_run_autograder_reports_a_grader_failure(tmp_path, bundle_zip, fake_python):
    root = autograder_layout(tmp_path / "autograder", bundle_zip, _submission(tmp_path, "folder"))
    results = run_autograder(root, fake_python, FAKE_CRASH="1")
    assert results["score"] == 0 and "exit code 7" in results["output"], results


def test_run_autograder_keeps_what_a_grader_stopped_midway_finished(tmp_path, bundle_zip, fake_python):
    """A grader stopped midway (out of memory, say) leaves results.json as it
    last wrote it: run_autograder keeps its points and says why it is partial."""
    root = autograder_layout(tmp_path / "autograder", bundle_zip, _submission(tmp_path, "folder"))
    results = run_autograder(root, fake_python, FAKE_KILLED_AFTER_WRITING="1")
    assert results["score"] == 10 and len(results["tests"]) == 2, results
    assert "stopped before it finished (exit code 137)" in results["output"], results["output"]


@pytest.mark.timeout(1200)
def test_run_autograder_with_the_real_grader(tmp_path, bundle_zip):
    """The reference copied as student/ gets every point of the problems graded,
    and results.json's execution_time is the run's wall time (within 10%, hidden
    checks included); the stubs (uploaded loose) get none. Runs the grader of
    the bundle itself."""
    root = autograder_layout(tmp_path / "ok", bundle_zip, _submission(tmp_path, "folder"))
    reports = f"--json {tmp_path / 'grade.json'} --junit {tmp_path / 'grade.xml'}"
    began = time.monotonic()
    results = run_autograder(root, AUTOGRADER_GRADER_ARGS=f"--profile dev --problems precision,views {reports}")
    wall = time.monotonic() - began
    assert results["tests"], results
    assert results["score"] == pytest.approx(sum(t["max_score"] for t in results["tests"])), results
    names = " ".join(t["name"] for t in results["tests"])
    assert "precision" in names and "views" in names and "memory" not in names, names
    assert "public + hidden checks" in results["output"], results["output"]
    assert results["execution_time"] == pytest.approx(wall, rel=0.1), (results["execution_time"], wall)
    junit_time = float(ElementTree.parse(tmp_path / "grade.xml").getroot().get("time", "0"))
    json_time = json.loads((tmp_path / "grade.json").read_text())["execution_time"]
    assert junit_time == json_time == results["execution_time"], (junit_time, json_time, results["execution_time"])
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for p in (REPO / "student").glob("*.py"):
        shutil.copy(p, stubs / p.name)
    root = autograder_layout(tmp_path / "stubs-root", bundle_zip, stubs)
    results = run_autograder(root)
    assert results["score"] == 0 and results["tests"], results

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
from grader.instructor.precheck import precheck
from grader.staging.submission import locate

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

# Stands in for the venv's python: `-m grader SUB --gradescope FILE` finds the
# upload's student/ with the grader's own code (grader.staging.submission.locate,
# as the real grader does first) and writes a Gradescope result naming the
# modules found; anything else runs the real interpreter (run_autograder's
# fallback writer).
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "grader" ]; then
    exec {python} - "$@" <<'PYEOF'
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, os.getcwd())
from grader.staging.submission import locate
from grader.staging.workcopy import SubmissionError
args = sys.argv[1:]
sub, out = args[2], args[args.index("--gradescope") + 1]
if os.environ.get("FAKE_CRASH"):
    sys.exit(7)
try:
    folder = locate(Path(sub), Path(tempfile.mkdtemp()))
    modules, error = sorted(p.name for p in (folder / "student").glob("*.py")), ""
except SubmissionError as e:
    modules, error = [], str(e)
ok = "precision.py" in modules and "views.py" in modules
tests = [{{"name": n, "score": 5.0 if ok else 0.0, "max_score": 5.0, "status": "passed" if ok else "failed",
          "output": " ".join([sub, *modules]), "visibility": "visible"}} for n in ("precision", "views")]
json.dump({{"score": sum(t["score"] for t in tests), "execution_time": 0.1,
           "output": (f"not graded: {{error}}\n" if error else "") + " ".join(args), "tests": tests}}, open(out, "w"))
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
    assert {"conftest.py", "pyproject.toml", "constraints.txt"} <= names
    for d in ("grader/", "reference/", "tests/", "grader/hidden/"):
        assert any(n.startswith(d) for n in names), f"no {d} in the bundle"
    for d in ("selftest/", "grader/corpus/", "benchmarks/", "docs/", ".venv/", ".git/"):
        assert not any(n.startswith(d) for n in names), f"{d} is in the bundle"
    assert not any(n.startswith("student/") for n in names)  # (the grader stages loose modules itself)
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


def test_bundle_prints_the_settings_the_docs_ask_for(capsys, tmp_path):
    """Building the bundle prints what to type into Gradescope, with the figures
    behind it, and the values agree with docs/instructors.md's: the rubric's
    points less the GPU-only problem's, 1 CPU, 1.5 GB, 20 minutes (grade
    profile, every problem); a subset of problems gets its own points."""
    from grader.rubric import load

    rub = load()
    points = sum(p.points for p in rub.problems if not p.gpu)
    lines = gradescope.settings("grade")
    assert lines[1].startswith(f"  points   {points:g}: the problems graded: "), lines
    assert f"less the {sum(p.points for p in rub.problems if p.gpu):g} of mfu" in lines[1]
    assert lines[2].startswith("  CPUs     1:") and lines[3].startswith("  memory   1.5 GB:"), lines
    assert lines[4].startswith("  timeout  20 minutes:") and "grader/budgets.toml" in lines[4], lines
    docs = (REPO / "docs" / "instructors.md").read_text()
    assert f"**Type {points:g} as the assignment's total points**" in docs
    assert "| CPUs | 1 |" in docs and "| memory | 1.5 GB |" in docs and "| timeout | 20 minutes |" in docs
    subset = gradescope.settings("dev", ["precision", "views"])
    two = sum(p.points for p in rub.problems if p.name in ("precision", "views"))
    assert subset[1] == f"  points   {two:g}: the problems graded", subset
    assert gradescope.main([str(tmp_path / "a.zip"), "--profile", "dev", "--problems", "precision,views"]) == 0
    assert "\n".join(subset) in capsys.readouterr().out


def test_bundle_carries_a_limit_on_probing(tmp_path):
    """``--full-feedback N/WINDOW`` reaches the bundle's grader arguments; a
    malformed one is refused when the bundle is built, not on a student's grade."""
    out = tmp_path / "limited.zip"
    assert gradescope.main([str(out), "--profile", "dev", "--problems", "precision", "--full-feedback", "2/1d"]) == 0
    with zipfile.ZipFile(out) as z:
        assert "--profile dev --problems precision --full-feedback 2/1d" in z.read("run_autograder").decode()
    with pytest.raises(SystemExit) as e:
        gradescope.main([str(tmp_path / "bad.zip"), "--full-feedback", "2 a day"])
    assert e.value.code == 2 and not (tmp_path / "bad.zip").exists()


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
        shutil.copytree(submission, root / "submission", symlinks=True, dirs_exist_ok=True)
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


def _modules(folder: Path) -> dict[str, bytes]:
    """The ``.py`` files of ``folder`` (the reference's, as a student's work)."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}


def _zip(path: Path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


#: Uploads as students make them; each holds the reference's modules somewhere.
UPLOADS = ["folder", "loose", "zip", "zip-of-loose", "zip-of-folder", "zip-of-loose-folder", "nested-folder",
           "repository", "zip-of-repository"]


def _submission(tmp_path: Path, kind: str) -> Path:
    sub = tmp_path / f"upload-{kind}"
    sub.mkdir(parents=True)
    mods = _modules(REPO / "reference")
    loose = {k: v for k, v in mods.items() if k != "__init__.py"}
    repo = {".git/HEAD": b"ref: refs/heads/main\n", ".git/config": b"", "README.md": b"# my lab\n",
            "tests/test_precision.py": b"def test(): pass\n", "handout.md": b"",
            **{f"student/{k}": v for k, v in mods.items()}}
    files: dict[str, bytes] = {
        "folder": {f"student/{k}": v for k, v in mods.items()},
        "loose": loose,
        "nested-folder": {f"Lab 2/lab-main/student/{k}": v for k, v in mods.items()},
        "repository": repo,
    }.get(kind, {})
    for name, data in files.items():
        (sub / name).parent.mkdir(parents=True, exist_ok=True)
        (sub / name).write_bytes(data)
    zipped = {
        "zip": {f"student/{k}": v for k, v in mods.items()},
        "zip-of-loose": loose,
        "zip-of-folder": {f"lab/student/{k}": v for k, v in mods.items()},
        "zip-of-loose-folder": {f"my work/{k}": v for k, v in loose.items()},
        "zip-of-repository": {f"lab-main/{k}": v for k, v in repo.items()},
    }.get(kind)
    if zipped is not None:
        _zip(sub / "work.zip", zipped)
    return sub


@pytest.mark.parametrize("kind", UPLOADS)
def test_run_autograder_puts_the_upload_in_place(tmp_path, bundle_zip, fake_python, kind):
    """Each layout a student uploads is found by the grader's own search (the
    fake grader runs it) and graded from a copy, never where it was uploaded."""
    root = autograder_layout(tmp_path / "autograder", bundle_zip, _submission(tmp_path, kind))
    results = run_autograder(root, fake_python)
    assert results["score"] == 10.0, results
    graded, *found = results["tests"][0]["output"].split(" ")
    assert graded.endswith("/submission") and not graded.startswith(str(root)), graded
    assert set(found) >= {"__init__.py", "precision.py", "views.py", "optimizers.py"}, found
    assert "--profile dev --problems precision,views" in results["output"]
    assert f"--submission-metadata {root}/submission_metadata.json" in results["output"]  # (for --full-feedback)
    # the upload itself is untouched; the solutions and hidden checks are the grading user's only
    assert sorted(str(p.relative_to(root / "submission")) for p in (root / "submission").rglob("*")) == \
        sorted(str(p.relative_to(tmp_path / "again" / f"upload-{kind}"))
               for p in _submission(tmp_path / "again", kind).rglob("*"))
    for d in ("reference", "grader/hidden"):
        for p in [root / "source" / d, *(root / "source" / d).rglob("*")]:
            assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is readable by others"


@pytest.mark.parametrize("kind", UPLOADS)
def test_batch_grades_an_export_of_each_upload_as_run_autograder_does(tmp_path, kind):
    """A Gradescope export holds each upload as the student made it: the batch's
    precheck hands it to the grader, whose search finds the same modules."""
    sub = _submission(tmp_path, kind)
    target, status, reason = precheck(sub, tmp_path / "staged")
    assert (status, reason) == ("graded", "") and target is not None
    folder = locate(target, tmp_path / "scratch")
    assert _modules(folder / "student").keys() >= {"__init__.py", "precision.py", "optimizers.py"}
    assert (folder / "student" / "optimizers.py").read_bytes() == (REPO / "reference" / "optimizers.py").read_bytes()


@pytest.mark.parametrize("kind", ["two-student-folders", "notes-only", "linked-module", "too-deep"])
def test_run_autograder_explains_a_layout_it_cannot_grade(tmp_path, bundle_zip, fake_python, kind):
    """An upload without the work in a layout the grader knows scores 0 with one
    sentence saying which layouts it expected (or what is wrong), never a crash;
    a link among loose modules is refused, never followed."""
    sub = tmp_path / "upload"
    sub.mkdir()
    if kind == "two-student-folders":
        for top in ("v1", "v2"):
            (sub / top / "student").mkdir(parents=True)
            (sub / top / "student" / "precision.py").write_text("x = 1\n")
    elif kind == "notes-only":
        (sub / "notes.txt").write_text("oops")
        _zip(sub / "old.zip", {"readme.txt": b"nothing here"})
    elif kind == "linked-module":
        (sub / "precision.py").symlink_to(REPO / "reference" / "precision.py")
    else:
        _zip(sub / "work.zip", {f"a/b/c/d/student/{k}": v for k, v in _modules(REPO / "reference").items()})
    root = autograder_layout(tmp_path / "autograder", bundle_zip, sub)
    results = run_autograder(root, fake_python)
    expected = {"two-student-folders": "several student/ folders in the submission (v1, v2): upload one",
                "notes-only": "not graded: neither a student/ folder nor any of the handout's modules",
                "linked-module": "precision.py is not a regular file (symbolic links are never followed)",
                "too-deep": "not graded: neither a student/ folder nor any of the handout's modules"}[kind]
    assert results["score"] == 0 and expected in results["output"], results["output"]
    assert "upload your student/ folder, a zip holding it, or the modules themselves" in results["output"] \
        or kind in ("two-student-folders", "linked-module")


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
    """The reference uploaded as a zip of its loose modules gets every point of
    the problems graded, and results.json's execution_time is the run's wall
    time (within 10%, hidden checks included); the stubs (uploaded loose) get
    none. Runs the grader of the bundle itself."""
    root = autograder_layout(tmp_path / "ok", bundle_zip, _submission(tmp_path, "zip-of-loose"))
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


@pytest.mark.full  # ./lab test: test_feedback_limit.py covers the decision, the scoring and every report
@pytest.mark.timeout(1200)
def test_run_autograder_limits_probing_with_the_real_grader(tmp_path, bundle_zip):
    """A views submission wrong only where the hidden checks look (more than 5
    dimensions), graded by run_autograder with ``--full-feedback 1/24h``: the
    first submission in the window reads the hidden check's function and input
    kind, the second reads points only, the same points."""
    views = (REPO / "reference" / "views.py").read_text()
    wrong = views.replace("    return tuple(reversed(strides))\n",
                          "    return tuple(reversed(strides)) if len(shape) <= 5 else tuple(strides)\n", 1)
    assert wrong != views
    sub = tmp_path / "upload"
    sub.mkdir()
    for name, data in _modules(REPO / "reference").items():
        (sub / name).write_bytes(data)
    (sub / "views.py").write_text(wrong)
    created = "2026-03-02T14:00:00-08:00"
    seen = {}
    for previous in (0, 1):
        root = autograder_layout(tmp_path / f"grade-{previous}", bundle_zip, sub)
        (root / "submission_metadata.json").write_text(json.dumps({
            "id": 1, "created_at": created, "previous_submissions": [
                {"submission_time": "2026-03-02T09:00:00-08:00", "score": 0.0}] * previous}))
        seen[previous] = run_autograder(root, AUTOGRADER_GRADER_ARGS="--profile dev --problems views "
                                                                     "--full-feedback 1/24h")
    full, limited = (json.dumps(seen[n]) for n in (0, 1))
    assert "test_contiguous_strides_many_dims" in full and "dims=" in full and "this is 1 of 1" in full, full
    for detail in ("test_contiguous_strides_many_dims", "dims=", "test_contiguous_strides_match_torch"):
        assert detail not in limited, detail
    assert "details are withheld" in limited and "points only this time" in limited, limited
    assert seen[0]["score"] == seen[1]["score"] < sum(t["max_score"] for t in seen[1]["tests"])

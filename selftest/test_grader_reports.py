"""The grader's outputs and inputs: Gradescope's schema, the --json schema,
JUnit, zip submissions (nested, hostile), a submission without student/, and
the workflow dispatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import jsonschema
import pytest

from grader import __main__ as entry
from grader.sandbox import SubmissionError
from grader.submission import extract_zip

REPO = Path(__file__).resolve().parent.parent

GRADESCOPE_SCHEMA = {
    "type": "object",
    "required": ["score", "execution_time", "output", "tests"],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number"},
        "output": {"type": "string"},
        "tests": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "score", "max_score", "status", "output", "visibility"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"}, "score": {"type": "number"}, "max_score": {"type": "number"},
                "status": {"enum": ["passed", "failed"]}, "output": {"type": "string"},
                "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
            },
        }},
    },
}

STATUSES = ["passed", "failed", "error", "timeout", "not run on a GPU", "no checks"]

RESULT_SCHEMA = {
    "type": "object",
    "required": ["submission", "score", "max_score", "gpu_points_not_run", "execution_time", "sandbox",
                 "profile", "checks", "problems"],
    "properties": {
        "submission": {"type": "string"}, "score": {"type": "number"}, "max_score": {"type": "number"},
        "gpu_points_not_run": {"type": "number"}, "execution_time": {"type": "number"},
        "sandbox": {"type": "string"}, "profile": {"enum": ["dev", "ci", "grade"]},
        "problems": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "section", "score", "max_score", "status", "visibility", "output", "checks",
                         "items"],
            "properties": {
                "status": {"enum": STATUSES},
                "checks": {"type": "array", "items": {"type": "object", "required": ["test", "outcome", "message"]}},
                "items": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "required": ["name", "points", "score", "status", "failure"],
                    "properties": {
                        "name": {"type": "string"}, "points": {"type": "number", "exclusiveMinimum": 0},
                        "score": {"type": "number", "minimum": 0}, "status": {"enum": STATUSES},
                        "failure": {"oneOf": [{"type": "null"}, {
                            "type": "object",
                            "required": ["test", "hidden", "property_test", "property", "input_kind", "message",
                                         "reproduce", "withheld"],
                            "properties": {"input_kind": {"type": "object",
                                                          "additionalProperties": {"type": "string"}}},
                        }]},
                    },
                }},
            },
        }},
    },
}


def run_grader(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})


def _zip(path: Path, members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, target)
    return path


def test_zip_submission_all_reports(tmp_path):
    """A zip nesting student/ one folder deep (as exports do), graded into every format."""
    src = (REPO / "reference" / "views.py").read_text()
    archive = _zip(tmp_path / "sub.zip", {
        "export-main/student/__init__.py": b"",
        "export-main/student/views.py": src.replace("from ._validate", "from ._validate").encode(),
        "export-main/student/_validate.py": (REPO / "reference" / "_validate.py").read_bytes(),
        "__MACOSX/._junk": b"junk",
    }, symlinks={"export-main/student/evil.py": "/etc/passwd"})
    files = {k: tmp_path / f"out.{k}" for k in ("json", "gs.json", "xml")}
    proc = run_grader(str(archive), "--problems", "views,precision", "--profile", "dev", "--json", str(files["json"]),
                      "--gradescope", str(files["gs.json"]), "--junit", str(files["xml"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(files["json"].read_text())
    jsonschema.validate(result, RESULT_SCHEMA)
    by = {p["name"]: p for p in result["problems"]}
    assert by["views"]["status"] == "passed", by["views"]["output"]
    assert by["precision"]["status"] == "error" and by["precision"]["score"] == 0, by["precision"]
    gs = json.loads(files["gs.json"].read_text())
    jsonschema.validate(gs, GRADESCOPE_SCHEMA)
    assert gs["score"] == 10 and {t["status"] for t in gs["tests"]} == {"passed", "failed"}
    # one Gradescope test and one JUnit testcase per rubric item, named "problem §section: item"
    assert [t["name"] for t in gs["tests"]] == [f"{p['name']} §{p['section']}: {i['name']}"
                                                for p in result["problems"] for i in p["items"]]
    assert all(sum(i["score"] for i in p["items"]) == p["score"] for p in result["problems"])
    suite = ET.parse(files["xml"]).getroot()
    assert suite.tag == "testsuite" and suite.get("failures") == str(len(by["precision"]["items"]))
    assert suite.get("tests") == str(len(gs["tests"]))
    assert not list(tmp_path.glob(".*.tmp*")), "atomic writes left temporaries"


def test_gpu_problem_in_gradescope_output(tmp_path):
    """Where there is no GPU, the GPU-only problem appears with score 0, its max_score, and why."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    gs = tmp_path / "gs.json"
    proc = run_grader("--problems", "mfu", "--gradescope", str(gs), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(gs.read_text())
    jsonschema.validate(doc, GRADESCOPE_SCHEMA)
    tests = doc["tests"]
    assert tests and all(t["score"] == 0 and t["max_score"] > 0 and "not run" in t["output"] for t in tests)
    assert all(t["name"].startswith("mfu §") for t in tests)
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["max_score"] == 0 and result["gpu_points_not_run"] == sum(t["max_score"] for t in tests)
    assert "need a GPU" in proc.stdout and "on CPU" in proc.stdout


def test_missing_student_is_an_error_result(tmp_path):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "r.json"
    proc = run_grader(str(tmp_path / "empty"), "--problems", "precision", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["score"] == 0 and "student/" in result["error"]
    assert result["problems"][0]["status"] == "error"


def test_bad_arguments_exit_2(tmp_path):
    assert run_grader("--problems", "nonesuch").returncode == 2
    out = tmp_path / "r.json"
    proc = run_grader(str(tmp_path / "does-not-exist"), "--json", str(out))
    assert proc.returncode == 2 and "does not exist" in proc.stderr, (proc.returncode, proc.stderr)
    assert not out.exists() and "score" not in proc.stdout, proc.stdout  # no table of zeros


@pytest.mark.parametrize("name", ["../evil.py", "/abs/evil.py", "student/../../evil.py"])
def test_zip_path_traversal_is_refused(tmp_path, name):
    archive = _zip(tmp_path / "a.zip", {"student/__init__.py": b"", name: b"x"})
    with pytest.raises(SubmissionError, match="unsafe path"):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()


def test_zip_bomb_is_capped(tmp_path):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("student/__init__.py", b"")
        zf.writestr("student/big.bin", b"\0" * (80 << 20))
    with pytest.raises(SubmissionError, match="MiB"):
        extract_zip(archive, tmp_path / "out")


def test_zip_symlinks_are_dropped(tmp_path):
    archive = _zip(tmp_path / "a.zip", {"student/__init__.py": b""}, symlinks={"student/x.py": "/etc/passwd"})
    folder = extract_zip(archive, tmp_path / "out")
    assert not (folder / "student" / "x.py").exists()


def test_workflow_dispatch_reports_missing_modules(monkeypatch, capsys):
    monkeypatch.setitem(entry._WORKFLOWS, "batch", "grader._no_such_module")
    assert entry.main(["batch", "x"]) == 1
    assert "not available" in capsys.readouterr().err

"""The grader's outputs and inputs: Gradescope's schema, the --json schema,
JUnit, zip submissions (nested, hostile), a submission without student/, and
the workflow dispatch."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import jsonschema
import pytest

from grader import __main__ as entry
from grader.staging.submission import extract_zip
from grader.staging.workcopy import SubmissionError

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
            # status is optional in Gradescope's format: a test left out of the totals
            # (max_score 0: needs a GPU, no checks yet) has none, so it never shows as failed
            "required": ["name", "score", "max_score", "output", "visibility"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"}, "score": {"type": "number"}, "max_score": {"type": "number"},
                "status": {"enum": ["passed", "failed"]}, "output": {"type": "string"},
                "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
            },
        }},
        # Gradescope's leaderboard entries (its "Leaderboards" page): where the MFU was graded
        "leaderboard": {"type": "array", "items": {
            "type": "object", "required": ["name", "value"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1}, "value": {"type": ["number", "string"]},
                           "order": {"enum": ["asc", "desc"]}},
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
                "workers": {"type": "integer", "minimum": 0},  # with --reveal-hidden only
                "checks": {"type": "array", "items": {"type": "object", "required": ["test", "outcome", "message"]}},
                "items": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "required": ["name", "points", "score", "status", "failure"],
                    "properties": {
                        "name": {"type": "string"}, "points": {"type": "number", "minimum": 0},
                        "not_counted": {"type": "number", "minimum": 0},
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
    """Where there is no GPU, the GPU-only problem's items appear with max_score 0,
    no status (never failed) and "needs a GPU; not counted" with their points."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    gs = tmp_path / "gs.json"
    proc = run_grader("--problems", "mfu", "--gradescope", str(gs), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(gs.read_text())
    jsonschema.validate(doc, GRADESCOPE_SCHEMA)
    tests = doc["tests"]
    assert tests and all(t["score"] == t["max_score"] == 0 and "status" not in t for t in tests), tests
    assert all(t["output"].startswith("[needs a GPU; not counted]") for t in tests), tests
    assert all(t["name"].startswith("mfu §") for t in tests)
    result = json.loads((tmp_path / "r.json").read_text())
    (mfu,) = result["problems"]
    assert result["max_score"] == 0 and result["gpu_points_not_run"] == mfu["not_counted"] == sum(
        i["not_counted"] for i in mfu["items"]) > 0
    assert "need a GPU: not counted" in proc.stdout and "on CPU" in proc.stdout


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
    """A workflow whose module this checkout lacks (the student release has no
    grader/instructor) says so, exit 1, instead of a traceback."""
    import importlib

    real = importlib.import_module

    def missing(name, *args, **kwargs):
        if name == "grader.instructor.batch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert entry.main(["batch", "x"]) == 1
    assert "not available" in capsys.readouterr().err


# --------------------------------------------------------------------------- every report adds up
_ROW = re.compile(r"\s(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\s+(passed|failed|error|timeout|grader error|not run on a GPU"
                  r"|not run|no checks)(?:\s|$)")
_SUMMARY = re.compile(r"^score (\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)")


def _case_submission(case: str, tmp_path: Path) -> tuple[str, list[str]]:
    """The submission and extra arguments of one case of :func:`test_every_report_adds_up`."""
    if case == "reference":  # revealed: the instructors' figures too
        shutil.copytree(REPO / "reference", tmp_path / "ref" / "student")
        return str(tmp_path / "ref"), ["--problems", "views", "--reveal-hidden"]
    if case == "stubs":  # rlimits: said once (the sandbox line), and public checks only
        return str(REPO), ["--problems", "precision,mfu", "--sandbox", "rlimits"]
    if case == "does not import":  # found by compiling: no check runs
        shutil.copytree(REPO / "reference", tmp_path / "sub" / "student")
        with open(tmp_path / "sub" / "student" / "views.py", "a") as f:
            f.write("\ndef broken(:\n")
        return str(tmp_path / "sub"), ["--problems", "views,mfu"]
    return str(REPO / "grader" / "corpus" / "cheat" / "bad_archives" / "corrupt_member.zip"), [
        "--problems", "precision,views,mfu"]


def _table_rows(stdout: str) -> tuple[list[tuple[float, float, str]], tuple[float, float]]:
    """The table's problem rows (score, max, status) and its summary's (score, max)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("-----")) + 1
    end = next(i for i, ln in enumerate(lines) if _SUMMARY.match(ln))
    rows = [_ROW.search(ln) for ln in lines[start:end] if not ln.startswith(" ")]  # item rows and wrapped cells indent
    assert all(rows), lines[start:end]
    total = _SUMMARY.match(lines[end])
    assert total
    return [(float(m[1]), float(m[2]), m[3]) for m in rows if m], (float(total[1]), float(total[2]))


@pytest.mark.parametrize("case", ["reference", "stubs", "unreadable", "does not import"])
def test_every_report_adds_up(case, tmp_path):
    """Parses every report (--json, Gradescope, JUnit, the table) and checks that
    per-test scores and maxima add up to the totals, that points not counted
    (a GPU problem on a machine without one) are never a failed test, that no
    top-level line repeats, that an unreadable zip is one row or message, and
    that a module that does not import says where and why once per report."""
    import torch

    sub, extra = _case_submission(case, tmp_path)
    files = {k: tmp_path / f"out.{k}" for k in ("json", "gs.json", "xml")}
    proc = run_grader(sub, "--profile", "dev", "--json", str(files["json"]), "--gradescope", str(files["gs.json"]),
                      "--junit", str(files["xml"]), "--no-progress", *extra)
    # No report failed to be written (the only lines on stderr are notes about the machine, for its operator).
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("grader: note: ")]
    assert proc.returncode == 0 and not errors, proc.stderr[-3000:]
    result, gs = json.loads(files["json"].read_text()), json.loads(files["gs.json"].read_text())
    jsonschema.validate(result, RESULT_SCHEMA)
    jsonschema.validate(gs, GRADESCOPE_SCHEMA)
    suite = ET.parse(files["xml"]).getroot()
    total, most = result["score"], result["max_score"]
    if case == "stubs":  # without filesystem isolation no hidden check runs (the submission could read them)
        ran = [c["test"] for p in result["problems"] for c in p["checks"]]
        assert ran and not [t for t in ran if not t.startswith("tests/")], ran
        assert result["checks"].startswith("public checks only (hidden checks need filesystem isolation")

    # --json: items add up to their problem, problems to the totals; not counted is max 0
    for p in result["problems"]:
        assert sum(i["score"] for i in p["items"]) == p["score"], p["name"]
        assert sum(i["points"] for i in p["items"]) == p["max_score"], p["name"]
        if p["status"] in ("not run on a GPU", "no checks"):
            assert p["max_score"] == 0 and p["not_counted"] > 0, p
    assert sum(p["score"] for p in result["problems"]) == total
    assert sum(p["max_score"] for p in result["problems"]) == most
    assert result["gpu_points_not_run"] == sum(p["not_counted"] for p in result["problems"]
                                               if p["status"] == "not run on a GPU")

    # Gradescope: the tests add up; none left out of the totals is failed; no line twice
    assert gs["score"] == total == sum(t["score"] for t in gs["tests"])
    if case != "unreadable":
        assert sum(t["max_score"] for t in gs["tests"]) == most
    for t in gs["tests"]:
        if "not counted" in t["output"] or "not run on a GPU" in t["output"]:
            assert t["max_score"] == 0 and "status" not in t, t
        else:
            assert t["status"] in ("passed", "failed") and t["max_score"] > 0, t
    top = gs["output"].splitlines()
    assert len(top) == len(set(top)) and not [a for a in top for b in top if a != b and a in b], top

    # JUnit: the testcases add up to the suite's totals; not counted is skipped
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (float(props["score"]), float(props["max_score"])) == (total, most)
    cases = suite.findall("testcase")
    case_props = [{p.get("name"): float(p.get("value")) for p in c.find("properties")} for c in cases]
    assert sum(c["score"] for c in case_props) == total and sum(c["max_score"] for c in case_props) == most
    for c, cp in zip(cases, case_props, strict=True):
        if c.find("skipped") is not None:
            assert cp["max_score"] == 0 and c.find("failure") is None, ET.tostring(c)
    assert suite.get("tests") == str(len(cases))

    # the table: its problem rows add up to its summary; no line of the header twice
    rows, (t_score, t_max) = _table_rows(proc.stdout)
    assert (t_score, t_max) == (total, most) == (sum(r[0] for r in rows), sum(r[1] for r in rows))
    header = proc.stdout.partition("problem ")[0].splitlines()  # what comes above the table
    assert len(header) == len(set(header)), header
    assert proc.stdout.count("rlimits only") <= 1, proc.stdout

    if case == "unreadable":  # one row, one testcase, no tests: the reason once per report
        assert result["error"] and len(rows) == 1 and not gs["tests"] and len(cases) == 1
        assert gs["output"].count(result["error"]) == 1 and proc.stdout.count("is not a readable zip") <= 1 \
            and proc.stdout.count(result["error"][:60]) == 1, proc.stdout
    if case == "stubs" and not torch.cuda.is_available():
        mfu = next(p for p in result["problems"] if p["name"] == "mfu")
        assert mfu["status"] == "not run on a GPU" and mfu["not_counted"] == 5
        assert rows[1][1:] == (0.0, "not run on a GPU"), rows  # (precision, mfu): mfu is 0/0, not failed
        assert any(c.get("classname") == "mfu" and c.find("skipped") is not None for c in cases)
    if case == "reference":
        assert total == most > 0 and all(t["status"] == "passed" for t in gs["tests"])
        for p in result["problems"]:
            # seconds on the trusted side: none negative, a problem's (its public checks') at least its longest's
            # (each rounded: to the ms, a check's to 0.1 ms)
            public = [c["duration"] for c in p["checks"] if c["test"].startswith("tests/")]
            assert public and all(c["duration"] >= 0 for c in p["checks"]), p["checks"]
            assert p["time"] >= max(public) - 0.001, (p["time"], max(public))
            if result["checks"] == "public + hidden checks":  # a worker in each phase, their records combined
                assert p["workers"] >= 2, p
        if not any("regraded alone" in n for n in result["notes"]):  # each process's workers, problem by problem
            assert sum(p["workers"] for p in result["problems"]) == sum(c["workers"] for c in result["costs"])
    if case == "does not import":
        (line,) = result["import_errors"]
        assert re.fullmatch(r"student/views\.py, line \d+: SyntaxError: invalid syntax; not graded: views", line)
        assert gs["output"].count(line) == proc.stdout.count(line) == 1, proc.stdout
        views = next(p for p in result["problems"] if p["name"] == "views")
        assert views["status"] == "error" and views["checks"] == [] and total == 0
        # the problem's words once in the details, not once per item
        assert proc.stdout.count(views["output"]) == 1, proc.stdout
    if case == "stubs":  # what failed, and the command the student runs in their checkout
        # every stub of the problem, in the order pytest lists them (by section, then name)
        assert "not implemented yet: bytes_per_element, float_format, overflows, tensor_bytes, underflows" \
            in " ".join(proc.stdout.split())
        assert "bytes_per_element: not implemented yet (handout §1.1)" in gs["tests"][0]["output"]
        reproduce = [i["failure"]["reproduce"] for p in result["problems"] for i in p["items"] if i["failure"]]
        assert reproduce and all(re.fullmatch(r"pytest tests/test_\w+\.py::test_\w+", r) for r in reproduce), \
            reproduce
        assert "--impl" not in json.dumps(gs) and "--impl" not in proc.stdout

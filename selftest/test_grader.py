"""The grader's verdicts: the reference scores full marks (of the points
available on this machine), the untouched stubs score zero, each known-wrong
submission loses the points of the rubric items it breaks and keeps the others,
and a bug only the hidden checks see is caught by them, with feedback that
names the property and never the values."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.corpus import build_wrong, wrong_submissions
from grader.engine import hidden_available
from grader.rubric import load

REPO = Path(__file__).resolve().parent.parent
RUBRIC = load()
WRONG = wrong_submissions()


def grade(submission: Path | None, tmp_path: Path, *args: str, timeout: int = 900) -> tuple[dict, str]:
    """Run ``python -m grader`` as a user would; return (--json document, stdout)."""
    out = tmp_path / "result.json"
    argv = [sys.executable, "-m", "grader", *([str(submission)] if submission else []), "--json", str(out),
            "--profile", "dev", *args]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"the grader exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text()), proc.stdout


def reference_submission(dest: Path) -> Path:
    shutil.copytree(REPO / "reference", dest / "student", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _problems(result: dict) -> dict[str, dict]:
    return {p["name"]: p for p in result["problems"]}


def _dependents(module: str) -> set[str]:
    """Problems whose reference module imports ``module`` (they share its code)."""
    out = set()
    for p in RUBRIC.problems:
        src = REPO / "reference" / f"{p.name}.py"
        if src.is_file() and re.search(rf"^from \.{module} import", src.read_text(), flags=re.M):
            out.add(p.name)
    return out


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
def test_reference_scores_full_marks(tmp_path):
    result, stdout = grade(reference_submission(tmp_path), tmp_path)
    graded = [p for p in result["problems"] if p["status"] not in ("not run on a GPU", "no checks")]
    bad = {p["name"]: (p["status"], p["output"][:1500]) for p in graded if p["status"] != "passed"}
    assert not bad, f"the reference loses points:\n{json.dumps(bad, indent=1)}"
    assert result["score"] == result["max_score"] == sum(p["max_score"] for p in graded) > 0
    assert result["gpu_points_not_run"] == sum(
        p["max_score"] for p in result["problems"] if p["status"] == "not run on a GPU")
    for p in graded:
        assert all(i["status"] == "passed" and i["score"] == i["points"] for i in p["items"]), p["items"]
        assert re.search(r"\(\d+ public, [1-9]\d* hidden\)", p["output"]) or not any(
            c.startswith("grader/") and (REPO / c).is_file() for c in RUBRIC.problem(p["name"]).checks
        ), f"{p['name']}: its hidden checks did not run: {p['output']}"
    assert "score " in stdout


def test_stubs_score_zero_with_no_arguments(tmp_path):
    """``python -m grader`` grades this repository's student/ (the stubs): all zero."""
    result, stdout = grade(None, tmp_path)
    assert result["submission"] == str(REPO)
    assert result["score"] == 0
    for p in result["problems"]:
        assert p["score"] == 0
        assert p["status"] in ("failed", "error", "not run on a GPU", "no checks"), p
        if p["status"] == "failed":
            assert "NotImplementedError" in p["output"] and "Reproduce: pytest tests/" in p["output"], p["output"]
    assert re.search(r"^score 0/\d+", stdout, flags=re.M), stdout
    assert "precision" in stdout and "points" in stdout


def test_wrong_corpus_breaks_name_items_of_its_problem():
    for sub in WRONG:
        names = [i.name for i in RUBRIC.problem(sub.problem).items]
        unknown = [b for b in sub.breaks if b not in names]
        assert not unknown, f"{sub.name}: breaks names items {unknown} that {sub.problem} does not have ({names})"
        assert len(set(sub.breaks)) == len(sub.breaks) < len(names) or not sub.breaks, (
            f"{sub.name}: breaks must list distinct items, and not all of them (partial credit is the point)")


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
@pytest.mark.parametrize("sub", WRONG, ids=[s.name for s in WRONG])
def test_wrong_submission_loses_exactly_its_items(sub, tmp_path):
    """The bug costs the points of the items it breaks (its ``breaks`` list) and
    the submission keeps the problem's other items; an entry without the list
    loses some of its problem's points. Other problems keep theirs: it is graded
    next to one problem whose module does not import the patched file (problems
    that do import it, e.g. memory uses precision.bytes_per_element, share the
    bug and may lose points too, as they would for a student)."""
    folder = build_wrong(sub, tmp_path)
    module = Path(sub.patches[0][0]).stem
    independent = [p.name for p in RUBRIC.problems
                   if p.name not in _dependents(module) | {sub.problem, module} and not p.gpu
                   and (REPO / "tests" / f"test_{p.name}.py").is_file()]
    neighbour = "views" if "views" in independent else independent[0]
    result, _ = grade(folder, tmp_path, "--problems", f"{sub.problem},{neighbour}", "--reveal-hidden")
    by_name = _problems(result)
    mine = by_name[sub.problem]
    assert mine["score"] < mine["max_score"], f"{sub.name} keeps all its points: {mine}"
    assert mine["status"] in ("failed", "error"), mine
    assert by_name[neighbour]["status"] == "passed", f"{sub.name} also costs {neighbour}: {by_name[neighbour]}"
    assert result["score"] == result["max_score"] - (mine["max_score"] - mine["score"])
    items = {i["name"]: i for i in mine["items"]}
    assert sum(i["score"] for i in items.values()) == mine["score"]
    kept = {n: (i["status"], i["score"]) for n, i in items.items() if n in sub.breaks and i["score"] > 0}
    assert not kept, f"{sub.name} keeps the points of items it breaks: {kept}\n{mine['output']}"
    for name in sub.breaks:
        assert items[name]["failure"] or items[name]["note"], f"{sub.name}: {name} lost without a reason"
    # A failed check that no single item holds costs every item (a rubric gap that
    # selftest/test_rubric_items.py reports): the other items' points prove nothing then.
    gap = [c["test"] for c in mine["checks"] if c["outcome"] not in ("passed", "skipped")
           and c["test"].split("::")[-1].split("[")[0] in mine["unmapped"]]
    if sub.breaks and not gap:
        lost = {n: (i["status"], i["score"], i["failure"]) for n, i in items.items()
                if n not in sub.breaks and i["score"] < i["points"]}
        assert not lost, f"{sub.name} also loses items it does not break (add them to breaks?): {lost}"
        assert mine["score"] == mine["max_score"] - sum(items[n]["points"] for n in sub.breaks)


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
def test_hidden_checks_catch_what_public_tests_miss(tmp_path):
    """Double rounding (value -> float32 -> dtype) passes every public test, whose
    values are float32-exact; the hidden checks use float64 values."""
    folder = reference_submission(tmp_path / "sub")
    target = folder / "student" / "precision.py"
    text = target.read_text()
    find = '    v = abs(require_number("value", value))\n    _, e, m, _ = _layout(dtype)\n'
    assert text.count(find) == 1
    target.write_text(text.replace(find, find + "    return torch.tensor(v).to(dtype).item() == 0.0\n"))
    public, stdout = grade(folder, tmp_path, "--problems", "precision", "--public-only")
    assert _problems(public)["precision"]["status"] == "passed", _problems(public)["precision"]["output"]
    assert public["checks"].startswith("public checks only") and "checks: public checks only" in stdout
    result, stdout = grade(folder, tmp_path, "--problems", "precision")
    assert result["checks"] == "public + hidden checks" and "checks: public + hidden checks" in stdout
    p = _problems(result)["precision"]
    assert 0 <= p["score"] < p["max_score"] and p["status"] == "failed", p
    items = {i["name"]: i for i in p["items"]}
    assert items["underflows and overflows"]["score"] == 0, items
    failure = items["underflows and overflows"]["failure"]
    assert failure["hidden"] and failure["withheld"] and not failure["message"] and not failure["example"], failure
    assert "::" not in failure["test"] and "[" not in failure["test"], failure
    assert "A hidden check failed" in p["output"] and "withheld" in p["output"], p["output"]
    if failure["property_test"]:  # the property: the public test it extends, and what that test states
        assert failure["property_test"].split("::")[-1] in p["output"], p["output"]
        assert failure["reproduce"].startswith(f"pytest {failure['property_test']} --impl")
    for leak in ("Falsifying", "2.98023", "e-08", "65519", "grader/hidden"):
        assert leak not in stdout + p["output"] + json.dumps(failure), f"hidden details leaked: {leak}"
    assert all(c["message"] in ("", "details withheld") for c in p["checks"] if c["test"].startswith("hidden"))
    revealed, _ = grade(folder, tmp_path, "--problems", "precision", "--reveal-hidden")
    assert "Falsifying" in _problems(revealed)["precision"]["output"] or "grader/hidden" in _problems(
        revealed)["precision"]["output"]

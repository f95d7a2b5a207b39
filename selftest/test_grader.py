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

from grader.corpus import WrongSubmission, build_wrong, wrong_submissions
from grader.engine import hidden_available
from grader.rubric import load
from selftest.sampling import sample

REPO = Path(__file__).resolve().parent.parent
RUBRIC = load()
WRONG = wrong_submissions()
#: graded through the whole grader: a sample of the entries whose breaks list
#: says which items they lose (selftest/sampling.py; all with LAB_FULL_CORPUS=1)
QUICK_PROBLEMS = ("precision", "views", "memory", "einops_ops", "flops", "model")
GRADED_WRONG = [pytest.param(s, id=s.name, marks=() if s.problem in QUICK_PROBLEMS else pytest.mark.full)
                for s in sample([s for s in WRONG if s.breaks], 30, lambda s: s.problem)]


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
@pytest.mark.timeout(1200)  # every problem: 2 min 20 s alone, much more next to other selftests on 2 cores
def test_reference_scores_full_marks(tmp_path):
    result, stdout = grade(reference_submission(tmp_path), tmp_path)
    graded = [p for p in result["problems"] if p["status"] not in ("not run on a GPU", "no checks")]
    bad = {p["name"]: (p["status"], p["output"][:1500]) for p in graded if p["status"] != "passed"}
    assert not bad, f"the reference loses points:\n{json.dumps(bad, indent=1)}"
    assert result["score"] == result["max_score"] == sum(p["max_score"] for p in graded) > 0
    assert result["gpu_points_not_run"] == sum(  # left out of the totals: max_score 0, the points not counted
        p["not_counted"] for p in result["problems"] if p["status"] == "not run on a GPU")
    for p in graded:
        assert all(i["status"] == "passed" and i["score"] == i["points"] for i in p["items"]), p["items"]
        assert re.search(r"\(\d+ public, [1-9]\d* hidden\)", p["output"]) or not any(
            c.startswith("grader/") and (REPO / c).is_file() for c in RUBRIC.problem(p["name"]).files
        ), f"{p['name']}: its hidden checks did not run: {p['output']}"
    assert "score " in stdout


#: What ./lab grade may print on the untouched stubs.
STUB_GRADE_LINES = 60


@pytest.mark.timeout(1200)
def test_stubs_score_zero_with_no_arguments(tmp_path):
    """``python -m grader`` grades this repository's student/ (the stubs): all zero."""
    result, stdout = grade(None, tmp_path)
    assert result["submission"] == str(REPO)
    assert result["score"] == 0
    for p in result["problems"]:
        assert p["score"] == 0
        assert p["status"] in ("failed", "error", "not run on a GPU", "no checks"), p
        if p["status"] == "failed":
            # a stub's failure is one line per item (as pytest folds it); the command stays in the item
            assert re.search(r"^\[0/[\d.]+\] .*\bnot implemented yet \(handout §[\d.]+\)$", p["output"], re.M), \
                p["output"]
            failed = [i for i in p["items"] if i["failure"]]
            assert failed and all(i["failure"]["reproduce"].startswith("pytest tests/") for i in failed), failed
    assert re.search(r"^score 0/\d+", stdout, flags=re.M), stdout
    assert "precision" in stdout and "points" in stdout
    # Short to read (./lab grade is this command): the table and what to do next fit one screen, the
    # progress display of a terminal included (a line per problem and phase, public and hidden checks).
    assert len(stdout.splitlines()) + 2 * len(result["problems"]) <= STUB_GRADE_LINES, stdout
    for p in result["problems"]:
        if p["status"] != "not run on a GPU":  # every stub named in its row, none in a block of its own
            assert f"{p['name']}: " not in stdout.split("\nscore ")[1], stdout


def test_wrong_corpus_breaks_name_items_of_its_problem():
    for sub in WRONG:
        names = [i.name for i in RUBRIC.problem(sub.problem).items]
        unknown = [b for b in sub.breaks if b not in names]
        assert not unknown, f"{sub.name}: breaks names items {unknown} that {sub.problem} does not have ({names})"
        assert len(set(sub.breaks)) == len(sub.breaks) < len(names) or not sub.breaks, (
            f"{sub.name}: breaks must list distinct items, and not all of them (partial credit is the point)")


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
@pytest.mark.parametrize("sub", GRADED_WRONG)
def test_wrong_submission_loses_exactly_its_items(sub, tmp_path):
    """The bug costs the points of the items it breaks (its ``breaks`` list) and
    the submission keeps the problem's other items; an entry without the list
    loses some of its problem's points. Other problems keep theirs: it is graded
    next to one problem whose module does not import the patched file (problems
    that do import it, e.g. memory uses precision.bytes_per_element, share the
    bug and may lose points too, as they would for a student)."""
    _loses_exactly_its_items(sub, tmp_path)


def _loses_exactly_its_items(sub: WrongSubmission, tmp_path: Path) -> None:
    """Grade ``sub`` beside an independent problem and check what it lost (see the test above)."""
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


#: One mistake in one optimizer class each (the five found by writers from the
#: handout, and one in Adam): graded alone, each costs that class's item only.
#: CI grades one; LAB_FULL_CORPUS=1 all six.
ONE_CLASS = {"SGD": "optimizers-sgd_reads_default_lr", "SGDMomentum": "optimizers-momentum_zero_init",
             "AdaGrad": "optimizers-adagrad_lr_decay_from_t", "RMSProp": "optimizers-rmsprop_state_float32",
             "Adam": "optimizers-adam_decay_in_place_grad", "AdamW": "optimizers-adamw_decay_after_update"}


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
@pytest.mark.parametrize("klass", [pytest.param(k, marks=() if k == "SGD" else pytest.mark.full) for k in ONE_CLASS])
def test_one_wrong_optimizer_class_keeps_the_other_five_their_points(klass, tmp_path):
    (sub,) = [s for s in WRONG if s.name == ONE_CLASS[klass]]
    assert sub.breaks == (klass,), sub.breaks
    _loses_exactly_its_items(sub, tmp_path)  # its item lost, every other item kept


@pytest.mark.skipif(not hidden_available(), reason="needs reference/ and the hidden checks")
def test_hidden_checks_catch_what_public_tests_miss(tmp_path):
    """A bug confined to inputs only a hidden check draws: ``overflows`` says an
    int never overflows. The public tests give it floats; the hidden
    ``test_integer_values`` extends them to ints (a real number, as the
    docstring says). (Double rounding through float32 served here until the
    public tests took float64 values too.)"""
    folder = reference_submission(tmp_path / "sub")
    target = folder / "student" / "precision.py"
    text = target.read_text()
    find = '    v = abs(require_number("value", value))\n    fmt = float_format(dtype)\n'
    assert text.count(find) == 1
    target.write_text(text.replace(find, find + "    if isinstance(value, int):\n        return False\n"))
    public, stdout = grade(folder, tmp_path, "--problems", "precision", "--public-only")
    assert _problems(public)["precision"]["status"] == "passed", _problems(public)["precision"]["output"]
    assert public["checks"].startswith("public checks only") and "checks: public checks only" in stdout
    result, stdout = grade(folder, tmp_path, "--problems", "precision")
    assert result["checks"] == "public + hidden checks" and "checks: public + hidden checks" in stdout
    p = _problems(result)["precision"]
    assert 0 <= p["score"] < p["max_score"] and p["status"] == "failed", p
    items = {i["name"]: i for i in p["items"]}
    assert items["overflows"]["score"] == 0, items  # the item of the public test it extends
    failure = items["overflows"]["failure"]
    assert failure["hidden"] and failure["withheld"] and not failure["message"] and not failure["example"], failure
    assert "::" not in failure["test"] and "[" not in failure["test"], failure
    assert "A hidden check failed" in p["output"] and "withheld" in p["output"], p["output"]
    if failure["property_test"]:  # the property: the public test it extends, and what that test states
        assert failure["property_test"].split("::")[-1] in p["output"], p["output"]
        assert failure["reproduce"] == f"pytest {failure['property_test']}"  # as the student runs it
    for leak in ("Falsifying", "2.98023", "e-08", "65519", "grader/hidden"):
        assert leak not in stdout + p["output"] + json.dumps(failure), f"hidden details leaked: {leak}"
    assert all(c["message"] in ("", "details withheld") for c in p["checks"] if c["test"].startswith("hidden"))
    revealed, _ = grade(folder, tmp_path, "--problems", "precision", "--reveal-hidden")
    assert "Falsifying" in _problems(revealed)["precision"]["output"] or "grader/hidden" in _problems(
        revealed)["precision"]["output"]


def test_phases_concatenate_in_file_order_and_a_lost_phase_is_a_grader_error():
    """A problem's public and hidden phases: its checks come in its files'
    order whichever phase came first, its worker records are combined field by
    field, and a phase whose process ended without its run makes the problem
    a grader error (saying why), not vanish."""
    from grader.protocol import ProblemRun, WorkerRecord
    from grader.scoring import checks_in_file_order, score_problem

    files = ["tests/test_x.py", "grader/hidden/test_x_hidden.py"]

    def test(f: str, name: str) -> dict:
        return {"test": f"{f}::{name}", "problem": "x", "file": f, "outcome": "passed", "duration": 1.0}

    hidden = ProblemRun.from_json({"problem": "x", "hidden": True, "checks": [test(files[1], "h")], "worker": {
        "calls": 2, "crashes": ["boom"], "timeouts": [], "cut": "", "seccomp": "on", "started": True,
        "cpu_used": 1.5, "cpu_budget": 10.0, "reference_cpu": 1.0, "workers": 1, "peak_bytes": 7}})
    public = ProblemRun.from_json({"problem": "x", "hidden": False,
                                   "checks": [test(files[0], "a"), test(files[0], "b")],
                                   "worker": {"calls": 3, "timeouts": ["slow"], "cut": "ran out", "seccomp": "on",
                                              "started": True, "cpu_used": 2.0, "cpu_budget": 20.0,
                                              "reference_cpu": 2.0, "workers": 2, "peak_bytes": 5}})
    assert [c.test for c in checks_in_file_order([hidden, public], files)] == [
        "tests/test_x.py::a", "tests/test_x.py::b", "grader/hidden/test_x_hidden.py::h"]
    assert public.worker is not None and hidden.worker is not None
    state = WorkerRecord.combine([public.worker, hidden.worker])
    assert (state.calls, state.crashes, state.timeouts, state.cut, state.seccomp) == (
        5, ["boom"], ["slow"], "ran out", "on")
    assert (state.cpu_used, state.cpu_budget, state.reference_cpu, state.workers, state.peak_bytes) == (
        3.5, 30.0, 3.0, 3, 7)
    views = RUBRIC.problem("views")
    lost = ProblemRun("views", True, lost="the grader's test run ended without results (exit 1)")
    res = score_problem(views, views.check_files(REPO), [ProblemRun("views", False), lost], "", False)
    assert res.status == "grader error" and "ended without results (exit 1)" in res.output, res.output

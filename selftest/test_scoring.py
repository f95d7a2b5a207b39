"""Partial credit and feedback, on synthetic outcomes (no pytest run, no worker):
items score independently, hidden checks count toward the item of the public
test they extend, a check no item holds costs every item, a gate item's
failure withholds the others, GPU-only items are "not run" rather than failed,
and the reports carry the first failure as fields, never the hidden values."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from grader import outcomes, protocol, results, scoring
from grader.report import platforms, render
from grader.report import table as terminal
from grader.sandbox.errors import ProtocolError, WorkerCrashed
from grader.util import REPO
from selftest.scored import HIDDEN, PUBLIC, RUBRIC, check, problem_of, run_of
from tests import wire


def _outcome(**tests: dict[str, Any]) -> dict[str, Any]:
    return {"checks": {k.replace("__", "::"): v for k, v in tests.items()}, "problems": {"optimizers": {}}}


def _score(problem, outcome, reveal: bool = False) -> results.ProblemResult:
    return scoring.score_problem(problem, problem.check_files(REPO), [run_of(outcome)], gpu_device="",
                                 reveal=reveal)


def _items(res: results.ProblemResult) -> dict[str, results.ItemResult]:
    return {i.name: i for i in res.items}


def test_one_failing_property_costs_its_item_only(tmp_path):
    problem = problem_of(tmp_path)
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC, "failed", "AssertionError: Adam: \x1b[31mX"),
        f"{PUBLIC}::test_trajectory_matches_torch[SGD]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[SGD]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
    }, "problems": {}})
    items = _items(res)
    assert (res.score, res.max_score, res.status) == (4, 10, results.FAILED)
    assert items["update rules"].score == 0 and items["update rules"].status == results.FAILED
    assert items["state_dict"].score == 3 and items["bad hyperparameters"].score == 1
    f = items["update rules"].failure
    assert f is not None and not f.hidden and f.test.endswith("test_trajectory_matches_torch[Adam]")
    assert f.property_test == f"{PUBLIC}::test_trajectory_matches_torch"
    assert f.property.startswith("Several steps"), f.property  # the test's docstring, read from its source
    assert f.reproduce == f"pytest {PUBLIC}::test_trajectory_matches_torch"  # as the student runs it
    assert f.message == "AssertionError: Adam: X", "control characters and ANSI escapes never reach a report"
    assert "[0/6] update rules: failed" in res.output and "4 of 10 points" in res.output


def test_a_grader_fault_says_not_graded_once(tmp_path):
    """A check's grader fault (no record of it in the problem's worker record):
    the problem's first line says "not graded" once, then the fault's own words."""
    problem = problem_of(tmp_path)
    fault = "GraderFault: optimizers: not graded: the machine was too busy: a call waited too long for a CPU"
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[SGD]": check(PUBLIC, "grader error", fault),
        f"{PUBLIC}::test_state_dict_resumes_the_run[SGD]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
    }, "problems": {}})
    assert res.status == results.GRADER_ERROR
    first = res.output.splitlines()[0]
    assert first == f"{results.NOT_GRADED} (the machine was too busy: a call waited too long for a CPU)", first
    assert first.count("not graded") == 1, first


def test_a_hidden_check_counts_toward_the_item_it_extends_and_withholds_values(tmp_path):
    problem = problem_of(tmp_path)
    secret = "AssertionError: got 0.123456 for betas=(0.9, 0.0)"
    tests = {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
        f"{HIDDEN}::test_long_runs[Adam-0.5-torch.float16]": check(
            HIDDEN, "failed", secret, extends=f"{PUBLIC}::test_trajectory_matches_torch",
            input_kind={"dtype": "float16", "hyperparameters": "betas"}),
    }
    res = _score(problem, {"checks": tests, "problems": {}})
    items = _items(res)
    assert items["update rules"].score == 0 and items["state_dict"].score == 3, res.output
    f = items["update rules"].failure
    assert f.hidden and f.withheld and f.test == "test_long_runs" and not f.message
    assert f.property_test == f"{PUBLIC}::test_trajectory_matches_torch" and f.property.startswith("Several")
    assert f.input_kind == {"dtype": "float16", "hyperparameters": "betas"}
    assert f.parameters == ["Adam", "torch.float16"], "numbers in parametrize ids are values: dropped"
    text = res.output + terminal.table(_result(res)) + json.dumps(render.to_json(_result(res), reveal=False)["problems"]
                                                                [0]["items"])
    assert "test_trajectory_matches_torch" in text and "dtype=float16" in text and "withheld" in text
    assert "0.123456" not in text and "0.5" not in text and "grader/hidden" not in text
    revealed = _items(_score(problem, {"checks": tests, "problems": {}}, reveal=True))["update rules"].failure
    assert revealed.message == secret and revealed.test.startswith(HIDDEN)


def test_a_check_no_item_holds_costs_every_item(tmp_path):
    problem = problem_of(tmp_path)
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
        f"{HIDDEN}::test_something_new": check(HIDDEN, "failed", "AssertionError"),
    }, "problems": {}})
    assert res.score == 0 and res.unmapped == ["test_something_new"], res.output
    assert "no single item" in res.output


def test_a_gate_withholds_the_other_items(tmp_path):
    problem = problem_of(tmp_path, RUBRIC.replace('checks = ["test_bad_*"]', 'checks = ["test_bad_*"]\ngate = true'))
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC, "failed", "AssertionError: no"),
    }, "problems": {}})
    items = _items(res)
    assert res.score == 0 and items["update rules"].status == results.PASSED, res.output
    assert "bad hyperparameters" in items["update rules"].note


def test_an_item_of_gpu_only_checks_is_not_run_on_cpu(tmp_path):
    problem = problem_of(tmp_path)
    gpu = dict(check(PUBLIC), outcome="skipped", gpu_marked=True)
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": gpu,
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
    }, "problems": {}})
    state_dict = _items(res)["state_dict"]  # left out of the totals: max 0, its points not counted
    assert (state_dict.status, state_dict.max_score, state_dict.not_counted) == (results.NOT_RUN_GPU, 0, 3)
    assert (res.score, res.max_score, res.status) == (7, 7, results.PASSED)
    total = _result(res)
    assert (total.score, total.max_score, total.gpu_points_not_run) == (7, 7, 3)


def _result(*problems: results.ProblemResult) -> results.GradeResult:
    return scoring.total(results.GradeResult("SUB", problems=list(problems), checks="public + hidden checks"), 1.0)


def test_reports_have_one_entry_per_item(tmp_path):
    problem = problem_of(tmp_path)
    res = _score(problem, {"checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC, "failed", "AssertionError: " + "word " * 60),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
    }, "problems": {}})
    r = _result(res)
    gs = platforms.to_gradescope(r)
    assert [t["name"] for t in gs["tests"]] == [
        "optimizers §4: update rules", "optimizers §4: state_dict", "optimizers §4: bad hyperparameters"]
    assert [(t["score"], t["max_score"], t["status"]) for t in gs["tests"]] == [
        (0, 6, "failed"), (3, 3, "passed"), (1, 1, "passed")]
    assert gs["score"] == 4 and "checks: public + hidden checks" in gs["output"]
    suite = ET.fromstring(platforms.to_junit(r).split("?>", 1)[1])
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    doc = render.to_json(r)["problems"][0]
    assert [(i["name"], i["points"], i["score"]) for i in doc["items"]] == [
        ("update rules", 6, 0), ("state_dict", 3, 3), ("bad hyperparameters", 1, 1)]
    assert doc["items"][0]["failure"]["property_test"].endswith("test_trajectory_matches_torch")
    table = terminal.table(r, width=110)
    lines = table.splitlines()
    rows = [i for i, ln in enumerate(lines) if ln.startswith(("optimizers ", "  · update rules"))]
    assert lines[rows[0]].endswith("lost: update rules"), table
    # the message wraps at word boundaries under its column, three lines at most, then an ellipsis
    cell = lines[rows[1]:rows[1] + 3]
    assert lines[rows[1]].split("failed  ", 1)[1].startswith("word word"), table
    assert all(ln.startswith(" " * 20) for ln in cell[1:]) and cell[-1].endswith("word …"), table
    assert all(len(ln) <= 110 for ln in lines[:rows[1] + 3]), table
    assert "  · update rules" in table and "  · state_dict" in table  # partly earned: item breakdown


@pytest.mark.parametrize(("text", "width", "expected"), [
    ("short", 10, "short"),
    ("alpha beta gamma delta", 15, "alpha beta…"),
    ("alpha,  beta\ngamma", 40, "alpha, beta gamma"),
    ("x" * 30, 10, "x" * 9 + "…"),
])
def test_shorten_cuts_at_a_word_boundary(text, width, expected):
    assert terminal.shorten(text, width) == expected


def _rebuilt(e: BaseException) -> BaseException:
    """``e`` raised in a worker, as the trusted side rebuilds it from the worker's reply."""
    try:
        wire.reply_value(wire.decode(wire.error_reply(e)))
    except BaseException as rebuilt:  # (what reply_value raises is the point)
        return rebuilt
    raise AssertionError("an error reply gave a value")


def _caused(first: BaseException, then: BaseException) -> BaseException:
    """``then``, raised while handling ``first`` (its context)."""
    then.__context__ = first
    return then


@pytest.mark.parametrize(("exc", "cause"), [
    (_rebuilt(SyntaxError("bad")), protocol.IMPORT),
    (_rebuilt(ModuleNotFoundError("no module named x")), protocol.IMPORT),
    (_rebuilt(SystemExit(3)), protocol.IMPORT),  # (crosses as a RemoteError naming it)
    (_caused(_rebuilt(IndentationError("x")), AssertionError("then")), protocol.IMPORT),
    (_rebuilt(type("SyntaxError", (ValueError,), {})("a name, not the type")), ""),
    (ImportError("the trusted side's own"), ""),
    (WorkerCrashed("exited with status 3"), protocol.CRASH),
    (_caused(ProtocolError("garbage"), AssertionError("then")), protocol.CRASH),
    (AssertionError("wrong"), ""),
])
def test_a_failure_is_classified_by_its_exceptions_types(exc, cause):
    assert outcomes.cause(outcomes.chain(exc)) == cause


@pytest.mark.parametrize(("cause", "item_status", "status"), [
    (protocol.IMPORT, results.ERROR, results.ERROR),
    (protocol.CRASH, results.ERROR, results.FAILED),  # (a crash the worker record does not list)
    ("", results.FAILED, results.FAILED),
])
def test_a_failure_s_cause_makes_its_item_and_problem_an_error(tmp_path, cause, item_status, status):
    """The cause classifies, not the names: these all name a worker's SyntaxError."""
    problem = problem_of(tmp_path)
    res = _score(problem, _outcome(**{
        f"{PUBLIC}__test_trajectory_matches_torch[SGD]": check(
            PUBLIC, "failed", "SyntaxError: bad", cause=cause),
        f"{PUBLIC}__test_state_dict_resumes_the_run[SGD]": check(PUBLIC),
        f"{PUBLIC}__test_bad_hyperparameters_are_rejected[x]": check(PUBLIC),
    }))
    assert (_items(res)["update rules"].status, res.status) == (item_status, status)

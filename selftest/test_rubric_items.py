"""Every check is scored: each public test and each hidden check of every
problem counts toward exactly one item of the rubric (grader/rubric.toml), and
every item holds a public test (or, for a problem without public tests, a
check), so a test added later cannot go unscored and an item cannot be empty.
Hidden checks count toward the item of the public test their ``extends``
marker names (grader/rubric.py: Problem.items_of)."""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from grader.rubric import Problem, RubricError, function_name, is_hidden, load

REPO = Path(__file__).resolve().parent.parent
RUBRIC = load()


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict[str, dict]:
    files = [c for p in RUBRIC.problems for c in p.check_files(REPO)]
    out = tmp_path_factory.mktemp("collect") / "collected.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *files, "--collect-only", "-q", "-p", "selftest.collected",
         f"--collected={out}", "-p", "no:cacheprovider", "-p", "no:xdist", "--impl", "reference"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def _of(problem: Problem, collected: dict[str, dict]) -> dict[str, dict]:
    files = set(problem.check_files(REPO))
    return {k: v for k, v in collected.items() if k.split("::")[0] in files}


@pytest.mark.parametrize("problem", RUBRIC.problems, ids=[p.name for p in RUBRIC.problems])
def test_every_public_test_counts_toward_exactly_one_item(problem, collected):
    tests = {k: v for k, v in _of(problem, collected).items() if not is_hidden(k) and not v["feedback_only"]}
    bad = {function_name(k): [i.name for i in problem.items_of(k)] for k in tests if len(problem.items_of(k)) != 1}
    assert not bad, f"{problem.name}: public tests in no item or in several (add or fix a pattern): {bad}"
    # a problem of hidden checks only (mfu) names, in its items, the public tests they extend
    names = {function_name(k) for k in tests} | {function_name(v["extends"]) for v in _of(problem, collected).values()
                                                 if v["extends"]}
    names = names or {function_name(k) for k in _of(problem, collected)}
    for item in problem.items:
        dead = [pattern for pattern in item.checks if not any(fnmatchcase(n, pattern) for n in names)]
        assert not dead, f"{problem.name}: item {item.name!r}: patterns that match no test: {dead}"


@pytest.mark.parametrize("problem", RUBRIC.problems, ids=[p.name for p in RUBRIC.problems])
def test_every_hidden_check_counts_toward_exactly_one_item(problem, collected):
    hidden = {k: v for k, v in _of(problem, collected).items() if is_hidden(k)}
    if not hidden:
        pytest.skip(f"{problem.name} has no hidden checks in this checkout")
    if not any(v["extends"] for v in collected.values()):
        pytest.skip("no hidden check declares the public test it extends yet (@pytest.mark.extends)")
    bad = {function_name(k): [i.name for i in problem.items_of(k, v["extends"])]
           for k, v in hidden.items() if len(problem.items_of(k, v["extends"])) != 1}
    assert not bad, f"{problem.name}: hidden checks in no item or in several: {bad}"


def test_items_hold_checks_that_run_without_a_gpu(collected):
    """An item of a problem graded on CPU must not consist of GPU-only checks
    (it would be "not run" on every CPU machine)."""
    for problem in (p for p in RUBRIC.problems if not p.gpu):
        tests = _of(problem, collected)
        for item in problem.items:
            mine = [v for k, v in tests.items() if problem.items_of(k, v["extends"]) == [item]]
            assert any(not v["gpu"] for v in mine), f"{problem.name}: item {item.name!r} has only GPU checks"


@pytest.mark.parametrize(("body", "error"), [
    ("", "needs \\[\\[problem.item\\]\\]"),
    ('[[problem.item]]\nname = "a"\npoints = 10\nchecks = []\n', "checks must be"),
    ('[[problem.item]]\nname = "a"\npoints = 0\nchecks = ["test_a"]\n'
     '[[problem.item]]\nname = "b"\npoints = 10\nchecks = ["test_b"]\n', "positive"),
    ('[[problem.item]]\nname = "a"\npoints = 5\nchecks = ["test_a"]\n'
     '[[problem.item]]\nname = "a"\npoints = 5\nchecks = ["test_b"]\n', "unique"),
    ('[[problem.item]]\nname = "a"\npoints = 4\nchecks = ["test_a"]\n', "add up to 4"),
    ('[[problem.item]]\nname = "a"\npoints = 10\nchecks = ["tests/test_x.py::test_a"]\n', "checks must be"),
    ('[[problem.item]]\nname = "a"\npoints = 10\nchecks = ["test_a"]\nweight = 2\n', "unknown keys"),
    ('sealed_optim = "yes"\n[[problem.item]]\nname = "a"\npoints = 10\nchecks = ["test_a"]\n',
     "sealed_optim must be true or false"),
])
def test_malformed_items_are_refused(tmp_path, body, error):
    path = tmp_path / "rubric.toml"
    path.write_text('[[problem]]\nname = "views"\npoints = 10\nfiles = ["tests/test_views.py"]\n' + body)
    with pytest.raises(RubricError, match=error):
        load(path)


def test_feedback_only_tests_are_graded_by_a_hidden_check(collected):
    """A public test marked feedback_only is never scored (its verdict rests on
    what the implementation's process reports): it belongs to no item, and a
    hidden check that decides from the trusted side extends it, so its property
    is still graded."""
    extended = {function_name(v["extends"]) for v in collected.values() if v["extends"]}
    for nodeid, v in collected.items():
        if not v["feedback_only"]:
            continue
        name = function_name(nodeid)
        assert not is_hidden(nodeid), f"{nodeid}: feedback_only is for public tests"
        owners = [p.name for p in RUBRIC.problems if nodeid.split("::")[0] in p.check_files(REPO)
                  and p.items_of(nodeid)]
        assert not owners, f"{name} is feedback_only but counts toward an item of {owners}"
        assert name in extended, f"{name} is feedback_only and no hidden check extends it: its property is ungraded"

"""A worker record's fields reach the ``--json`` file by their own metadata
(grader/sandbox/problemstate.py, :func:`grader.sandbox.problemstate.combined`): each problem's public
and hidden runs, as the engine reads them off the pipe, are scored and
rendered, and every field marked for a report shows its two phases' values
folded as its metadata says. So a new field is one line in the record (and
one where the worker's state fills it): nothing lists the fields by hand on
the way. No grade runs: the runs are written as the trusted process sends them."""

from __future__ import annotations

import time
from dataclasses import field, fields, make_dataclass
from typing import Any

import pytest

from grader import engine, protocol
from grader.report import render
from grader.results import UNFINISHED, UNFINISHED_TEXT, GradeResult
from grader.rubric import load
from grader.sandbox import problemstate
from grader.scoring import unavailable
from grader.util import REPO

PROBLEM = load().problem("views")
FILES = tuple(PROBLEM.check_files(REPO))

#: Each fold, on a public and a hidden value (by the field's type), and what the two make.
PUBLIC_VALUE = {"int": 3, "float": 3.5, "str": "public", "bool": False, "list[str]": ["public"]}
HIDDEN_VALUE = {"int": 4, "float": 4.25, "str": "hidden", "bool": True, "list[str]": ["hidden"]}
FOLDED = {
    "sum": lambda a, b: a + b, "max": max, "join": lambda a, b: f"{a}; {b}", "concat": lambda a, b: a + b,
    "any": lambda a, b: a or b, "first": lambda a, b: a,
}


def _graded(worker: dict[str, Any], hidden_worker: dict[str, Any], reveal: bool = True) -> dict[str, Any]:
    """The ``--json`` object of a problem whose public and hidden runs sent these
    worker records (one passing check each), as the engine scores and renders it."""
    assert any(f.startswith("tests/") for f in FILES) and any(f.startswith("grader/") for f in FILES), FILES
    public_file = next(f for f in FILES if f.startswith("tests/"))
    hidden_file = next(f for f in FILES if f.startswith("grader/"))
    runs = [protocol.ProblemRun.from_json({
        "problem": PROBLEM.name, "hidden": hidden, "worker": record,
        "checks": [{"test": f"{file}::test_probe", "problem": PROBLEM.name, "file": file, "outcome": "passed"}]})
        for hidden, file, record in ((False, public_file, worker), (True, hidden_file, hidden_worker))]
    result = GradeResult("sub", reveal=reveal, problems=[unavailable(PROBLEM, UNFINISHED, UNFINISHED_TEXT, "")])
    grading = engine._Grading(engine.Options(), result, [PROBLEM], {PROBLEM.name: FILES}, "", reveal,
                              time.monotonic())
    grading.expect([{PROBLEM.name}, {PROBLEM.name}])
    for phase, run in enumerate(runs):
        grading.arrived(phase, PROBLEM.name, run)
    (problem,) = render.to_json(result, reveal=reveal)["problems"]
    assert problem["status"] == "passed", problem["output"]
    return problem


def test_every_field_says_how_its_phases_combine():
    for f in fields(protocol.WorkerRecord):
        assert f.metadata.get("merge") in FOLDED, f"{f.name}: no merge in its metadata (problemstate.combined)"
        assert f.metadata.get("revealed") in (True, False), f.name


@pytest.mark.parametrize("name", [f.name for f in fields(protocol.WorkerRecord) if f.metadata.get("revealed")])
def test_a_reported_field_shows_its_phases_combined(name):
    """Today ``workers`` (summed: public + hidden) and ``peak_bytes`` (the larger), instructors only."""
    f = next(f for f in fields(protocol.WorkerRecord) if f.name == name)
    kind = str(f.type)
    problem = _graded({name: PUBLIC_VALUE[kind]}, {name: HIDDEN_VALUE[kind]})
    assert problem[name] == FOLDED[f.metadata["merge"]](PUBLIC_VALUE[kind], HIDDEN_VALUE[kind]), problem
    shown = name in _graded({name: PUBLIC_VALUE[kind]}, {name: HIDDEN_VALUE[kind]}, reveal=False)
    assert not shown, (name, "in a student's --json")


def test_a_new_field_reaches_the_json_file_by_its_metadata_alone(monkeypatch):
    """A record with one more field (declared as a new line in WorkerRecord would
    be): its summed value is in the revealed ``--json`` object, and only there."""
    summed = problemstate.combined(problemstate.SUM, revealed=True)
    probe = make_dataclass("Probe", [("probe", int, field(default=0, metadata=summed))], bases=(protocol.WorkerRecord,))
    monkeypatch.setattr(protocol, "WorkerRecord", probe)
    assert _graded({"probe": 3}, {"probe": 4})["probe"] == 7
    assert "probe" not in _graded({"probe": 3}, {"probe": 4}, reveal=False)

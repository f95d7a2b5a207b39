"""The reports for other platforms: Gradescope's results.json
(:func:`to_gradescope`, with its :func:`leaderboard` entries) and JUnit XML
(:func:`to_junit`): one test per rubric item, adding up to the grade's totals."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from grader.mfu import leaderboard as mfu_leaderboard
from grader.report.table import _run_lines, summary, unreadable
from grader.results import (
    GRADER_ERROR,
    NEEDS_GPU,
    NO_CHECKS_YET,
    NOT_COUNTED,
    NOT_RUN_GPU,
    PASSED,
    GradeResult,
    ItemResult,
    ProblemResult,
    item_text,
)
from grader.results import fmt as _fmt


def _title(p: ProblemResult) -> str:
    return f"{p.name} §{p.section}" if p.section else p.name


def _item_output(p: ProblemResult, i: ItemResult) -> str:
    """An item's Gradescope/JUnit text: its result, first failure or why it was not run."""
    text = item_text(i)
    if p.status not in (PASSED, *NOT_COUNTED) and i.status != PASSED and p.output and not i.failure \
            and not i.note:
        text += "\n" + p.output
    return text


def to_gradescope(r: GradeResult) -> dict[str, Any]:
    """Gradescope's results.json: one test per rubric item, named "problem §section:
    item"; a problem without items is one test. An item left out of the totals
    (needs a GPU, no checks yet) is a test of max_score 0 without a status,
    whose output says so: never a failed test. A submission that could not be
    read has no tests, its reason in the top-level output. Where the MFU was
    graded and verified, Gradescope's ``leaderboard`` entries (:func:`leaderboard`)."""
    tests = []
    for p in [] if unreadable(r) else r.problems:
        if not p.items:
            tests.append(_gradescope_test(_title(p), p.score, p.max_score, p.status,
                                          f"[{p.status}] {p.output}".strip(), p.visibility))
        for i in p.items:
            status = i.status if i.status != PASSED or i.score == i.max_score else "failed"
            tests.append(_gradescope_test(f"{_title(p)}: {i.name}", i.score, i.max_score, status, _item_output(p, i),
                                          p.visibility))
    output = "\n".join([summary(r), *_run_lines(r)])
    doc = {"score": r.score, "execution_time": r.execution_time, "output": output, "tests": tests}
    if board := leaderboard(r):
        doc["leaderboard"] = board
    return doc


def _gradescope_test(name: str, score: float, max_score: float, status: str, output: str,
                     visibility: str) -> dict[str, Any]:
    """One test of Gradescope's results.json; one left out of the totals (a
    NOT_COUNTED ``status``) has no status: its output says so."""
    test: dict[str, Any] = {"name": name, "score": score, "max_score": max_score}
    if status not in NOT_COUNTED:
        test["status"] = "passed" if status == PASSED else "failed"
    return {**test, "output": output, "visibility": visibility}


def leaderboard(r: GradeResult) -> list[dict[str, Any]]:
    """Gradescope's ``leaderboard`` entries of the grade: those of its graded
    MFU (:func:`grader.mfu.leaderboard.gradescope_entries`: none unless its
    work was verified), else none."""
    for p in [] if unreadable(r) else r.problems:
        if (board := mfu_leaderboard.entry((c.figures for c in p.checks), stand_in=p.stand_in)) is not None:
            return mfu_leaderboard.gradescope_entries(board)
    return []


def to_junit(r: GradeResult) -> str:
    """JUnit XML: one testcase per rubric item (classname: the problem); an item
    left out of the totals is ``skipped``; a submission that could not be read
    is one failed testcase. The testsuite's ``score`` and ``max_score``
    properties are the totals the testcases' own add up to."""
    cases: list[tuple[str, str, float, float, str, str]] = []
    if unreadable(r):
        cases.append(("submission", "submission", r.score, r.max_score, "error", r.error))
    for p in [] if unreadable(r) else r.problems:
        for i in p.items or []:
            status = i.status if i.status != PASSED or i.score == i.max_score else "failed"
            cases.append((p.name, i.name, i.score, i.max_score, status, _item_output(p, i)))
        if not p.items:
            cases.append((p.name, p.name, p.score, p.max_score, p.status, p.output))
    suite = ET.Element("testsuite", name="grader", tests=str(len(cases)),
                       failures=str(sum(c[4] not in (PASSED, GRADER_ERROR, *NOT_COUNTED) for c in cases)),
                       errors=str(sum(c[4] == GRADER_ERROR for c in cases)),
                       skipped=str(sum(c[4] in NOT_COUNTED for c in cases)), time=f"{r.execution_time:.3f}")
    ET.SubElement(suite, "properties").extend([
        ET.Element("property", name="score", value=_fmt(r.score)),
        ET.Element("property", name="max_score", value=_fmt(r.max_score)),
        ET.Element("property", name="summary", value=summary(r)),
    ])
    for classname, name, score, max_score, status, output in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=_fmt(score)),
            ET.Element("property", name="max_score", value=_fmt(max_score)),
        ])
        if status in NOT_COUNTED:
            ET.SubElement(case, "skipped", message=NEEDS_GPU if status == NOT_RUN_GPU else NO_CHECKS_YET).text = output
        elif status == GRADER_ERROR:  # the grader's fault, not a failed test
            ET.SubElement(case, "error", message=status, type=status).text = output
        elif status != PASSED:
            ET.SubElement(case, "failure", message=status, type=status).text = output
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"

"""Reports of a :class:`grader.results.GradeResult`: the terminal table, the
``--json`` file, Gradescope's results.json and JUnit XML.

The ``--json`` schema (stable; other tools build on it)::

    {"submission": str, "score": float, "max_score": float,
     "gpu_points_not_run": float, "execution_time": float, "sandbox": str,
     "profile": str, "checks": str, "notes": [str], "error": str,
     "points_without_checks": float, "seed": int,
     "problems": [{"name": str, "section": str, "score": float,
                   "max_score": float, "status": str, "visibility": str,
                   "output": str, "log": str, "time": float, "cpu": float,
                   "cpu_budget": float, "reference_cpu": float, "not_run": int,
                   "checks": [{"test": str, "outcome": str, "message": str,
                               "duration": float, "cpu": float}],
                   "items": [{"name": str, "points": float, "score": float,
                              "status": str, "checks": int, "failed": int,
                              "not_run": int, "note": str, "failure": null | {
                                  "test": str, "hidden": bool, "outcome": str,
                                  "property_test": str, "property": str,
                                  "input_kind": {str: str}, "parameters": [str],
                                  "message": str, "example": str,
                                  "reproduce": str, "withheld": bool}}],
                   "unmapped": [str]}]}

``status`` is one of "passed", "failed", "error", "timeout", "not run",
"grader error", "not run on a GPU", "no checks" (problems and items alike;
a check's ``outcome`` is "passed", "failed", "error", "skipped", "timeout",
"not run" or "grader error"). "timeout": a call ran past its limit, or the
problem's CPU budget ran out (its ``output`` says how much CPU the submission
used, its budget, the reference's for the same checks, and how many checks did
not run); "not run": an item whose checks did not all run before that;
"grader error": a fault of the machine or the grader, not graded (the engine
regrades such a problem once, alone, before the result is final). A problem's score is
the sum of its items' (rubric.toml's [[problem.item]]); an item's ``failure`` is
its first failed check: for a hidden one, the public test it extends
(``property_test`` and the first paragraph of its docstring, ``property``) and
the kind of input (``input_kind``, word-like ``parameters``), its message and
example only when revealed. ``unmapped`` names checks that no single item
holds (a rubric gap, which selftest/test_rubric_items.py forbids): they count
toward every item of their problem. ``max_score`` counts only the problems graded
on this machine; ``gpu_points_not_run`` the points of problems that need a GPU
and were not run; ``points_without_checks`` those of problems whose check files
do not exist (yet). Hidden checks' messages are withheld unless revealed.
``log`` is the submission's own (capped) output, for instructors; it is never
copied into the Gradescope output (it could echo hidden inputs).
``time`` (per problem) and ``duration`` (per check) are seconds measured by the
trusted pytest process, worker start-up included in a problem's first check;
``cpu`` (per problem and check) the CPU seconds its workers used (read from
outside, start-up excluded), against ``cpu_budget``; ``reference_cpu`` is what
the reference uses for the same checks; all three on this machine, ``speed``
times the measuring machine's figures.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from grader.results import (
    GRADER_ERROR,
    NO_CHECKS,
    NOT_RUN_GPU,
    PASSED,
    Failure,
    GradeResult,
    ItemResult,
    ProblemResult,
    item_text,
)
from grader.results import fmt as _fmt
from grader.rubric import function_name
from grader.util import write_atomic


def summary(r: GradeResult) -> str:
    """One line: the score, and what was not graded here."""
    where = " on CPU" if r.gpu_points_not_run else ""
    line = f"score {_fmt(r.score)}/{_fmt(r.max_score)}{where}"
    gpu = [p.name for p in r.problems if p.status == NOT_RUN_GPU]
    if gpu:
        line += f"; {_fmt(r.gpu_points_not_run)} points ({', '.join(gpu)}) need a GPU"
    missing = [p.name for p in r.problems if p.status == NO_CHECKS]
    if missing:
        line += f"; {_fmt(r.points_without_checks)} points ({', '.join(missing)}) have no checks yet"
    faulty = [p.name for p in r.problems if p.status == GRADER_ERROR]
    if faulty:
        line += f"; not graded because of a grader error (not your code): {', '.join(faulty)}"
    return line


def _visible_checks(p: ProblemResult, reveal: bool) -> list[dict[str, Any]]:
    out = []
    for c in p.checks:
        message = c.message if (not c.hidden or reveal) else ("details withheld" if c.outcome != PASSED else "")
        if c.example and (not c.hidden or reveal):
            message = f"{message}\n{c.example}"
        out.append({"test": c.test if (not c.hidden or reveal) else f"hidden check {function_name(c.test)}",
                    "outcome": c.outcome, "message": message, "duration": c.duration, "cpu": c.cpu})
    return out


def _item_json(i: ItemResult) -> dict[str, Any]:
    return {"name": i.name, "points": i.max_score, "score": i.score, "status": i.status, "checks": i.checks,
            "failed": i.failed, "not_run": i.not_run, "note": i.note,
            "failure": i.failure.to_json() if i.failure else None}


def to_json(r: GradeResult, reveal: bool = True) -> dict[str, Any]:
    """The ``--json`` document (see the module docstring)."""
    return {
        "submission": r.submission, "score": r.score, "max_score": r.max_score,
        "gpu_points_not_run": r.gpu_points_not_run, "execution_time": r.execution_time,
        "sandbox": r.sandbox, "profile": r.profile, "checks": r.checks, "notes": r.notes, "error": r.error,
        "points_without_checks": r.points_without_checks, "seed": r.seed, "speed": r.speed,
        "problems": [{
            "name": p.name, "section": p.section, "score": p.score, "max_score": p.max_score,
            "status": p.status, "visibility": p.visibility, "output": p.output, "log": p.log,
            "time": p.time, "cpu": p.cpu, "cpu_budget": p.cpu_budget, "reference_cpu": p.reference_cpu,
            "not_run": p.not_run, "checks": _visible_checks(p, reveal), "items": [_item_json(i) for i in p.items],
            "unmapped": p.unmapped,
        } for p in r.problems],
    }


def _title(p: ProblemResult) -> str:
    return f"{p.name} §{p.section}" if p.section else p.name


def _item_output(p: ProblemResult, i: ItemResult) -> str:
    """An item's Gradescope/JUnit text: its result, first failure or why it was not run."""
    text = item_text(i)
    if p.status not in (PASSED, NOT_RUN_GPU, NO_CHECKS) and i.status != PASSED and p.output and not i.failure \
            and not i.note:
        text += "\n" + p.output
    return text


def to_gradescope(r: GradeResult) -> dict[str, Any]:
    """Gradescope's results.json: one test per rubric item, named "problem §section:
    item" (problems without checks left out); a problem without items is one test."""
    tests = []
    for p in r.problems:
        if p.status == NO_CHECKS:
            continue
        if not p.items:
            tests.append({"name": _title(p), "score": p.score, "max_score": p.max_score,
                          "status": "passed" if p.status == PASSED else "failed",
                          "output": f"[{p.status}] {p.output}".strip(), "visibility": p.visibility})
            continue
        for i in p.items:
            tests.append({
                "name": f"{_title(p)}: {i.name}", "score": i.score, "max_score": i.max_score,
                "status": "passed" if i.status == PASSED and i.score == i.max_score else "failed",
                "output": _item_output(p, i), "visibility": p.visibility,
            })
    output = "\n".join([summary(r), f"checks: {r.checks}", f"sandbox: {r.sandbox}", *r.notes,
                        *([r.error] if r.error else [])])
    return {"score": r.score, "execution_time": r.execution_time, "output": output, "tests": tests}


def to_junit(r: GradeResult) -> str:
    """JUnit XML: one testcase per rubric item (classname: the problem)."""
    cases: list[tuple[ProblemResult, str, float, float, str, str]] = []
    for p in r.problems:
        for i in p.items or []:
            status = i.status if i.status != PASSED or i.score == i.max_score else "failed"
            cases.append((p, i.name, i.score, i.max_score, status, _item_output(p, i)))
        if not p.items:
            cases.append((p, p.name, p.score, p.max_score, p.status, p.output))
    skipped = (NOT_RUN_GPU, NO_CHECKS)
    suite = ET.Element("testsuite", name="grader", tests=str(len(cases)),
                       failures=str(sum(c[4] not in (PASSED, GRADER_ERROR, *skipped) for c in cases)),
                       errors=str(sum(c[4] == GRADER_ERROR for c in cases)),
                       skipped=str(sum(c[4] in skipped for c in cases)), time=f"{r.execution_time:.3f}")
    for p, name, score, max_score, status, output in cases:
        case = ET.SubElement(suite, "testcase", classname=p.name, name=name)
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=_fmt(score)),
            ET.Element("property", name="max_score", value=_fmt(max_score)),
        ])
        if status in skipped:
            ET.SubElement(case, "skipped", message=status).text = output
        elif status == GRADER_ERROR:  # the grader's fault, not a failed test
            ET.SubElement(case, "error", message=status, type=status).text = output
        elif status != PASSED:
            ET.SubElement(case, "failure", message=status, type=status).text = output
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def shorten(text: str, width: int) -> str:
    """``text`` on one line, cut at a word boundary with an ellipsis to fit ``width``."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space > width // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def _reason(f: Failure | None, note: str) -> str:
    """What went wrong, in a few words: the test and its message's first line."""
    if f is None:
        return note
    if f.hidden:
        what = f"hidden {f.test}"
        if f.property_test:
            what += f" (extends {f.property_test.split('::')[-1]})"
        kind = ", ".join(f"{k}={v}" for k, v in f.input_kind.items())
        return f"{what}: {kind}" if kind else what
    message = next((ln for ln in f.message.splitlines() if ln.strip()), "").removeprefix("AssertionError: ")
    return f"{f.test.split('::')[-1]}: {message}" if message else f.test.split("::")[-1]


def table(r: GradeResult, *, details: bool = True, width: int = 110) -> str:
    """The terminal report: a per-problem table (with an item breakdown for a
    problem partly earned), the summary, then each problem's failed items."""
    lines = [f"grading {r.submission}", f"sandbox: {r.sandbox}; profile: {r.profile}", f"checks: {r.checks}"]
    lines += [f"note: {n}" for n in r.notes]
    if r.error:
        lines.append(f"error: {r.error}")
    rows: list[tuple[str, str, str, str, str]] = [("problem", "§", "points", "status", "first failure")]
    for p in r.problems:
        failed = [i for i in p.items if i.score < i.max_score and i.status != NOT_RUN_GPU]
        first = ""
        if p.status != PASSED:
            if p.not_run:
                ref = f", reference {p.reference_cpu:.1f}" if p.reference_cpu else ""
                first = (f"cut short: used {p.cpu:.1f} of {p.cpu_budget:.4g} CPU s{ref}; "
                         f"{p.not_run} checks not run")
            elif p.status == GRADER_ERROR:
                first = p.output.splitlines()[0] if p.output else GRADER_ERROR
            elif 0 < p.score < p.max_score:  # the item rows below say why
                first = "lost: " + "; ".join(i.name for i in failed)
            elif failed:
                first = _reason(failed[0].failure, failed[0].note)
                first = f"{failed[0].name}: {first}" if len(p.items) > 1 else first
            elif p.output:
                first = p.output.splitlines()[0]
        rows.append((p.name, p.section, f"{_fmt(p.score)}/{_fmt(p.max_score)}", p.status, first))
        if 0 < p.score < p.max_score:
            for i in p.items:
                rows.append((f"  · {i.name}", "", f"{_fmt(i.score)}/{_fmt(i.max_score)}", i.status,
                             "" if i.status == PASSED else _reason(i.failure, i.note)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    room = max(60, width - sum(widths) - 8)
    rendered = [("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  "
                 + shorten(row[4], room)).rstrip() for row in rows]
    lines += [rendered[0], "-" * max(len(ln) for ln in rendered), *rendered[1:]]
    lines.append(summary(r))
    if details:
        for p in r.problems:
            if p.status not in (PASSED, NO_CHECKS, NOT_RUN_GPU) and p.output:
                lines += ["", f"== {p.name}: {p.status}, {_fmt(p.score)}/{_fmt(p.max_score)}", p.output]
    return "\n".join(lines) + "\n"


def write_reports(r: GradeResult, *, json_path: str | None, gradescope: str | None, junit: str | None,
                  reveal: bool) -> None:
    """Write each report asked for, atomically (``reveal``: hidden checks' details in the ``--json`` file)."""
    if json_path:
        write_atomic(json_path, json.dumps(to_json(r, reveal), indent=1) + "\n")
    if gradescope:
        write_atomic(gradescope, json.dumps(to_gradescope(r), indent=1) + "\n")
    if junit:
        write_atomic(junit, to_junit(r))

"""Reports of a :class:`grader.results.GradeResult`: the terminal table, the
``--json`` file, Gradescope's results.json and JUnit XML.

The ``--json`` schema (stable; other tools build on it)::

    {"submission": str, "score": float, "max_score": float,
     "gpu_points_not_run": float, "execution_time": float, "sandbox": str,
     "profile": str, "checks": str, "notes": [str], "error": str, "import_errors": [str],
     "points_without_checks": float, "speed": float,
     "problems": [{"name": str, "section": str, "score": float,
                   "max_score": float, "status": str, "visibility": str,
                   "output": str, "stand_in": bool, "log": str, "time": float, "cpu": float, "not_counted": float,
                   "cpu_budget": float, "reference_cpu": float, "not_run": int,
                   "checks": [{"test": str, "outcome": str, "message": str,
                               "duration": float, "cpu": float, "figures": {str: float}}],
                   "items": [{"name": str, "points": float, "score": float,
                              "status": str, "checks": int, "failed": int,
                              "not_run": int, "note": str, "not_counted": float, "failure": null | {
                                  "test": str, "hidden": bool, "outcome": str,
                                  "property_test": str, "property": str,
                                  "input_kind": {str: str}, "parameters": [str],
                                  "message": str, "example": str,
                                  "reproduce": str, "withheld": bool}}],
                   "unmapped": [str],
                   "leaderboard": {...}}]}    (only where an MFU was graded: below)
    (with ``reveal``, each problem also has "hidden_log": str,
     "hidden_time": float, "hidden_cpu": float, "peak_bytes": int,
     "workers": int)

``status`` is one of "passed", "failed", "error", "timeout", "not run",
"grader error", "not run on a GPU", "no checks" (problems and items alike;
a check's ``outcome`` is "passed", "failed", "error", "skipped", "timeout",
"not run" or "grader error"). "timeout": a call ran past its limit, or the
problem's CPU budget ran out (its ``output`` says how much CPU the submission
used, its budget, the reference's for the same checks, and how many checks did
not run); "not run": an item whose checks did not all run before that;
"error" is also a problem that needs a module of the submission that does not
import: its checks were not run, its ``output`` reads "not graded: your code
does not import (FILE, line N: ERROR)", and the run's ``import_errors`` has
one such line per module with the problems it cost (grader/imports.py);
"grader error": a fault of the machine or the grader, not graded (the engine
regrades such a problem once, alone, before the result is final). A problem's score is
the sum of its items' (rubric.toml's [[problem.item]]); an item's ``failure`` is
its first failed check: for a hidden one, the public test it extends
(``property_test`` and the first paragraph of its docstring, ``property``) and
the kind of input (``input_kind``, word-like ``parameters``), its message and
example only when revealed. ``unmapped`` names checks that no single item
holds (a rubric gap, which selftest/test_rubric_items.py forbids): they count
toward every item of their problem. Points are left out of every total, never
failed, where a problem or item needs a GPU on a machine without one ("not run
on a GPU") or has no check files yet ("no checks"): its ``max_score`` (an item's
``points``) is 0 and ``not_counted`` holds its points; ``gpu_points_not_run``
and ``points_without_checks`` sum them. So the items' scores and maxima add up
to their problem's, and the problems' to the top-level ``score`` and
``max_score``, in this file as in Gradescope's results.json and the JUnit XML
(whose testsuite carries ``score`` and ``max_score`` properties). Hidden checks' messages are withheld unless revealed.
``stand_in`` is true for a GPU problem graded with the CPU standing in for a
GPU (``--cpu-stand-in``: a rehearsal, never a GPU's grade; its ``output``
begins with :data:`grader.scoring.STAND_IN_NOTE`), false for every other.
A problem whose MFU was graded (the check measured it) has ``leaderboard``:
``{"board": "GPU" | "CPU stand-in" (where ``stand_in``), "verified": bool, "ratio": float,
"mfu": float | null, "reference_mfu": float | null, "doubts": [str],
"ranked": bool}`` (:class:`grader.mfu.leaderboard.Entry`: MFU over the
reference's, MFU against the dense peak where known, why a verified run is
not ranked); Gradescope's results.json carries the same as its
``leaderboard`` entries, for a verified run only.
``log`` is the submission's own (capped) output in its public checks, for
instructors; it is never copied into the Gradescope output. With ``reveal``
(``--reveal-hidden``) the document also holds what only instructors may see,
as it could carry a hidden input: each problem's ``hidden_log``,
``hidden_time``, ``hidden_cpu``, ``peak_bytes`` and ``workers`` (the
workers forked for its checks, public and hidden: a fresh one per problem,
per fresh-process scenario and after each crash), a hidden check's
``duration`` and ``cpu``, and the run's ``seed``, ``operator_notes`` and
``operator_warnings`` (about the machine; a warning where it may change a
result: an unsupported torch, too little memory), ``wall_time``, ``engine_cpu``, ``calibration_cpu`` and
``costs`` (each trusted process's :class:`grader.protocol.Cost`).
``time`` (per problem) and ``duration`` (per check) are seconds measured by the
trusted pytest process, worker start-up included in a problem's first check;
``cpu`` (per problem and check) the CPU seconds its workers used (read from
outside, start-up excluded), against ``cpu_budget``; ``reference_cpu`` is what
the reference uses for the same checks; all three on this machine, ``speed``
times the measuring machine's figures.
"""

from __future__ import annotations

import json
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import asdict, fields
from typing import Any, TextIO

from grader.mfu import leaderboard as mfu_leaderboard
from grader.protocol import Failure
from grader.results import (
    FAILED,
    GRADER_ERROR,
    NEEDS_GPU,
    NO_CHECKS,
    NO_CHECKS_YET,
    NOT_COUNTED,
    NOT_RUN_GPU,
    PASSED,
    GradeResult,
    ItemResult,
    ProblemResult,
    failure_text,
    item_text,
    stub_in,
    stub_of,
)
from grader.results import fmt as _fmt
from grader.rubric import function_name
from grader.util import printable, write_atomic


def summary(r: GradeResult) -> str:
    """One line: the score, and what was not graded here."""
    where = " on CPU" if r.gpu_points_not_run else ""
    line = f"score {_fmt(r.score)}/{_fmt(r.max_score)}{where}"
    gpu = [p.name for p in r.problems if p.status == NOT_RUN_GPU]
    if gpu:
        line += f"; {_fmt(r.gpu_points_not_run)} points ({', '.join(gpu)}) need a GPU: not counted"
    missing = [p.name for p in r.problems if p.status == NO_CHECKS]
    if missing:
        line += f"; {_fmt(r.points_without_checks)} points ({', '.join(missing)}) have no checks yet: not counted"
    faulty = [p.name for p in r.problems if p.status == GRADER_ERROR]
    if faulty:
        line += f"; not graded because of a grader error (not your code): {', '.join(faulty)}"
    return line


def _distinct(lines: list[str]) -> list[str]:
    """``lines`` without empty ones and repeats, in their order."""
    return list(dict.fromkeys(ln for ln in lines if ln))


def _run_lines(r: GradeResult) -> list[str]:
    """The run's own lines after the summary: which checks, the sandbox, notes, the submission's error."""
    error = [f"not graded: {r.error}"] if r.error else []
    return _distinct([*error, *_import_lines(r), f"checks: {r.checks}", f"sandbox: {r.sandbox}", *r.notes])


def _import_lines(r: GradeResult) -> list[str]:
    """One line per module of the submission that does not import (grader/imports.py)."""
    return [f"your code does not import: {line}" for line in r.import_errors]


def unreadable(r: GradeResult) -> bool:
    """Whether the submission itself could not be read (``r.error``): no problem was graded,
    and the reports say so once instead of once per problem and item."""
    return bool(r.error)


def _visible_checks(p: ProblemResult, reveal: bool) -> list[dict[str, Any]]:
    out = []
    for c in p.checks:
        message = c.message if (not c.hidden or reveal) else ("details withheld" if c.outcome != PASSED else "")
        if c.example and (not c.hidden or reveal):
            message = f"{message}\n{c.example}"
        shown = c.test if (not c.hidden or reveal) else f"hidden check {function_name(c.test)}"
        entry: dict[str, Any] = {"test": shown, "outcome": c.outcome, "message": message}
        if not c.hidden or reveal:  # a hidden check's seconds (and figures) are the submission's to steer
            entry.update(duration=c.duration, cpu=c.cpu)
            if c.figures:
                entry["figures"] = c.figures
        out.append(entry)
    return out


def _item_json(i: ItemResult) -> dict[str, Any]:
    return {"name": i.name, "points": i.max_score, "score": i.score, "status": i.status, "checks": i.checks,
            "failed": i.failed, "not_run": i.not_run, "note": i.note, "not_counted": i.not_counted,
            "failure": i.failure.to_json() if i.failure else None}


def _problem_json(p: ProblemResult, reveal: bool) -> dict[str, Any]:
    """A problem's object: every field of its record, in order (those marked
    :data:`grader.results.REVEALED` only with ``reveal``)."""
    out: dict[str, Any] = {}
    for f in fields(p):
        if f.metadata.get("revealed") and not reveal:
            continue
        value = getattr(p, f.name)
        out[f.name] = (_visible_checks(p, reveal) if f.name == "checks" else
                       [_item_json(i) for i in value] if f.name == "items" else value)
    if (board := mfu_leaderboard.entry((c.figures for c in p.checks), stand_in=p.stand_in)) is not None:
        out["leaderboard"] = board.to_json()
    return out


def to_json(r: GradeResult, reveal: bool = True) -> dict[str, Any]:
    """The ``--json`` document (see the module docstring). Without ``reveal`` it
    holds nothing of the hidden checks' runs but their outcomes (no seconds,
    no output, no seed): it may be shown to students."""
    doc: dict[str, Any] = {
        "submission": r.submission, "score": r.score, "max_score": r.max_score,
        "gpu_points_not_run": r.gpu_points_not_run, "execution_time": r.execution_time,
        "sandbox": r.sandbox, "profile": r.profile, "checks": r.checks, "notes": r.notes, "error": r.error,
        "import_errors": r.import_errors, "points_without_checks": r.points_without_checks, "speed": r.speed,
        "problems": [_problem_json(p, reveal) for p in r.problems],
    }
    if reveal:
        doc.update(seed=r.seed, operator_notes=r.operator_notes, operator_warnings=r.operator_warnings,
                   wall_time=r.wall_time,
                   costs=[asdict(c) for c in r.costs], engine_cpu=r.engine_cpu, calibration_cpu=r.calibration_cpu)
    return doc


def _title(p: ProblemResult) -> str:
    return f"{p.name} §{p.section}" if p.section else p.name


def _item_output(p: ProblemResult, i: ItemResult) -> str:
    """An item's Gradescope/JUnit text: its result, first failure or why it was not run."""
    text = item_text(i)
    if p.status not in (PASSED, *NOT_COUNTED) and i.status != PASSED and p.output and not i.failure \
            and not i.note:
        text += "\n" + p.output
    return text


def _not_counted_line(status: str, points: float) -> str:
    return f"{NEEDS_GPU if status == NOT_RUN_GPU else NO_CHECKS_YET} ({_fmt(points)} points)"


def to_gradescope(r: GradeResult) -> dict[str, Any]:
    """Gradescope's results.json: one test per rubric item, named "problem §section:
    item"; a problem without items is one test. An item left out of the totals
    (needs a GPU, no checks yet) is a test of max_score 0 without a status,
    whose output says so: never a failed test. A submission that could not be
    read has no tests, its reason in the top-level output. Where the MFU was
    graded and verified, Gradescope's ``leaderboard`` entries (:func:`leaderboard`)."""
    tests = []
    for p in [] if unreadable(r) else r.problems:
        rows = [(_title(p), p.score, p.max_score, p.status, f"[{p.status}] {p.output}".strip())] \
            if not p.items else [(f"{_title(p)}: {i.name}", i.score, i.max_score,
                                  i.status if i.status != PASSED or i.score == i.max_score else "failed",
                                  _item_output(p, i)) for i in p.items]
        for name, score, max_score, status, output in rows:
            test: dict[str, Any] = {"name": name, "score": score, "max_score": max_score}
            if status not in NOT_COUNTED:  # (the output of one not counted says so)
                test["status"] = "passed" if status == PASSED else "failed"
            tests.append({**test, "output": output, "visibility": p.visibility})
    output = "\n".join([summary(r), *_run_lines(r)])
    doc = {"score": r.score, "execution_time": r.execution_time, "output": output, "tests": tests}
    if board := leaderboard(r):
        doc["leaderboard"] = board
    return doc


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


def _md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes and markup escaped."""
    text = " ".join(text.split())
    for ch in "\\|`*_[]<>#":
        text = text.replace(ch, "\\" + ch)
    return text


def to_markdown(r: GradeResult) -> str:
    """A Markdown summary of the grade (a CI job's summary, GitHub's
    ``$GITHUB_STEP_SUMMARY``): the summary line, which checks ran, and one row
    per problem with its points, status and first failure, as the terminal
    table says them (a hidden check's details withheld)."""
    lines = [f"### {_md_cell(summary(r))}", "", _md_cell(f"checks: {r.checks}") if r.checks else "", "",
             "| problem | § | points | status | first failure |", "|---|---|---|---|---|"]
    if unreadable(r):
        lines.append(f"| submission | | {_fmt(r.score)}/{_fmt(r.max_score)} | error | {_md_cell(r.error)} |")
    for p in [] if unreadable(r) else r.problems:
        lines.append(f"| {_md_cell(p.name)} | {_md_cell(p.section)} | {_fmt(p.score)}/{_fmt(p.max_score)} | "
                     f"{_md_cell(p.status)} | {_md_cell(shorten(_first_failure(p), 300))} |")
    return "\n".join(lines) + "\n"


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
    """What went wrong, in a few words: the failure's message (its first line),
    then the test that failed; for a withheld hidden check, the public test it
    extends and the kind of input."""
    if f is None:
        return note.splitlines()[0] if note else ""
    stub = stub_of(f)
    if stub is not None:  # no input matters: which stub, not which test
        return f"{stub[0]} is not implemented yet (handout §{stub[1]})"
    test = function_name(f.test) + (f"[{f.test.split('[', 1)[1]}" if "[" in f.test else "")
    if f.hidden and not f.test:  # its details withheld from this submission
        return "a hidden check failed (details withheld)"
    if f.hidden and not f.message:
        what = f"a hidden check failed: {function_name(f.test)}"
        if f.property_test:
            what += f" (extends {function_name(f.property_test)})"
        kind = ", ".join(f"{k}={v}" for k, v in f.input_kind.items())
        return f"{what}; inputs: {kind}" if kind else what
    message = next((ln for ln in f.message.splitlines() if ln.strip()), "").removeprefix("AssertionError: ")
    return f"{message} (in {test})" if message else f"failed: {test}"


def _only_stubs(p: ProblemResult) -> dict[str, str]:
    """Every untouched stub a check of the problem reached (function: handout
    section, in the order ``pytest`` lists them: by section, then name), when
    it earned nothing and each lost item's first failure is a stub, so that is
    all there is to say of it (its row names them: no details to print); else {}."""
    failed = [i for i in p.items if i.score < i.max_score and i.status not in NOT_COUNTED]
    if p.status != FAILED or p.score or not failed or any(i.note or stub_of(i.failure) is None for i in failed):
        return {}
    found = {s for c in p.checks if c.outcome != PASSED and (s := stub_in(c.message))}
    return dict(sorted(found, key=lambda s: (_section_key(s[1]), s[0])))


def _section_key(section: str) -> tuple[int, ...]:
    """A handout section ("3.1") in reading order."""
    return tuple(int(x) for x in section.split(".") if x.isdigit())


#: How many lines the first-failure column may take per row.
_CELL_LINES = 3


def _details(r: GradeResult) -> list[str]:
    """What the table's cells cut short: each lost item's first failure in full
    (message, example, the command that replays it), under a line naming the
    problem and item; a problem without such failures (one that crashed, ran
    out of budget or met a grader error) its output. Untouched stubs, which the
    table names already, and passed items add nothing."""
    lines: list[str] = []
    for p in [] if unreadable(r) else r.problems:
        if p.status in (PASSED, *NOT_COUNTED) or _only_stubs(p):
            continue
        blocks: list[tuple[str, str]] = []
        for i in p.items:
            if i.score >= i.max_score or i.status in NOT_COUNTED:
                continue
            if i.failure is not None and not i.note and stub_of(i.failure) is not None:
                continue
            if i.failure is None and i.note == p.output:  # the problem's own words (not graded): said once below
                continue
            text = "\n".join(x for x in (i.note, failure_text(i.failure) if i.failure else "") if x)
            if text:
                blocks.append((f"{p.name} · {i.name}", text))
        if not blocks and p.output:
            blocks.append((f"{p.name}: {p.status}", p.output))
        for head, body in blocks:
            lines += ["", f"── {head}", body]
    return lines


def _where_to_look(r: GradeResult) -> str:
    """One line: the handout sections and the pytest command to start from, or ''
    when nothing was lost (or nothing could be read)."""
    lost = [p for p in r.problems if p.status not in (PASSED, GRADER_ERROR, *NOT_COUNTED)]
    if unreadable(r) or not lost:
        return ""
    sections = ", ".join(f"§{p.section} ({p.name})" if p.section else p.name for p in lost)
    return f"where to look: handout {sections}; `pytest -m {lost[0].name}` shows each failing public test"


def _first_failure(p: ProblemResult) -> str:
    """A problem's "first failure" cell: what it lost and why, in a few words
    ("" when it passed; the lost items' names when it earned some points, the
    item rows saying why)."""
    failed = [i for i in p.items if i.score < i.max_score]
    if p.status in NOT_COUNTED:
        return _not_counted_line(p.status, p.not_counted)
    if p.status == PASSED:
        return ""
    if p.not_run:
        ref = f", reference {p.reference_cpu:.1f}" if p.reference_cpu else ""
        return f"cut short: used {p.cpu:.1f} of {p.cpu_budget:.4g} CPU s{ref}; {p.not_run} checks not run"
    if p.status == GRADER_ERROR:
        return p.output.splitlines()[0] if p.output else GRADER_ERROR
    if 0 < p.score < p.max_score:
        return "lost: " + "; ".join(i.name for i in failed)
    if stubs := _only_stubs(p):
        sections = ", ".join(f"§{s}" for s in dict.fromkeys(stubs.values()))
        return f"not implemented yet: {', '.join(stubs)} (handout {sections})"
    if failed:
        return _reason(failed[0].failure, failed[0].note)
    return p.output.splitlines()[0] if p.output else ""


def _cells(text: str, width: int, lines: int) -> list[str]:
    """``text`` wrapped at word boundaries to ``width``, at most ``lines`` lines."""
    return textwrap.wrap(" ".join(text.split()), width, max_lines=lines, placeholder=" …",
                         break_on_hyphens=False) or [""]


def table(r: GradeResult, *, details: bool = True, verbose: bool = False, width: int = 100) -> str:
    """The terminal report, at most ``width`` columns: a per-problem table (with
    an item breakdown for a problem partly earned; one row for a submission that
    could not be read), the summary, which checks ran and the run's notes, then
    (``details``) each lost item's first failure in full, and one line on where
    to look. What only the operator needs, the submission's path, the sandbox
    and the profile, is shown with ``verbose`` only."""
    lines = [f"grading {r.submission}", f"sandbox: {r.sandbox}; profile: {r.profile}"] if verbose else []
    rows: list[tuple[str, str, str, str, str]] = [("problem", "§", "points", "status", "first failure")]
    if unreadable(r):
        rows.append(("submission", "", f"{_fmt(r.score)}/{_fmt(r.max_score)}", "error", r.error))
    for p in [] if unreadable(r) else r.problems:
        rows.append((p.name, p.section, f"{_fmt(p.score)}/{_fmt(p.max_score)}", p.status, _first_failure(p)))
        if 0 < p.score < p.max_score:
            for i in p.items:
                why = _not_counted_line(i.status, i.not_counted) if i.status in NOT_COUNTED else \
                    "" if i.status == PASSED else _reason(i.failure, i.note)
                rows.append((f"  · {i.name}", "", f"{_fmt(i.score)}/{_fmt(i.max_score)}", i.status, why))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    # The last column keeps at least two fifths of the width; a long item name
    # wraps in its own column rather than pushing the row past ``width``.
    fixed = sum(widths[1:]) + 8
    widths[0] = min(widths[0], max(len("problem"), width - fixed - 2 * width // 5))
    room = max(20, width - fixed - widths[0])
    rendered = []
    for row in rows:
        name = [row[0]]
        if len(row[0]) > widths[0]:  # an item's name wraps under itself, not under its bullet
            bullet = "  · " if row[0].startswith("  · ") else ""
            wrapped = _cells(row[0][len(bullet):], widths[0] - len(bullet), _CELL_LINES)
            name = [bullet + wrapped[0], *(" " * len(bullet) + ln for ln in wrapped[1:])]
        cell = _cells(row[4], room, _CELL_LINES)
        for k in range(max(len(name), len(cell))):
            first_cols = (name[k] if k < len(name) else "", *(row[1:4] if k == 0 else ("", "", "")))
            text = "  ".join(c.ljust(w) for c, w in zip(first_cols, widths, strict=True))
            rendered.append((text + "  " + (cell[k] if k < len(cell) else "")).rstrip())
    lines += [rendered[0], "-" * max(len(ln) for ln in rendered), *rendered[1:]]
    lines.append(summary(r))
    lines += _import_lines(r)
    if r.checks and not unreadable(r):
        lines.append(f"checks: {r.checks}")
    lines += [f"note: {n}" for n in _distinct(r.notes)]
    if details:
        lines += _details(r)
        if where := _where_to_look(r):
            lines += ["", where]
    return "\n".join(lines) + "\n"


def print_table(r: GradeResult, *, details: bool = True, verbose: bool = False,
                stream: TextIO | None = None) -> None:
    """Print :func:`table` to ``stream`` (stdout): printable, in whatever encoding the
    stream has (what it cannot encode is replaced), and never an exception of
    the table's own: a table that cannot be rendered prints the summary and
    says the grader failed, not the submission."""
    out = stream if stream is not None else sys.stdout
    try:
        text = table(r, details=details, verbose=verbose)
    except Exception as e:  # the grader's own bug: the result and the other reports stand
        text = (f"grading {r.submission}\n{summary(r)}\nthe grader could not render its table "
                f"({type(e).__name__}: {e}): a fault of the grader, not of the submission\n")
    text = printable(text)
    encoding = getattr(out, "encoding", None) or "utf-8"
    out.write(text.encode(encoding, "replace").decode(encoding, "replace"))
    out.flush()


def write_reports(r: GradeResult, *, json_path: str | None, gradescope: str | None, junit: str | None,
                  reveal: bool, final: bool = True, markdown: str | None = None) -> list[str]:
    """Write each report asked for, atomically (``reveal``: hidden checks' details in
    the ``--json`` file). Each writer stands alone: one that fails (the grader's
    own fault, never the submission's) neither stops the others nor raises.
    Returns one line per report that could not be written, saying why; with
    ``final`` (the grade's last write, not one while it runs) each is also
    added to ``r.notes``, so the table printed afterwards says it."""
    writers = [("--json", json_path, lambda: json.dumps(to_json(r, reveal), indent=1) + "\n"),
               ("--gradescope", gradescope, lambda: json.dumps(to_gradescope(r), indent=1) + "\n"),
               ("--junit", junit, lambda: to_junit(r)),
               ("--markdown", markdown, lambda: to_markdown(r))]
    failed = []
    for option, path, render in writers:
        if not path:
            continue
        try:
            write_atomic(path, render())
        except Exception as e:
            failed.append(f"the grader could not write its {option} report {path} ({type(e).__name__}: "
                          f"{printable(str(e))[:300]}): a fault of the grader, not of the submission")
    if final:
        r.notes.extend(failed)
    return failed

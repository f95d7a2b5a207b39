"""The ``--json`` report of a :class:`grader.results.GradeResult`, and
:func:`write_reports`, which writes each report asked for: the terminal table
and Markdown (:mod:`grader.report.table`), Gradescope's results.json and JUnit
XML (:mod:`grader.report.platforms`).

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
     "hidden_time": float, "hidden_cpu": float, and the fields of its worker
     record marked revealed: "peak_bytes": int, "workers": int)

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
per fresh-process scenario and after each crash; these two, and any other
field of :class:`grader.protocol.WorkerRecord` whose metadata marks it
revealed, are its public and hidden phases' records combined), a hidden check's
``duration`` and ``cpu``, and the run's ``seed``, ``operator_notes`` and
``operator_warnings`` (about the machine; a warning where it may change a
result: an unsupported torch, too little memory), ``wall_time``, ``engine_cpu``, ``calibration_cpu`` and
``costs`` (each trusted process's :class:`grader.protocol.Cost`, its scratch
folder's peaks among it).
``time`` (per problem) and ``duration`` (per check) are seconds measured by the
trusted pytest process, worker start-up included in a problem's first check;
``cpu`` (per problem and check) the CPU seconds its workers used (read from
outside, start-up excluded), against ``cpu_budget``; ``reference_cpu`` is what
the reference uses for the same checks; all three on this machine, ``speed``
times the measuring machine's figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from grader import protocol
from grader.mfu import leaderboard as mfu_leaderboard
from grader.report.platforms import to_gradescope, to_junit
from grader.report.table import to_markdown
from grader.results import PASSED, GradeResult, ItemResult, ProblemResult
from grader.rubric import function_name
from grader.util import printable, write_atomic


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
    """A problem's object: every field of its result, in order (those marked
    :data:`grader.results.REVEALED` only with ``reveal``), then each field of
    its combined worker record that the field's metadata marks for a report
    (:func:`grader.sandbox.problemstate.combined`: "revealed" ones only with ``reveal``;
    a problem without a record shows their defaults)."""
    out: dict[str, Any] = {}
    for f in fields(p):
        if (f.metadata.get("revealed") and not reveal) or f.metadata.get("json") is False:
            continue
        value = getattr(p, f.name)
        out[f.name] = (_visible_checks(p, reveal) if f.name == "checks" else
                       [_item_json(i) for i in value] if f.name == "items" else value)
    record = p.record if p.record is not None else protocol.WorkerRecord()
    for f in fields(record):
        if reveal and f.metadata.get("revealed"):
            out[f.name] = getattr(record, f.name)
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

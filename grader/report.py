"""Reports of a :class:`grader.engine.GradeResult`: the terminal table, the
``--json`` file, Gradescope's results.json and JUnit XML.

The ``--json`` schema (stable; other tools build on it)::

    {"submission": str, "score": float, "max_score": float,
     "gpu_points_not_run": float, "execution_time": float, "sandbox": str,
     "profile": str, "notes": [str], "error": str,
     "points_without_checks": float, "seed": int,
     "problems": [{"name": str, "section": str, "score": float,
                   "max_score": float, "status": str, "visibility": str,
                   "output": str, "log": str, "time": float,
                   "checks": [{"test": str, "outcome": str, "message": str,
                               "duration": float}]}]}

``status`` is one of "passed", "failed", "error", "timeout",
"not run on a GPU", "no checks". ``max_score`` counts only the problems graded
on this machine; ``gpu_points_not_run`` the points of problems that need a GPU
and were not run; ``points_without_checks`` those of problems whose check files
do not exist (yet). Hidden checks' messages are withheld unless revealed.
``log`` is the submission's own (capped) output, for instructors; it is never
copied into the Gradescope output (it could echo hidden inputs).
``time`` (per problem) and ``duration`` (per check) are seconds measured by the
trusted pytest process, worker start-up included in a problem's first check.
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from grader.engine import NO_CHECKS, NOT_RUN_GPU, PASSED, GradeResult


def write_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(x: float) -> str:
    return f"{x:g}"


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
    return line


def _visible_checks(p: Any, reveal: bool) -> list[dict[str, Any]]:
    out = []
    for c in p.checks:
        message = c.message if (not c.hidden or reveal) else ("details withheld" if c.outcome != PASSED else "")
        if c.example and (not c.hidden or reveal):
            message = f"{message}\n{c.example}"
        out.append({"test": c.test if (not c.hidden or reveal) else f"hidden check #{len(out) + 1}",
                    "outcome": c.outcome, "message": message, "duration": c.duration})
    return out


def to_json(r: GradeResult, reveal: bool = True) -> dict[str, Any]:
    """The ``--json`` document (see the module docstring)."""
    return {
        "submission": r.submission, "score": r.score, "max_score": r.max_score,
        "gpu_points_not_run": r.gpu_points_not_run, "execution_time": r.execution_time,
        "sandbox": r.sandbox, "profile": r.profile, "notes": r.notes, "error": r.error,
        "points_without_checks": r.points_without_checks, "seed": r.seed,
        "problems": [{
            "name": p.name, "section": p.section, "score": p.score, "max_score": p.max_score,
            "status": p.status, "visibility": p.visibility, "output": p.output, "log": p.log,
            "time": p.time, "checks": _visible_checks(p, reveal),
        } for p in r.problems],
    }


def to_gradescope(r: GradeResult) -> dict[str, Any]:
    """Gradescope's results.json: one test per problem (problems without checks left out)."""
    tests = []
    for p in r.problems:
        if p.status == NO_CHECKS:
            continue
        title = f"{p.name} (§{p.section})" if p.section else p.name
        status = p.status if p.status != PASSED else "passed"
        tests.append({
            "name": title, "score": p.score, "max_score": p.max_score,
            "status": "passed" if p.status == PASSED else "failed",
            "output": (f"[{status}] " + p.output).strip(), "visibility": p.visibility,
        })
    output = "\n".join([summary(r), f"sandbox: {r.sandbox}", *r.notes, *([r.error] if r.error else [])])
    return {"score": r.score, "execution_time": r.execution_time, "output": output, "tests": tests}


def to_junit(r: GradeResult) -> str:
    """JUnit XML: one testcase per problem."""
    suite = ET.Element("testsuite", name="grader", tests=str(len(r.problems)),
                       failures=str(sum(p.status not in (PASSED, NOT_RUN_GPU, NO_CHECKS) for p in r.problems)),
                       skipped=str(sum(p.status in (NOT_RUN_GPU, NO_CHECKS) for p in r.problems)),
                       time=f"{r.execution_time:.3f}")
    for p in r.problems:
        case = ET.SubElement(suite, "testcase", classname="grader", name=p.name)
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=_fmt(p.score)),
            ET.Element("property", name="max_score", value=_fmt(p.max_score)),
        ])
        if p.status in (NOT_RUN_GPU, NO_CHECKS):
            ET.SubElement(case, "skipped", message=p.status).text = p.output
        elif p.status != PASSED:
            ET.SubElement(case, "failure", message=p.status, type=p.status).text = p.output
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def table(r: GradeResult, *, details: bool = True) -> str:
    """The terminal report: a per-problem table, then each problem's first failure."""
    lines = [f"grading {r.submission}", f"sandbox: {r.sandbox}; profile: {r.profile}"]
    lines += [f"note: {n}" for n in r.notes]
    if r.error:
        lines.append(f"error: {r.error}")
    rows = [("problem", "§", "points", "status", "first failure")]
    for p in r.problems:
        first = ""
        if p.status not in (PASSED,):
            first = next((ln for ln in p.output.splitlines() if ln.startswith("First failure")), p.output)
            first = first.removeprefix("First failure: ").splitlines()[0] if first else ""
        rows.append((p.name, p.section, f"{_fmt(p.score)}/{_fmt(p.max_score)}", p.status, first[:70]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
        if i == 0:
            lines.append("-" * (sum(widths) + 8 + 13))
    lines.append(summary(r))
    if details:
        for p in r.problems:
            if p.status not in (PASSED, NO_CHECKS, NOT_RUN_GPU) and p.output:
                lines += ["", f"== {p.name}: {p.status}", p.output]
    return "\n".join(lines) + "\n"


def write_reports(r: GradeResult, *, json_path: str | None, gradescope: str | None, junit: str | None,
                  reveal: bool) -> None:
    if json_path:
        write_atomic(json_path, json.dumps(to_json(r, reveal), indent=1) + "\n")
    if gradescope:
        write_atomic(gradescope, json.dumps(to_gradescope(r), indent=1) + "\n")
    if junit:
        write_atomic(junit, to_junit(r))

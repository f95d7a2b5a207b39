"""The terminal report of a :class:`grader.results.GradeResult` (:func:`table`,
:func:`print_table`) and its Markdown summary (:func:`to_markdown`), with the
lines the other reports share: :func:`summary`, and whether the submission
could be read at all (:func:`unreadable`)."""

from __future__ import annotations

import sys
import textwrap
from typing import TextIO

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
    ProblemResult,
    failure_text,
    stub_in,
    stub_of,
)
from grader.results import fmt as _fmt
from grader.rubric import function_name
from grader.util import printable


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


def _not_counted_line(status: str, points: float) -> str:
    return f"{NEEDS_GPU if status == NOT_RUN_GPU else NO_CHECKS_YET} ({_fmt(points)} points)"


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

"""What the reports do with strings: hostile ones from a grading run are
normalised once, where they reach the engine; a report writer that fails
stops no other; Markdown, the terminal table and the instructors' CSVs quote
what they show safely (no cell a spreadsheet would run as a formula)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

from grader import protocol

# --------------------------------------------------------------------------- hostile strings, independent writers
HOSTILE = "lone \ud800 nonchar \uffff \ufdd0 \U0010ffff nul \x00 esc \x1b[2J bidi \u202e end"


def test_problem_runs_are_normalised_where_they_reach_the_engine():
    """Every string of a trusted run's record, keys included, is normalised once at
    ProblemRun.from_json: lone surrogates become U+FFFD, code points UTF-8, XML or a
    terminal cannot take are dropped, and the grader's copies of a submission's
    modules are named as the student's checkout names them."""
    from grader.protocol import ProblemRun
    from grader.util import REPO as GRADER_REPO

    tb = ('Traceback (most recent call last):\n  File "/tmp/grader-x1/work/student/optimizers.py", line 42, in step\n'
          f'  File "/submission/student/views.py", line 7, in f\n  File "{GRADER_REPO}/tests/test_views.py", line 3')
    raw = json.dumps({"problem": "precision", "hidden": False, "checks": [{
        "test": f"tests/test_x.py::test_y[{HOSTILE}]", "problem": "precision", "file": "tests/test_x.py",
        "outcome": "failed", "message": f"{HOSTILE}\n{tb}", "input_kind": {HOSTILE: HOSTILE}}],
        "worker": {"crashes": [HOSTILE], "log": HOSTILE, "fault": HOSTILE}})
    res = ProblemRun.from_json(raw)
    (check,) = res.checks
    record = res.worker
    assert record is not None
    strings = [check.test, check.message, *check.input_kind, *check.input_kind.values(),
               *record.crashes, record.log, record.fault]
    for text in strings:
        text.encode("utf-8")
        ET.fromstring(f"<a>{text.replace('<', '').replace('&', '')}</a>")
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ufdd0\uffff\U0010ffff]", text), repr(text)
        assert "lone \ufffd nonchar" in text, repr(text)
    assert "student/optimizers.py:42, in step" in check.message and "student/views.py:7, in f" in check.message
    assert 'File "tests/test_views.py", line 3' in check.message
    assert "/tmp/grader-x1" not in check.message and "/submission/" not in check.message


def _hostile_result() -> Any:
    from grader import results

    item = results.ItemResult("item", 0.0, 2.0, results.FAILED, 1, 1,
                              failure=protocol.Failure(test="tests/test_x.py::test_y", hidden=False,
                                                      outcome="failed", message=HOSTILE))
    p = results.ProblemResult("precision", "1.1", 0.0, 2.0, results.FAILED, "visible", HOSTILE, items=[item])
    return results.GradeResult("SUB", max_score=2.0, problems=[p], notes=[HOSTILE], sandbox="rlimits only (x)")


def test_a_report_writer_that_fails_stops_no_other(tmp_path, monkeypatch, capsys):
    """A writer that raises (here the JUnit one) is the grader's error, said on
    stderr and in the table: the other reports are written, the exit code is 0."""
    from grader import cli, engine
    from grader.report import render as report

    def broken(_r: Any) -> str:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(report, "to_junit", broken)
    monkeypatch.setattr(engine, "grade", lambda *_a, **_k: _hostile_result())
    files = {k: tmp_path / f"out.{k}" for k in ("json", "gs.json", "xml")}
    code = cli.main([str(tmp_path), "--json", str(files["json"]), "--gradescope", str(files["gs.json"]),
                     "--junit", str(files["xml"])])
    out, err = capsys.readouterr()
    assert code == 0 and not files["xml"].exists()
    assert json.loads(files["json"].read_text())["score"] == 0 and json.loads(files["gs.json"].read_text())["tests"]
    assert "could not write its --junit report" in err and "a fault of the grader, not of the submission" in err
    assert "could not write its --junit report" in out and "score 0/2" in out


def test_markdown_summary_is_one_row_per_problem_and_escapes_what_it_quotes():
    """--markdown (a CI job's summary): the summary line, then one table row per
    problem whose cells hold no pipe, backtick or markup of the text they quote."""
    from grader.report import table

    r = _hostile_result()
    r.problems[0].items[0].failure.message = "got | `x` <b>*y*</b>\nsecond line"
    text = table.to_markdown(r)
    rows = [ln for ln in text.splitlines() if ln.startswith("| precision ")]
    assert text.startswith("### score 0/2") and len(rows) == 1, text
    assert rows[0].count(" | ") == 4 and "\\|" in rows[0] and "<b>" not in rows[0] and "\\`x\\`" in rows[0], rows


def test_table_prints_in_any_encoding():
    """Whatever is left in a result (here strings never normalised), the table
    prints in the stream's own encoding, an ASCII one included, without raising."""
    import io

    from grader.report import table

    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    table.print_table(_hostile_result(), stream=stream)
    stream.seek(0)
    text = stream.buffer.getvalue().decode("ascii")
    assert "score 0/2" in text and "\x1b" not in text and "\x00" not in text


# --------------------------------------------------------------------------- CSV cells a spreadsheet would run
FORMULAS = ["=HYPERLINK(\"http://x.invalid\",\"a\")", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-2+3",
            "\t=1+1", "\r=1+1", "  =1+1"]


def _csv_cells(text: str) -> list[str]:
    import csv
    import io

    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


def _runs_as_formula(cell: str) -> bool:
    return cell.lstrip(" ").startswith(("=", "+", "-", "@", "\t", "\r"))


def test_gradebook_csv_neutralises_formulas():
    """Names, ids and emails from Gradescope's metadata (and a reason) that start
    like a formula reach gradebook.csv as text: a leading apostrophe, the value kept."""
    from grader.instructor import gradebook

    records = [{"id": f"s{k}", "status": "graded", "reason": bad, "score": 1.0, "max_score": 2.0,
                "submitters": [{"name": bad, "sid": bad, "email": bad}],
                "result": {"problems": [{"name": "views", "score": 1.0}]}} for k, bad in enumerate(FORMULAS)]
    cells = _csv_cells(gradebook.gradebook_csv(records))
    assert not [c for c in cells if _runs_as_formula(c)], cells
    for bad in FORMULAS:  # name, sid, email, reason (a CR inside a cell is a newline: one the csv module quotes)
        assert cells.count(("'" + bad).replace("\r", "\n")) == 4, (bad, cells)
    assert "1" in cells and "2" in cells  # numbers stay numbers


def test_similarity_csvs_neutralise_formulas():
    """similarity.csv and pairs.csv: submission ids and submitters that start like
    a formula (a leading TAB included) are text; the scores stay numbers."""
    import itertools

    from grader.instructor import similarity

    sources = [similarity.Source(id=bad, submitters=bad) for bad in FORMULAS]
    pairs = [similarity.Pair("views", a.id, b.id, 0.9, 0.9, 0.9, 400, 400, 400, 0, 0, 0, 0.9, 0.9, 0.9, 40, True)
             for a, b in itertools.pairwise(sources)]
    for text in (similarity.submissions_csv(pairs, sources), similarity.pairs_csv(pairs, sources)):
        cells = _csv_cells(text)
        assert not [c for c in cells if _runs_as_formula(c)], cells
        assert "'\t=1+1" in cells and "0.900" in cells, cells

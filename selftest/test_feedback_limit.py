"""The instructor's limit on probing (``--full-feedback N/WINDOW``, grader/feedback.py):
decided from a fake Gradescope ``submission_metadata.json`` (within the limit: the
hidden checks' details; over it: points only; malformed: fail open; missing: off),
and, when over, no report a student reads names a hidden check's function,
property or kind of input, while the points stay the same."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from grader import cli, engine, results, scoring
from grader.feedback import Feedback, decide, parse_limit
from grader.report import platforms, table
from grader.util import REPO
from selftest.scored import HIDDEN, PUBLIC, check, problem_of, run_of

NOW = datetime(2026, 3, 2, 14, 0, tzinfo=timezone(timedelta(hours=-8)))


def _metadata(tmp_path: Path, hours_ago: list[float], created: datetime = NOW, **extra: Any) -> Path:
    """A submission_metadata.json in Gradescope's documented format, its
    previous submissions made ``hours_ago`` hours before ``created``."""
    doc = {"id": 123456, "created_at": created.isoformat(), "submission_method": "upload",
           "assignment": {"id": 25828, "title": "Resource accounting", "total_points": "95.0"},
           "users": [{"email": "student@example.com", "id": 1234, "name": "Student User"}],
           "previous_submissions": [{"submission_time": (created - timedelta(hours=h)).isoformat(), "score": 40.0,
                                     "results": {}} for h in hours_ago], **extra}
    path = tmp_path / "submission_metadata.json"
    path.write_text(json.dumps(doc))
    return path


def test_parse_limit():
    limit = parse_limit(" 3 / 24h ")
    assert (limit.count, limit.window, limit.text, limit.window_words) == (3, timedelta(hours=24), "3/24h", "24 hours")
    assert parse_limit("1/1d").window_words == "1 day" and parse_limit("0/90m").window == timedelta(minutes=90)
    for bad in ("3", "3/24", "3/0h", "-1/24h", "3/24w", "three/24h"):
        with pytest.raises(ValueError, match="N/WINDOW"):
            parse_limit(bad)


@pytest.mark.parametrize("hours_ago, details", [
    ([], True),                      # the first submission
    ([1, 5], True),                  # the third in 24 h of 3
    ([1, 5, 23.5], False),           # the fourth
    ([1, 5, 25, 48], True),          # older ones are outside the window
    ([-2, -1, 1, 3], True),          # a regrade of an old submission: later ones never count
])
def test_the_first_n_submissions_in_the_window_get_the_details(tmp_path, hours_ago, details):
    got = decide(parse_limit("3/24h"), _metadata(tmp_path, hours_ago))
    assert got.details is details and not got.operator, got
    if details:
        assert re.search(r"this is \d of 3", got.note), got.note
    else:  # says why, and when a submission gets them again (when the oldest of the 3 leaves the window)
        assert "points only" in got.note and "you made 3 in the 24 hours before" in got.note, got.note
        again = (NOW - timedelta(hours=5) + timedelta(hours=24)).isoformat(timespec="minutes")
        assert f"after {again}" in got.note, got.note


def test_n_zero_is_points_only_from_the_first_submission(tmp_path):
    got = decide(parse_limit("0/24h"), _metadata(tmp_path, []))
    assert not got.details and "after" not in got.note


@pytest.mark.parametrize("text", [
    "not json", "{}", '{"created_at": "yesterday", "previous_submissions": []}',
    '{"created_at": "2026-03-02T14:00:00-08:00", "previous_submissions": {"a": 1}}',
    '{"created_at": "2026-03-02T14:00:00-08:00", "previous_submissions": [{"score": 1}]}',
    '{"created_at": "2026-03-02T14:00:00", "previous_submissions": [{"submission_time": "2026-03-02T13:00:00Z"}]}',
])
def test_malformed_metadata_fails_open_and_tells_the_operator(tmp_path, text):
    path = tmp_path / "submission_metadata.json"
    path.write_text(text)
    got = decide(parse_limit("1/24h"), path)
    assert got.details and not got.note and "fail open" in got.operator, got


def test_missing_metadata_or_no_limit_is_off(tmp_path):
    assert decide(None, _metadata(tmp_path, [1, 2, 3])) == Feedback()
    got = decide(parse_limit("1/24h"), tmp_path / "absent.json")
    assert got.details and not got.note and "the limit is off" in got.operator


def _reports(tmp_path: Path, details: bool) -> tuple[results.ProblemResult, str]:
    """A problem whose hidden check failed (an item) and timed out (another),
    scored with or without details, and everything a student reads of it."""
    tmp_path.mkdir()
    problem = problem_of(tmp_path)
    outcome = {"problems": {"optimizers": {}}, "checks": {
        f"{PUBLIC}::test_trajectory_matches_torch[Adam]": check(PUBLIC),
        f"{PUBLIC}::test_state_dict_resumes_the_run[Adam]": check(PUBLIC),
        f"{HIDDEN}::test_long_runs[Adam-torch.float16]": check(
            HIDDEN, "failed", "AssertionError: got 0.1", extends=f"{PUBLIC}::test_trajectory_matches_torch",
            input_kind={"dtype": "float16", "hyperparameters": "betas"}),
        f"{HIDDEN}::test_state_dict_mid_run[AdamW]": check(
            HIDDEN, "timeout", "a call ran past its time limit", extends=f"{PUBLIC}::test_state_dict_resumes_the_run",
            input_kind={"steps": "many"}),
    }}
    res = scoring.score_problem(problem, problem.check_files(REPO), [run_of(outcome)], gpu_device="",
                                reveal=False, details=details)
    r = scoring.total(results.GradeResult("SUB", problems=[res], checks="public + hidden checks"), 1.0)
    gradescope = json.dumps(platforms.to_gradescope(r))
    junit = ET.tostring(ET.fromstring(platforms.to_junit(r).split("?>", 1)[1]), encoding="unicode")
    return res, "\n".join([gradescope, junit, table.to_markdown(r), table.table(r)])


def test_points_only_names_no_function_property_or_input_kind(tmp_path):
    full, shown = _reports(tmp_path / "full", details=True)
    limited, text = _reports(tmp_path / "limited", details=False)
    for name in ("test_long_runs", "test_trajectory_matches_torch", "float16", "betas", "test_state_dict_mid_run"):
        assert name in shown, name  # (what the limit takes away was there)
    for name in ("test_long_runs", "test_trajectory_matches_torch", "float16", "betas", "test_state_dict_mid_run",
                 "test_state_dict_resumes_the_run", "Adam", "many", "Several"):
        assert name not in text, name
    assert "A hidden check failed: its details are withheld" in text
    assert "A hidden check ran out of time: its details are withheld" in text
    # the points do not change; the items still say which lost them
    assert [(i.name, i.score, i.status) for i in limited.items] == [(i.name, i.score, i.status) for i in full.items]
    assert (limited.score, full.score) == (0, 0) and "update rules" in text and "state_dict" in text


def test_the_command_line_decides_before_grading(tmp_path, monkeypatch, capsys):
    """``python -m grader --full-feedback`` reads the metadata and hands the
    engine its decision, the student's note among the results' notes."""
    seen: list[engine.Options] = []

    def fake_grade(submission: object, options: engine.Options) -> results.GradeResult:
        seen.append(options)
        return results.GradeResult("SUB", checks="public + hidden checks")

    monkeypatch.setattr(engine, "grade", fake_grade)
    meta = _metadata(tmp_path, [1, 2])
    assert cli.main([str(REPO / "student"), "--full-feedback", "2/1d", "--submission-metadata", str(meta),
                     "--quiet"]) == 0
    assert not seen[0].feedback.details and "points only" in seen[0].feedback.note
    assert cli.main([str(REPO / "student"), "--full-feedback", "2/1d", "--quiet"]) == 0
    assert seen[1].feedback.details and "the limit is off" in capsys.readouterr().err
    assert cli.main([str(REPO / "student"), "--full-feedback", "2 a day"]) == 2
    assert cli.main([str(REPO / "student"), "--quiet"]) == 0 and seen[2].feedback == Feedback()

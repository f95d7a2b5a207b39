"""A GPU class grade: a CPU batch and an MFU batch of the same class merged
into one gradebook, problem by problem; a batch with the CPU standing in for
the GPU (``--cpu-stand-in``) says so in its gradebook.

Records are built from results the grader's own scorer and renderer make (a
stand-in MFU, a GPU's, one not run) from checks' outcomes, with nothing run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader import scoring
from grader.instructor import batch, files
from grader.instructor.records import load_record, stand_in
from grader.protocol import RunResults
from grader.report import render
from grader.results import GRADER_ERROR, NOT_GRADED, GradeResult
from grader.rubric import load
from selftest.batching import read_gradebook

REPO = Path(__file__).resolve().parent.parent


def _result(device: str, **outcomes: str) -> dict[str, Any]:
    """A grade's ``--json`` document as the grader's scorer and renderer make it:
    each named problem's one check ended with its outcome ("passed", "failed";
    the check maps to no single item, so it decides them all; GRADER_ERROR: the
    problem was not graded). GPU problems ran on ``device``: "cuda", "cpu" (the
    CPU standing in for it), "" (not run)."""
    problems = []
    for name, outcome in outcomes.items():
        p = load().problem(name)
        if outcome == GRADER_ERROR:
            problems.append(scoring.unavailable(p, GRADER_ERROR, NOT_GRADED, device))
            continue
        check = {"problem": name, "file": p.files[-1], "outcome": outcome, "message": "", "example": "",
                 "exceptions": [] if outcome == "passed" else ["AssertionError"], "gpu_marked": p.gpu}
        run = RunResults.from_json({"checks": {f"{p.files[-1]}::test_one": check}, "problems": {}})
        problems.append(scoring.score_problem(p, p.check_files(REPO), run, device, reveal=False))
    return render.to_json(scoring.total(GradeResult("sub", problems=problems), 1.0), reveal=False)


def _write(out: Path, sub_id: str, result: dict[str, Any] | None, *args: str, status: str = "graded",
           content: str = "") -> None:
    """A batch record of ``sub_id`` in ``out/results`` (graded with ``args``)."""
    rec = {"batch_version": 1, "id": sub_id, "source": f"/class/{sub_id}", "content": content or sub_id,
           "submitters": [], "status": status, "reason": "" if status == "graded" else f"{status}: why",
           "score": result["score"] if result else 0.0, "max_score": result["max_score"] if result else None,
           "grader_args": list(args), "wall_time": 1.0, "result": result}
    files.write_json_atomic(out / "results" / f"{sub_id}.json", rec)


def _merge(tmp_path: Path, *folders: str) -> dict[str, dict[str, str]]:
    assert batch.main(["--merge", *(str(tmp_path / f) for f in folders), "--out", str(tmp_path / "m"),
                       "--quiet"]) == 0
    return read_gradebook(tmp_path / "m")


def test_the_gradebook_names_a_stand_in_grade(tmp_path):
    """``batch --cpu-stand-in`` reaches every grader; a problem graded with the
    CPU standing in for a GPU is named in the row's ``stand_in``, one graded on
    a GPU or not run is not."""
    args = batch.build_parser().parse_args(["class", "--problems", "mfu", "--cpu-stand-in"])
    assert batch._grader_args(args) == ["--problems", "mfu", "--cpu-stand-in"]
    for sub_id, device in (("rehearsed", "cpu"), ("on-a-gpu", "cuda"), ("cpu-only", "")):
        _write(tmp_path / "out", sub_id, _result(device, precision="passed", mfu="passed"))
    rows, mfu = _merge(tmp_path, "out"), f"{load().problem('mfu').points:g}"
    assert {k: (r["stand_in"], r["mfu"]) for k, r in rows.items()} == {
        "rehearsed": ("mfu", mfu), "on-a-gpu": ("", mfu), "cpu-only": ("", "not run")}, rows


def test_a_stand_in_mfu_batch_fills_what_the_cpu_batch_did_not_run(tmp_path):
    """A CPU batch of every problem (mfu not run) or of all but mfu, an MFU
    batch with the CPU standing in: each row takes mfu from the MFU batch and
    the rest from the CPU batch, sums again, has no GPU points not run, and
    names the stand-in; a submission refused in both keeps its row."""
    mfu, precision = load().problem("mfu").points, load().problem("precision").points
    _write(tmp_path / "cpu", "alice", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "cpu", "bob", _result("", precision="failed", mfu="passed"))
    _write(tmp_path / "cpu", "carol", _result("", precision="passed"))  # a CPU batch of all but mfu
    _write(tmp_path / "cpu", "dave", None, status="bad zip")
    for sub_id, outcome in (("alice", "passed"), ("bob", "passed"), ("carol", "failed")):
        _write(tmp_path / "gpu", sub_id, _result("cpu", mfu=outcome), "--problems", "mfu", "--cpu-stand-in")
    _write(tmp_path / "gpu", "dave", None, "--problems", "mfu", "--cpu-stand-in", status="bad zip")
    rows = _merge(tmp_path, "cpu", "gpu")
    cells = {k: (r["status"], r["precision"], r["mfu"], r["score"], r["max_score"], r["gpu_points_not_run"],
                 r["stand_in"]) for k, r in rows.items()}
    full = f"{precision + mfu:g}"
    assert cells == {
        "alice": ("graded", f"{precision:g}", f"{mfu:g}", full, full, "0", "mfu"),
        "bob": ("graded", "0", f"{mfu:g}", f"{mfu:g}", full, "0", "mfu"),
        "carol": ("graded", f"{precision:g}", "0", f"{precision:g}", full, "0", "mfu"),
        "dave": ("bad zip", "0", "0", "0", full, "0", ""),
    }, cells
    rec = load_record(tmp_path / "m" / "results" / "alice.json", "alice")
    assert rec is not None and [p["name"] for p in rec["result"]["problems"]] == ["precision", "mfu"]
    assert rec["result"]["score"] == rec["score"] and rec["result"]["gpu_points_not_run"] == 0
    assert [stand_in(p) for p in rec["result"]["problems"]] == [False, True]


def test_a_gpu_verdict_replaces_a_stand_in_and_no_verdict_stays_one(tmp_path):
    """In either order, a GPU's verdict on mfu wins over the CPU standing in
    (whose result differs: a rehearsal is no GPU's grade) and the row no longer
    says stand-in; an MFU batch that could not grade a submission (a grader
    error) leaves that row a grader error with its reason, to be regraded."""
    _write(tmp_path / "cpu", "alice", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "cpu", "bob", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "rehearsal", "alice", _result("cpu", mfu="failed"), "--cpu-stand-in")
    _write(tmp_path / "gpu", "alice", _result("cuda", mfu="passed"))
    _write(tmp_path / "gpu", "bob", _result("cuda", mfu=GRADER_ERROR), status="grader error")
    for order in (("cpu", "rehearsal", "gpu"), ("gpu", "rehearsal", "cpu")):
        rows = _merge(tmp_path, *order)
        assert (rows["alice"]["mfu"], rows["alice"]["stand_in"]) == (f"{load().problem('mfu').points:g}", ""), order
        assert (rows["bob"]["status"], rows["bob"]["reason"]) == ("grader error", "grader error: why"), order


def test_gradings_that_do_not_combine_stop_the_merge_naming_what(tmp_path):
    """The same problem graded in two folders with different results, or two
    contents of one submission: an error naming the submission, the folders
    and the problem, and no gradebook."""
    _write(tmp_path / "a", "alice", _result("cpu", mfu="passed"))
    _write(tmp_path / "b", "alice", _result("cpu", mfu="failed"))
    with pytest.raises(SystemExit, match=r"alice in .*a and .*b: problem 'mfu' was graded in both"):
        _merge(tmp_path, "a", "b")
    _write(tmp_path / "b", "alice", _result("cpu", mfu="passed"), content="resubmitted")
    with pytest.raises(SystemExit, match=r"alice .* different contents"):
        _merge(tmp_path, "a", "b")
    assert not (tmp_path / "m" / "gradebook.csv").exists()

"""A GPU class grade: a batch with the CPU standing in for the GPU
(``--cpu-stand-in``) says so in its gradebook.

Records are built from results the grader's own scorer and renderer make (a
stand-in MFU, a GPU's, one not run) from checks' outcomes, with nothing run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader import scoring
from grader.instructor import batch, files
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

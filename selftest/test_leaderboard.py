"""The verified MFU leaderboard: from MFU reports of real shape (the check's
driver on the fake device clock, selftest/mfu_fakes.py) to the figures the
hidden check records, the grader's ``--json`` and Gradescope results.json, and
a batch's class summary (summary.md, the console, summary.png's data) after a
real ``batch --merge`` of a CPU and a GPU folder.

What a wrong leaderboard gets wrong: an unverified run listed, a doubtful run
ranked, a CPU stand-in beside GPU figures, ids shown (or a plain hash of
them) where pseudonyms belong, pseudonyms that change between runs, and a
plot of other values or another reference than the records'."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from grader.instructor import batch, gradebook
from grader.instructor import leaderboard as class_board
from grader.instructor.records import load_records
from grader.mfu import leaderboard
from grader.mfu.report import MfuReport
from grader.protocol import CheckOutcome
from grader.report import render
from grader.results import PASSED, GradeResult, ProblemResult
from grader.scoring import total
from selftest.mfu_fakes import check, good_train, on_gpu, one_thread, train_loop  # noqa: F401 (autouse fixture)
from selftest.test_grader_reports import GRADESCOPE_SCHEMA


def half_steps_train(model, optimizer, batches, *, steps, precision):
    import torch

    losses = train_loop(model, optimizer, batches, steps // 2, True)
    return torch.stack(losses + losses).tolist()


@pytest.fixture(scope="module")
def reports() -> dict[str, MfuReport]:
    """One report of each kind, as the check's driver makes them (a second or two in all)."""
    good = on_gpu(check(good_train, 1e-3)[0])  # as fast as the reference
    t = good.submission_seconds
    slower = dataclasses.replace(good, submission_seconds=[s * 1.25 for s in t])  # 0.8 of its MFU
    fast = dataclasses.replace(good, submission_seconds=[s / 2.5 for s in t])  # 2.5 times: in doubt
    noisy = dataclasses.replace(good, submission_seconds=[t[0], 2 * t[0]])
    unverified = on_gpu(check(half_steps_train, 1e-3)[0])
    stand_in = dataclasses.replace(good, device="cpu", device_name="cpu", peak_flops=None, stand_in=True)
    assert good.verified and fast.verified and not unverified.verified and stand_in.passed
    return {"good": good, "slower": slower, "fast": fast, "noisy": noisy, "unverified": unverified,
            "stand_in": stand_in}


MFU_HIDDEN = "grader/hidden/test_mfu_hidden.py"


def grade_of(report: MfuReport | None, name: str = "sub") -> GradeResult:
    """A grade whose MFU problem recorded ``report``'s figures, as the hidden check does
    (None: the MFU problem not run on a GPU, as a CPU batch grades it)."""
    r = GradeResult(submission=name)
    if report is None:
        r.problems.append(ProblemResult("mfu", "3.1/6", 0.0, 0.0, "not run on a GPU", "visible", "", not_counted=5))
        return total(r, 1.0)
    passed = report.passed
    r.problems.append(ProblemResult("mfu", "3.1/6", 5.0 if passed else 0.0, 5.0, PASSED if passed else "failed",
                                    "visible", "", stand_in=report.stand_in, checks=[
                                        CheckOutcome(test=f"{MFU_HIDDEN}::test_train_does_the_reference_work",
                                                     problem="mfu", file=MFU_HIDDEN,
                                                     outcome=PASSED if report.verified else "failed"),
                                        CheckOutcome(test=f"{MFU_HIDDEN}::test_mfu_is_a_fraction_of_the_reference",
                                                     problem="mfu", file=MFU_HIDDEN,
                                                     outcome=PASSED if passed else "failed",
                                                     figures=leaderboard.figures(report))]))
    return total(r, 1.0)


def entry_of(report: MfuReport) -> leaderboard.Entry:
    e = leaderboard.entry([leaderboard.figures(report)], stand_in=report.stand_in)
    assert e is not None
    return e


def test_only_verified_runs_rank_and_doubtful_ones_are_marked(reports):
    good, fast, noisy = entry_of(reports["good"]), entry_of(reports["fast"]), entry_of(reports["noisy"])
    assert good.ranked and good.board == leaderboard.GPU and not good.doubts
    assert good.mfu == pytest.approx(reports["good"].mfu_vs_peak("submission"), rel=1e-3)
    assert good.ratio == pytest.approx(reports["good"].ratio, rel=1e-3)
    assert fast.verified and not fast.ranked and "suspiciously fast" in fast.doubts[0]
    assert noisy.verified and not noisy.ranked and noisy.doubts[0].startswith("noisy")
    unverified = entry_of(reports["unverified"])
    assert not unverified.verified and not unverified.ranked
    above_matmul = dataclasses.replace(reports["good"], matmul_flops=reports["good"].achieved("submission") / 2)
    assert entry_of(above_matmul).doubts == ["suspiciously fast: above the device's measured matmul rate"]
    stand_in = entry_of(reports["stand_in"])
    assert stand_in.board == leaderboard.STAND_IN and stand_in.ranked and stand_in.mfu is None
    # what the --json file carries reads back as the same entry; anything else as none
    assert leaderboard.Entry.from_json(json.loads(json.dumps(fast.to_json()))) == fast
    assert leaderboard.Entry.from_json({**good.to_json(), "ratio": "1.0"}) is None
    assert leaderboard.entry([{"verified": 1.0}], stand_in=False) is None  # nothing measured: no MFU graded


def test_gradescope_results_carry_the_leaderboard(reports, tmp_path):
    """``--gradescope`` writes Gradescope's ``leaderboard`` entries wherever
    MFU was graded: a verified run's values; a doubtful run its status only (no
    place in a numeric column); an unverified run nothing; a CPU stand-in
    columns of its own; the ``--json`` file the full entry."""
    paths = {}
    for kind in ("good", "fast", "unverified", "stand_in"):
        paths[kind] = tmp_path / f"{kind}.json"
        assert render.write_reports(grade_of(reports[kind]), json_path=str(tmp_path / f"{kind}.full.json"),
                                    gradescope=str(paths[kind]), junit=None, reveal=False) == []
    for path in paths.values():
        jsonschema.validate(json.loads(path.read_text()), GRADESCOPE_SCHEMA)
    good = json.loads(paths["good"].read_text())["leaderboard"]
    r = reports["good"]
    assert good == [
        {"name": "MFU (of dense peak)", "value": float(f"{r.mfu_vs_peak('submission'):.4g}"), "order": "desc"},
        {"name": "MFU / reference MFU", "value": float(f"{r.ratio:.4g}"), "order": "desc"},
        {"name": "MFU check", "value": "verified"}]
    fast = json.loads(paths["fast"].read_text())["leaderboard"]
    assert [e["name"] for e in fast] == ["MFU check"] and fast[0]["value"].startswith("not ranked: suspiciously fast")
    assert "leaderboard" not in json.loads(paths["unverified"].read_text())
    stand_in = json.loads(paths["stand_in"].read_text())["leaderboard"]
    assert stand_in and all("CPU stand-in" in e["name"] for e in stand_in)
    full = json.loads((tmp_path / "unverified.full.json").read_text())["problems"][0]["leaderboard"]
    assert full["verified"] is False and full["ranked"] is False


def record(sub_id: str, r: GradeResult) -> dict[str, Any]:
    """A batch record of ``r`` (the grader's ``--json`` as batch keeps it)."""
    return {"batch_version": 1, "id": sub_id, "source": f"/class/{sub_id}", "content": f"hash-{sub_id}",
            "submitters": [], "status": "graded", "reason": "", "score": r.score, "max_score": r.max_score,
            "grader_args": [], "wall_time": 1.0, "result": render.to_json(r, reveal=False)}


#: The class: who got which report in the GPU batch (None: not in it).
CLASS = {"alice": "good", "bob": "fast", "carol": "unverified", "dave": "slower", "erin": "stand_in",
         "frank": "noisy", "gina": None}


@pytest.fixture(scope="module")
def folders(reports, tmp_path_factory) -> tuple[Path, Path]:
    """A CPU batch (the MFU problem not run on a GPU) and a GPU batch of it alone, as batch writes them."""
    root = tmp_path_factory.mktemp("class")
    for folder in ("cpu", "gpu"):
        (root / folder / "results").mkdir(parents=True)
    for sub_id, kind in CLASS.items():
        (root / "cpu" / "results" / f"{sub_id}.json").write_text(json.dumps(record(sub_id, grade_of(None))))
        if kind is not None:
            (root / "gpu" / "results" / f"{sub_id}.json").write_text(
                json.dumps(record(sub_id, grade_of(reports[kind], sub_id))))
    return root / "cpu", root / "gpu"


def merge(folders: tuple[Path, Path], out: Path, *extra: str) -> str:
    assert batch.main(["--merge", str(folders[0]), str(folders[1]), "--out", str(out), *extra]) == 0
    return (out / "summary.md").read_text()


def leaderboard_rows(summary_md: str) -> list[list[str]]:
    """The cells of the GPU board's rows in summary.md."""
    section = summary_md.split("## MFU leaderboard (GPU)")[1].split("## ")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| rank")]


def test_a_batch_summary_carries_the_verified_leaderboard_under_pseudonyms(folders, reports, tmp_path, capsys):
    out = tmp_path / "all"
    md = merge(folders, out)
    key = class_board.class_key(out)
    name = {sub_id: class_board.pseudonym(key, sub_id) for sub_id in CLASS}
    rows = leaderboard_rows(md)
    # ranked by MFU, verified only; the doubtful marked below them, saying why; carol (unverified) absent
    assert [(r[0], r[1]) for r in rows] == [("1", name["alice"]), ("2", name["dave"]),
                                           ("not ranked", name["bob"]), ("not ranked", name["frank"])], md
    assert rows[0][2] == f"{reports['good'].mfu_vs_peak('submission'):.3g}"
    assert "suspiciously fast" in rows[2][4] and rows[3][4].startswith("noisy")
    assert name["carol"] not in md and "1 not listed (work not verified)" in md
    # the stand-in is a board of its own, labelled a rehearsal; erin is on no GPU board
    assert md.count(name["erin"]) == 1 and "## MFU leaderboard (CPU stand-in: a rehearsal, not GPU figures)" in md
    assert md.index(name["erin"]) > md.index("CPU stand-in: a rehearsal")
    # pseudonyms: neither the ids nor their plain hash; the same on a rerun; another class's key, others
    for sub_id in CLASS:
        assert f"| {sub_id} |" not in md and hashlib.sha256(sub_id.encode()).hexdigest()[:8] not in md
    assert (out / class_board.KEY_FILE).stat().st_mode & 0o077 == 0
    assert merge(folders, out) == md
    assert name["alice"] not in merge(folders, tmp_path / "other")
    assert "MFU leaderboard (GPU)" in capsys.readouterr().out  # the console's table


def test_real_ids_with_the_option(folders, tmp_path):
    md = merge(folders, tmp_path / "real", "--leaderboard-ids", "real", "--quiet")
    assert [r[1] for r in leaderboard_rows(md)] == ["alice", "dave", "bob", "frank"]
    assert not (tmp_path / "real" / class_board.KEY_FILE).exists()


def test_the_plot_draws_the_boards_values_and_the_reference_line(folders, reports, tmp_path):
    """summary.png's leaderboard panels hold the ranked and the marked values
    and the reference's MFU as a line (the data plotted, not pixels)."""
    import matplotlib.pyplot as plt

    out = tmp_path / "plot"
    merge(folders, out, "--quiet")
    summary = gradebook.class_summary(list(load_records(out).values()), class_board.namer(out, "pseudonym"))
    fig = gradebook.summary_figure(summary)
    try:
        panels = {ax.get_title(): ax for ax in fig.axes}
        gpu = panels["MFU leaderboard (GPU)"]
        ranked, marked = (sorted(c.get_offsets()[:, 0].tolist()) for c in gpu.collections[:2])
        mfu = {k: r.mfu_vs_peak("submission") for k, r in reports.items() if k != "stand_in"}
        assert ranked == pytest.approx(sorted([mfu["good"], mfu["slower"]]), rel=1e-3)
        assert marked == pytest.approx(sorted([mfu["fast"], mfu["noisy"]]), rel=1e-3)
        reference = statistics.median(reports[k].mfu_vs_peak("reference") for k in ("good", "slower", "fast", "noisy"))
        (line,) = [ln for ln in gpu.lines if ln.get_label() == "reference"]
        assert line.get_xdata()[0] == pytest.approx(reference, rel=1e-3)
        rehearsal = panels["MFU leaderboard (CPU stand-in: a rehearsal, not GPU figures)"]
        assert rehearsal.collections[0].get_offsets()[:, 0].tolist() == pytest.approx([reports["stand_in"].ratio],
                                                                                     rel=1e-3)
        assert [ln.get_xdata()[0] for ln in rehearsal.lines if ln.get_label() == "reference"] == [1.0]
    finally:
        plt.close(fig)
    assert (out / "summary.png").stat().st_size > 0


def test_a_key_file_without_a_key_is_refused_not_used(tmp_path):
    """A key file cut short (or edited) would silently change every pseudonym, or
    key them with nothing: refused, saying so."""
    (tmp_path / class_board.KEY_FILE).write_text("")
    with pytest.raises(ValueError, match="holds no pseudonym key"):
        class_board.class_key(tmp_path)


@pytest.mark.full  # a real grade of the MFU problem: about a minute on a busy 2-core machine; the rest above
def test_a_real_stand_in_grade_writes_the_leaderboard(tmp_path):
    """``python -m grader --cpu-stand-in --problems mfu --gradescope``: the
    hidden check's recorded figures reach results.json's leaderboard, in
    the stand-in's own columns, verified."""
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "reference", tmp_path / "sub" / "student", ignore=shutil.ignore_patterns("__pycache__"))
    results = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(tmp_path / "sub"), "--problems", "mfu",
                           "--cpu-stand-in", "--profile", "dev", "--gradescope", str(results), "--json",
                           str(tmp_path / "grade.json"), "--no-progress", "-q"],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    jsonschema.validate(json.loads(results.read_text()), GRADESCOPE_SCHEMA)
    board = json.loads(results.read_text())["leaderboard"]
    names = [e["name"] for e in board]
    assert names == ["MFU / reference MFU (CPU stand-in, a rehearsal)", "MFU check (CPU stand-in, a rehearsal)"] \
        or names == ["MFU check (CPU stand-in, a rehearsal)"], board  # ranked, or marked on a noisy machine
    problem = json.loads((tmp_path / "grade.json").read_text())["problems"][0]
    entry = problem["leaderboard"]
    assert problem["stand_in"] is True
    assert entry["verified"] is True and entry["board"] == leaderboard.STAND_IN and entry["mfu"] is None

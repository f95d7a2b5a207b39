"""benchmarks/gpu.sh, gpu_bench.py and gpu_report.py: a CPU smoke run (tiny
sizes) that must say it is not a GPU figure, the contrast loops doing the
graded work, and the table's verdicts. (gpu.sh itself runs whole in
selftest/test_gpu_rehearsal.py, as a GPU node would run it.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch

from benchmarks import gpu_bench, gpu_report
from grader.mfu import measure
from tests.local import LocalImpl
from tests.scenarios import mfu as scenarios

REPO = Path(__file__).resolve().parent.parent


def test_cpu_smoke_run_writes_a_table_marked_not_gpu(tmp_path, capsys):
    out = tmp_path / "bench.md"
    assert gpu_bench.main(["--device", "cpu", "--out", str(out)]) == 0
    text = out.read_text()
    assert "NOT GPU figures" in text and "NOT A GPU FIGURE" in text
    for row in ("bf16 matmul 256^3", "reference train", "fp32 + loss.item() every step",
                "device copy bandwidth", "AdamW step, foreach", "verification: PARTIAL: half of each batch"):
        assert row in text, f"missing row {row!r}:\n{text}"
    assert "not available" not in text, text
    verification = [line for line in text.splitlines() if line.startswith("| verification: ") and "must be" in line]
    assert len(verification) == 4 and "**WRONG**" not in text, text
    assert "no GPU" in capsys.readouterr().err


def _results(tmp_path: Path, statuses: dict[str, tuple[str, list[str]]]) -> Path:
    """gpu.sh's work folder with a grade result per stem: (mfu status, items lost)."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    items = ["train does the reference's work", "MFU is a fraction of the reference's"]
    for stem, (status, lost) in statuses.items():
        problems = [{"name": "mfu", "status": status, "output": "", "checks": [],
                     "items": [{"name": n, "points": 1, "score": 0 if n in lost else 1} for n in items]}]
        if stem == "reference":
            problems += [{"name": "precision", "status": "passed"}]
        (work / f"{stem}.json").write_text(json.dumps({"problems": problems, "score": 0, "max_score": 0,
                                                       "sandbox": "unprivileged uid 60001 (...)"}))
        (work / f"{stem}.rc").write_text("0")
    (work / "bench.json").write_text(json.dumps({"bf16_matmul": 1e12, "fp32_matmul": 1e12}))
    return work


def test_the_table_marks_every_verdict_missed(tmp_path):
    """benchmarks/gpu_report.py: a grade row is UNEXPECTED unless the MFU
    problem got its verdict (a partial loop must lose the work item); on the
    CPU standing in, where bf16 is no faster than fp32, the slow loop may pass."""
    rejected = ("failed", ["train does the reference's work", "MFU is a fraction of the reference's"])
    good = {"reference": ("passed", []), "slow_loop": ("failed", ["MFU is a fraction of the reference's"]),
            "gpu_hog": ("failed", ["MFU is a fraction of the reference's"]), "half_steps": rejected,
            "half_batch": rejected}
    rows = gpu_report.grade_rows(_results(tmp_path / "good", good), stand_in=True)
    assert len(rows) == 5 and not any("UNEXPECTED" in r for r in rows), rows
    assert gpu_report.sandbox_rows(tmp_path / "good" / "work") == [
        "| grades' sandbox | unprivileged uid 60001 | sandbox: unprivileged uid 60001 (...) |"]
    slow_passes = {**good, "slow_loop": ("passed", [])}
    rows = gpu_report.grade_rows(_results(tmp_path / "cpu", slow_passes), stand_in=True)
    assert "UNEXPECTED" not in rows[1] and "fp32 is not slower than bf16" in rows[1], rows[1]
    rows = gpu_report.grade_rows(_results(tmp_path / "gpu", slow_passes), stand_in=False)
    assert "UNEXPECTED" in rows[1], rows[1]
    for stem, verdict in (("gpu_hog", ("passed", [])), ("half_steps", ("failed", ["MFU is a fraction of the "
                                                                                   "reference's"])),
                          ("reference", ("grader error", ["MFU is a fraction of the reference's"]))):
        rows = gpu_report.grade_rows(_results(tmp_path / stem, {**good, stem: verdict}), stand_in=True)
        assert sum("UNEXPECTED" in r for r in rows) == 1, (stem, rows)
    (tmp_path / "good" / "work" / "gpu_hog.json").unlink()
    rows = gpu_report.grade_rows(tmp_path / "good" / "work", stand_in=True)
    assert "no result" in rows[2] and "UNEXPECTED" in rows[2], rows[2]


def test_gpu_sh_is_valid_bash_calling_the_module():
    script = REPO / "benchmarks" / "gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert "benchmarks.gpu_bench" in script.read_text()
    assert script.stat().st_mode & 0o111, "gpu.sh must be executable"


def test_contrast_loops_do_the_reference_work():
    """The slow loops are slow, not wrong: the MFU check would verify them and fail them on time only."""
    w, data = gpu_bench.TINY, gpu_bench.TINY.as_data()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = LocalImpl("reference")
        expected = ref.scenario(scenarios.train_workload, data, 3, w.steps, 0, "cpu")
        fp32 = ref.scenario(scenarios.train_workload, {**data, "precision": "fp32"}, 3, w.steps, 0, "cpu")
        tolerance = measure.calibrate([(fp32, expected)]).tolerance
        for train in (gpu_bench.slow_train, gpu_bench.synced_bf16_train):
            got = gpu_bench._LoopImpl("x", train).scenario(scenarios.train_workload, data, 3, w.steps, 0, "cpu")
            v = measure.verify_run(got, expected, steps=w.steps, tolerance=tolerance)
            assert v.ok, f"{train.__name__}: {v.message}"
    finally:
        torch.set_num_threads(threads)

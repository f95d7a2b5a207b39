"""benchmarks/gpu.sh and gpu_bench.py: a CPU smoke run (tiny sizes) that must
say it is not a GPU figure, and the contrast loops doing the graded work."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from benchmarks import gpu_bench
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


def test_gpu_sh_smoke_run_writes_one_table_with_every_grade(tmp_path):
    """The whole script, on the CPU: benchmarks and the two MFU-only grades, marked NOT GPU figures."""
    out = tmp_path / "all.md"
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu.sh"), "--smoke", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "NOT GPU figures" in text and "NOT A GPU FIGURE" in text
    for row in ("| grade: grader/corpus/mfu/slow_loop", "| grade: grader/corpus/cheat/gpu_hog",
                "| grade: full grade of the reference | not run", "| GPU tests | not run"):
        assert row in text, f"missing row {row!r}:\n{text}"
    assert text.count("mfu: not run on a GPU") == 2 and "UNEXPECTED" not in text, text


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

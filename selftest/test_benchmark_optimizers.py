"""benchmarks/optimizers.py at tiny sizes, so the script cannot rot: every
candidate runs, the table prints, and the candidates end where torch does."""

from __future__ import annotations

import math

from benchmarks import optimizers as bench


def test_tiny_run_times_every_candidate_and_they_agree(capsys):
    result = bench.main(["--params", "3000", "--tensors", "7", "--repeats", "3", "--warmup", "1"])
    table = capsys.readouterr().out
    assert set(result["medians"]) | set(result["skipped"]) == set(bench.CANDIDATES)
    for name in ("reference AdamW", "torch foreach=False", "torch foreach=True"):
        assert name in result["medians"], f"{name} did not run: {result['skipped']}"
        assert name in table
        assert len(result["times"][name]) == 3
        assert all(t > 0 and math.isfinite(t) for t in result["times"][name])
    assert result["ratio_to_reference"]["reference AdamW"] == 1.0
    assert result["num_tensors"] == 7 and 2000 <= result["num_params"] <= 3000
    # Same gradients, same number of steps: the same parameters, up to rounding.
    assert result["max_param_difference"] < 1e-5, result["max_param_difference"]


def test_shapes_cover_the_requested_size():
    shapes = bench.tensor_shapes(10_000_000, 100)
    total = sum(math.prod(s) for s in shapes)
    assert len(shapes) == 100 and 0.99e7 <= total <= 1e7
    assert any(len(s) == 1 for s in shapes) and any(len(s) == 2 for s in shapes)

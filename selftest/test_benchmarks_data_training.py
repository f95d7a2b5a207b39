"""benchmarks/data.py and benchmarks/training.py at tiny sizes, so the scripts
cannot rot: every row runs, the tables print, the samplers agree, and the
token file is deleted afterwards."""

from __future__ import annotations

import math

import numpy as np
import torch

from benchmarks import data as data_bench
from benchmarks import training as training_bench


def test_tiny_data_run_compares_both_samplers_and_cleans_up(tmp_path, capsys):
    result = data_bench.main(["--file-mib", "2", "--batch-size", "4", "--context-length", "16",
                              "--repeats", "5", "--batches", "60", "--dir", str(tmp_path)])
    table = capsys.readouterr().out
    speed = result["speed"]
    assert speed["same_batches"], "the loop and get_batch drew the same starts: their batches must be equal"
    assert set(speed["medians"]) == {"reference get_batch", "per-row loop"}
    assert all(m > 0 and math.isfinite(m) for m in speed["medians"].values())
    assert [m["reopen"] for m in result["memory"]] == [False, True]
    assert all(m["batches"] == 60 and m["rss_growth"] >= 0 for m in result["memory"])
    assert "speedup" in table and "re-opened every batch" in table
    assert list(tmp_path.iterdir()) == [], "the token file must be deleted"


def test_loop_baseline_gives_windows_shifted_by_one():
    tokens = (np.arange(500) * 7 % 311).astype(np.uint16)  # distinct for 311 positions: a window names its start
    x, y = data_bench.loop_get_batch(tokens, 6, 9, torch.Generator().manual_seed(3))
    rows = np.lib.stride_tricks.sliding_window_view(tokens.astype(np.int64), 10)
    for xi, yi in zip(x.numpy(), y.numpy(), strict=True):
        matches = np.flatnonzero((rows[:, :-1] == xi).all(axis=1))
        assert len(matches), f"{xi} is not a window of the tokens"
        assert (rows[matches[0], 1:] == yi).all(), "y is not x shifted by one"


def test_write_token_file_is_raw_uint16(tmp_path):
    path = tmp_path / "t.bin"
    data_bench.write_token_file(str(path), 1000, chunk=300)
    got = np.fromfile(path, dtype=np.uint16)
    expected = (np.arange(1000, dtype=np.uint64) * 2654435761 % 50257).astype(np.uint16)
    assert np.array_equal(got, expected)


def test_tiny_training_run_times_every_precision(capsys):
    result = training_bench.main(["--dim", "16", "--layers", "2", "--batch", "8", "--steps", "2", "--repeats", "2"])
    table = capsys.readouterr().out
    assert set(result["medians"]) == set(training_bench.PRECISIONS)
    for name in training_bench.PRECISIONS:
        assert len(result["times"][name]) == 2 and all(t > 0 for t in result["times"][name])
        assert math.isfinite(result["last_loss"][name]), name
        assert f"| {name} |" in table
    assert result["ratio_to_fp32"]["fp32"] == 1.0
    assert result["num_params"] == 2 * 16 * 16 + 16

"""How a batch is spread: deterministic shards, a Slurm array job whose merged
shards equal one batch, merges that refuse conflicting shards, and --jobs and
the per-worker memory fitted to the cores and free memory.

The fake grader and the submission builders are in selftest/batching.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from grader.instructor import batch, discovery, files
from selftest.batching import (
    fake_grader_fixture,  # noqa: F401 (the fixture fake_grader)
    read_gradebook,
    run_batch,
    small_class,
)


def test_shards_partition_the_class_deterministically(tmp_path):
    ids = [f"student-{i}" for i in range(200)]
    shards = [[s for s in ids if discovery.shard_index(s, 4) == i] for i in range(4)]
    assert sorted(s for shard in shards for s in shard) == sorted(ids)
    assert all(len(s) > 20 for s in shards), [len(s) for s in shards]
    assert [discovery.shard_index(s, 4) for s in ids] == [discovery.shard_index(s, 4) for s in ids]
    with pytest.raises(SystemExit):
        batch.main(["x", "--shard", "4/4"])


def test_slurm_array_job_and_merge_equal_one_batch(tmp_path, fake_grader):
    expected = small_class(tmp_path / "subs")
    out = tmp_path / "cluster"
    proc = run_batch(tmp_path / "subs", out, "--slurm", "3", "--jobs", "2", "--problems", "precision,views")
    assert proc.returncode == 0, proc.stderr
    script = (out / "grade.sbatch").read_text()
    assert "#SBATCH --array=0-2" in script and "--shard \"${shard}/3\"" in script
    assert "--problems precision,views" in script and "{{" not in script
    for i in range(3):  # what Slurm does: one task per array index
        task = subprocess.run(["bash", str(out / "grade.sbatch")], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SLURM_ARRAY_TASK_ID": str(i), "SLURM_CPUS_PER_TASK": "1"})
        assert task.returncode == 0, task.stderr
    sizes = [len(read_gradebook(out / "shards" / f"shard-{i}")) for i in range(3)]
    assert sum(sizes) == len(expected), sizes
    merge = subprocess.run(["bash", str(out / "merge.sbatch")], capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    merged = read_gradebook(out)
    assert {k: (v["status"], float(v["score"])) for k, v in merged.items()} == expected
    assert (out / "summary.png").exists() and (out / "summary.md").exists()


def test_merge_refuses_conflicting_shards(tmp_path):
    rec = {"batch_version": 1, "id": "a", "source": "x", "submitters": [], "status": "bad zip", "reason": "r",
           "score": 0.0, "max_score": None, "result": None}
    for d, reason in (("s0", "one"), ("s1", "two")):
        files.write_json_atomic(tmp_path / d / "results" / "a.json", {**rec, "reason": reason})
    with pytest.raises(SystemExit, match="graded in both"):
        batch.main(["--merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])


def test_jobs_and_worker_memory_fit_the_free_memory(monkeypatch):
    """--jobs and the per-worker limit shrink so that every worker that can run at once fits."""
    import psutil

    from grader.sandbox import limits

    class VM:
        available = 10 << 30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM)
    jobs, per_worker, message = limits.plan_jobs(8, 8 << 30)
    assert jobs * (limits.TRUSTED_SHARE_BYTES + 2 * per_worker) <= VM.available and "lowered" in message
    assert per_worker >= limits.MIN_WORKER_BYTES and jobs == 1
    VM.available = 200 << 30
    assert limits.plan_jobs(4, 8 << 30) == (4, 8 << 30, "")
    assert limits.worker_slots(8 << 30) == (200 - 1) // 8
    assert limits.fitted_memory_limit(8 << 30) == 8 << 30
    VM.available = 5 << 30
    assert limits.fitted_memory_limit(8 << 30) == limits.MIN_WORKER_BYTES


def test_jobs_never_exceed_the_worker_slots(monkeypatch):
    """Submissions at once never exceed min(cores, memory slots): each grader
    runs one worker at a time."""
    from grader import util
    from grader.sandbox import limits

    monkeypatch.setattr(util, "cores", lambda: 4)
    monkeypatch.setattr(limits, "worker_slots", lambda memory_bytes: 3)
    assert batch.share_budget(1) == 1
    assert batch.share_budget(2) == 2
    assert batch.share_budget(5) == 3
    monkeypatch.setattr(limits, "worker_slots", lambda memory_bytes: 16)
    assert batch.share_budget(8) == 4

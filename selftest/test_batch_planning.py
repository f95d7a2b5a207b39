"""How a batch is spread: deterministic shards, a Slurm array job whose merged
shards equal one batch, merges that refuse conflicting shards, a GPU batch of
the GPU problem merged into a CPU batch, a problem not run shown as such,
and --jobs and the per-worker memory fitted to the cores and free memory.

The fake grader and the submission builders are in selftest/batching.py."""

from __future__ import annotations

import csv
import os
import subprocess

import pytest

from grader.instructor import batch, discovery, files, gradebook
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


def test_slurm_scripts_ask_for_a_gpu_partition_and_refuse_a_second_line(tmp_path, fake_grader):
    """--slurm-partition and --slurm-gres (one GPU per array task) become
    #SBATCH lines of grade.sbatch, before its first command; a value that could
    carry another line (a directive or a command) is refused."""
    small_class(tmp_path / "subs")
    out = tmp_path / "gpu"
    proc = run_batch(tmp_path / "subs", out, "--slurm", "2", "--problems", "mfu", "--slurm-partition", "gpu",
                     "--slurm-gres", "gpu:h100:1")
    assert proc.returncode == 0, proc.stderr
    lines = (out / "grade.sbatch").read_text().splitlines()
    head = lines[:lines.index("set -euo pipefail")]
    assert "#SBATCH --partition=gpu" in head and "#SBATCH --gres=gpu:h100:1" in head, head
    assert "--problems mfu" in (out / "grade.sbatch").read_text()
    plain = tmp_path / "cpu"
    assert run_batch(tmp_path / "subs", plain, "--slurm", "2").returncode == 0
    assert not [ln for ln in (plain / "grade.sbatch").read_text().splitlines()
                if ln.startswith(("#SBATCH --partition", "#SBATCH --gres")) or not ln.strip()]
    for option in ("--slurm-gres", "--slurm-partition", "--slurm-time"):
        bad = run_batch(tmp_path / "subs", tmp_path / "bad", "--slurm", "2", option, "gpu:1\ntouch /tmp/x")
        assert bad.returncode == 2 and option in bad.stderr, bad.stderr
        assert not (tmp_path / "bad" / "grade.sbatch").exists()


def test_merge_refuses_conflicting_shards(tmp_path):
    rec = {"batch_version": 1, "id": "a", "source": "x", "submitters": [], "status": "bad zip", "reason": "r",
           "score": 0.0, "max_score": None, "result": None}
    for d, reason in (("s0", "one"), ("s1", "two")):
        files.write_json_atomic(tmp_path / d / "results" / "a.json", {**rec, "reason": reason})
    with pytest.raises(SystemExit, match="do not combine"):
        batch.main(["--merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])


def _problem(name: str, score: float, points: float, status: str) -> dict:
    if status == "not run on a GPU":
        return {"name": name, "score": 0.0, "max_score": 0.0, "status": status, "not_counted": points, "items": []}
    return {"name": name, "score": score, "max_score": points, "status": status, "not_counted": 0.0, "items": []}


def _record(sub_id: str, content: str, *problems: dict) -> dict:
    score, most = sum(p["score"] for p in problems), sum(p["max_score"] for p in problems)
    result = {"score": score, "max_score": most, "problems": list(problems), "gpu_points_not_run": sum(
        p["not_counted"] for p in problems if p["status"] == "not run on a GPU")}
    return {"batch_version": 1, "id": sub_id, "source": sub_id, "content": content, "submitters": [],
            "status": "graded", "reason": "", "score": score, "max_score": most, "grader_args": [],
            "wall_time": 1.0, "result": result}


def test_a_problem_not_run_is_shown_as_not_run(tmp_path):
    """The GPU problem on a CPU machine: "not run" in the gradebook's cell, the
    summary's pass rate and mean, and the plot; never 0 or 0%."""
    records = [_record(s, s, _problem("precision", score, 10, status), _problem("mfu", 0, 5, "not run on a GPU"))
               for s, score, status in (("alice", 10, "passed"), ("bob", 4, "failed"))]
    rows = {r["id"]: r for r in csv.DictReader(gradebook.gradebook_csv(records).splitlines())}
    assert rows["alice"]["mfu"] == rows["bob"]["mfu"] == "not run" and rows["bob"]["precision"] == "4"
    summary = gradebook.write_outputs(tmp_path, records, quiet=True)
    by = {p["name"]: p for p in summary["problems"]}
    assert by["mfu"]["pass_rate"] is None and by["mfu"]["mean_score"] is None
    assert by["precision"]["pass_rate"] == 0.5 and by["precision"]["mean_score"] == 7
    assert "| mfu | 5 | not run | not run |" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "summary.png").stat().st_size > 0


def test_a_gpu_batch_of_the_gpu_problem_merges_into_the_cpu_batch(tmp_path):
    """``batch --merge CPU_OUT GPU_OUT``: each submission takes the GPU's result
    for the problem the CPU batch did not run, and its totals add up again; two
    gradings of another content, or of one problem with two results, are refused."""
    cpu = [_record(s, s, _problem("precision", 10, 10, "passed"), _problem("mfu", 0, 5, "not run on a GPU"))
           for s in ("alice", "bob")]
    gpu = [_record("alice", "alice", _problem("mfu", 5, 5, "passed")),
           _record("bob", "bob", _problem("mfu", 0, 5, "failed"))]
    for d, recs in (("cpu", cpu), ("gpu", gpu)):
        for rec in recs:
            files.write_json_atomic(tmp_path / d / "results" / f"{rec['id']}.json", rec)
    assert batch.main(["--merge", str(tmp_path / "cpu"), str(tmp_path / "gpu"), "--out", str(tmp_path / "m"),
                       "--quiet"]) == 0
    rows = read_gradebook(tmp_path / "m")
    assert (rows["alice"]["score"], rows["alice"]["max_score"], rows["alice"]["mfu"]) == ("15", "15", "5")
    assert (rows["bob"]["score"], rows["bob"]["max_score"], rows["bob"]["mfu"]) == ("10", "15", "0")
    assert rows["alice"]["gpu_points_not_run"] == "0"

    files.write_json_atomic(tmp_path / "gpu" / "results" / "bob.json",
                            _record("bob", "bob-resubmitted", _problem("mfu", 5, 5, "passed")))
    with pytest.raises(SystemExit, match="do not combine"):
        batch.main(["--merge", str(tmp_path / "cpu"), str(tmp_path / "gpu"), "--out", str(tmp_path / "m2")])
    files.write_json_atomic(tmp_path / "gpu" / "results" / "bob.json",
                            _record("bob", "bob", _problem("precision", 3, 10, "failed")))
    with pytest.raises(SystemExit, match="do not combine"):
        batch.main(["--merge", str(tmp_path / "cpu"), str(tmp_path / "gpu"), "--out", str(tmp_path / "m3")])


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

"""``batch --slurm`` through a real Slurm: the scripts it writes, submitted as
docs/instructors.md says, to a single-node cluster of Debian's slurm-wlm and
munge (selftest/slurm_cluster.py) started for the test and stopped after it.

- The array job and the dependent merge job grade a class of two (the
  reference and the untouched stubs, one per array task) into a gradebook
  equal to a local ``batch`` of the same class.
- A cluster that does not come up is a skip naming why, and leaves no
  process behind.
- A script written with ``--slurm-partition gpu --slurm-gres gpu:1`` is
  accepted by the scheduler and its array task runs on the GPU partition with
  one of the node's stand-in GPUs allocated.

Each test skips, saying why, where Slurm cannot start: not root, slurm-wlm or
munge not installed (CI's runners have neither, and ``./lab setup`` does not
install them), or daemons not up within a minute. To run them, as root:
``apt-get install slurm-wlm munge`` then
``.venv/bin/python -m pytest selftest/test_slurm.py -q``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.instructor import discovery
from selftest.batching import REPO, read_gradebook, run_batch
from selftest.slurm_cluster import GPUS, Cluster, Unavailable, processes_of, single_node, unavailable

PROBLEMS = "precision,views"
#: How long a whole grade of the class may take through the scheduler: a bound, not a measurement.
GRADE_BOUND_S = 900
#: Gradebook columns left out of the comparison: each grade's own wall seconds, which
#: differ from run to run wherever it runs. Every other column is compared.
RUN_DEPENDENT = ("wall_time_s",)


@pytest.fixture(name="slurm")
def slurm_fixture() -> Iterator[Cluster]:
    why = unavailable()
    if why:
        pytest.skip(why)
    try:
        context = single_node()
        cluster = context.__enter__()
    except Unavailable as e:
        pytest.skip(f"Slurm did not start: {e}")
    try:
        yield cluster
    finally:
        context.__exit__(None, None, None)
    assert not cluster.strays, f"processes of the cluster left after it stopped: {cluster.strays}"


def _copy(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest / "student", ignore=shutil.ignore_patterns("__pycache__"))


def _graded(out: Path) -> dict[str, tuple[dict[str, str], str, list[tuple[object, ...]]]]:
    """What a batch decided, per submission: its gradebook row (less the
    run-dependent columns), the isolation it was graded in and, per problem, the
    status, scores, rubric items and each check's outcome from its results file."""
    rows = {sid: {k: v for k, v in row.items() if k not in RUN_DEPENDENT} for sid, row in read_gradebook(out).items()}
    decided = {}
    for sid, row in rows.items():
        result = json.loads((out / "results" / f"{sid}.json").read_text())["result"]
        problems = [(p["name"], p["status"], p["score"], p["max_score"],
                     [(i["name"], i["status"], i["score"]) for i in p["items"]],
                     sorted((c["test"], c["outcome"]) for c in p["checks"]))
                    for p in result["problems"]]
        decided[sid] = (row, result["sandbox"], problems)
    return decided


def _finished_ok(slurm: Cluster, job_id: str, log: Path) -> list[dict[str, str]]:
    """Every task of the job, once all have finished, each COMPLETED with exit 0."""
    tasks = slurm.wait(job_id, GRADE_BOUND_S)
    bad = [(t.get("JobId"), t.get("JobState"), t.get("ExitCode")) for t in tasks
           if (t.get("JobState"), t.get("ExitCode")) != ("COMPLETED", "0:0")]
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(log.glob("*.out")))
    assert tasks and not bad, f"job {job_id}: {bad}{logs}{slurm.log_tails()}"
    return tasks


@pytest.mark.full
@pytest.mark.timeout(GRADE_BOUND_S + 300)
def test_a_class_graded_through_slurm_equals_a_local_batch(tmp_path, slurm):
    """The array job grades one submission per task, the merge job (afterany,
    as documented) builds the gradebook, summary and plot, and every status,
    score, rubric item and check outcome equals a local batch of the same class."""
    subs = tmp_path / "class"
    _copy(REPO / "reference", subs / "ref")
    _copy(REPO / "student", subs / "stubs")
    assert sorted(discovery.shard_index(s, 2) for s in ("ref", "stubs")) == [0, 1]  # one per array task
    out = tmp_path / "slurm"
    wrote = run_batch(subs, out, "--slurm", "2", "--problems", PROBLEMS)
    assert wrote.returncode == 0, wrote.stderr
    # The local batch grades beside the cluster: the grade does not depend on the machine's load.
    local = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(subs), "--problems", PROBLEMS,
                              "--out", str(tmp_path / "local"), "--quiet"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        grade = slurm.submit(out / "grade.sbatch")
        merge = slurm.submit(out / "merge.sbatch", f"--dependency=afterany:{grade}")
        _finished_ok(slurm, merge, out / "logs")  # the merge starts once the array job has ended
        local_output, _ = local.communicate(timeout=GRADE_BOUND_S)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    tasks = _finished_ok(slurm, grade, out / "logs")
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1"], tasks
    assert [len(read_gradebook(out / "shards" / f"shard-{i}")) for i in range(2)] == [1, 1]
    assert local.returncode == 0, local_output

    merged, expected = _graded(out), _graded(tmp_path / "local")
    assert merged == expected
    assert {sid: (row["status"], row["score"]) for sid, (row, _, _) in merged.items()} == {
        "ref": ("graded", "20"), "stubs": ("graded", "0")}
    assert (out / "summary.md").exists() and (out / "summary.png").stat().st_size > 0


@pytest.mark.timeout(GRADE_BOUND_S + 300)
def test_slurm_runs_the_gpu_batch_on_its_partition_with_a_gpu(tmp_path, slurm):
    """A script written with ``--slurm-partition gpu --slurm-gres gpu:1`` passes
    ``sbatch --test-only`` (asking for more GPUs than the node has does not:
    the scheduler reads the request), and its array task runs on the GPU
    partition with one GPU allocated and grades its shard. It is submitted with
    ``--export=NONE``, as on sites that do not pass the submitter's
    environment to jobs: the script needs nothing of it."""
    subs = tmp_path / "class"
    _copy(REPO / "student", subs / "stubs")
    out = tmp_path / "gpu"
    wrote = run_batch(subs, out, "--slurm", "1", "--problems", "precision", "--slurm-partition", "gpu",
                      "--slurm-gres", "gpu:1")
    assert wrote.returncode == 0, wrote.stderr
    script = str(out / "grade.sbatch")
    accepted = slurm.run("sbatch", "--test-only", script)
    assert "in partition gpu" in accepted.stderr, accepted.stderr
    refused = slurm.run("sbatch", "--test-only", f"--gres=gpu:{GPUS + 1}", script, check=False)
    assert refused.returncode != 0, refused.stderr

    [task] = _finished_ok(slurm, slurm.submit(out / "grade.sbatch", "--export=NONE"), out / "logs")
    assert task["Partition"] == "gpu" and task.get("JOB_GRES") == "gpu:1", task
    row = read_gradebook(out / "shards" / "shard-0")["stubs"]
    assert (row["status"], row["score"], row["max_score"], row["precision"]) == ("graded", "0", "10", "0"), row


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cluster is Linux's")
def test_where_slurm_cannot_start_the_reason_says_why(monkeypatch):
    """Not root, or binaries missing: the skip reason says which, and how to install them."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in (unavailable() or "")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None if name in ("slurmd", "munged") else name)
    why = unavailable() or ""
    assert "munged, slurmd not found" in why and "sbatch" not in why and "apt-get install slurm-wlm munge" in why


def test_a_cluster_that_does_not_come_up_says_so_and_leaves_nothing(monkeypatch):
    """The daemons are started, the node is given no time to show idle: the
    error names the bound and the node's state, and every daemon is gone."""
    why = unavailable()
    if why:
        pytest.skip(why)
    roots: list[str] = []
    made = tempfile.mkdtemp

    def mkdtemp(**kwargs: str) -> str:
        roots.append(made(**kwargs))
        return roots[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    with pytest.raises(Unavailable, match=r"not idle 0 s after the daemons started \(sinfo: "), \
            single_node(start_bound_s=0):
        pass
    [root] = roots
    assert not processes_of(Path(root)) and not Path(root).exists()

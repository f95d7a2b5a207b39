"""The grader fits where courses grade: in Gradescope's default autograder
container (half a CPU, 768 MiB, killed at 10 minutes: a memory cgroup with a
CPU quota, where this machine lets a test make one) the reference gets full
marks, the kernel kills nothing, and the grade ends with minutes to spare,
on a quiet machine and beside busy ones; it does in 640 MiB too. In a
container too small for a worker's promised memory, the worker the kernel
kills for memory is a grader error, never the submission's.
docs/instructors.md gives the figures and the settings to pick."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from selftest import container
from selftest.load import busy_machine

REPO = Path(__file__).resolve().parent.parent
AVAILABLE, WHY = container.available()
needs_cgroups = pytest.mark.skipif(not AVAILABLE, reason=WHY)

#: Gradescope's default autograder container: memory, CPUs, and when it stops a run.
GRADESCOPE_BYTES, GRADESCOPE_CPUS, GRADESCOPE_SECONDS = 768 << 20, 0.5, 600


def _grade_in(tmp_path: Path, memory_bytes: int, *args: str, cpu_quota: float | None = None,
              timeout: float = 2400) -> tuple[container.Run, dict]:
    sub = tmp_path / "ref"
    shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "result.json"
    run = container.run([sys.executable, "-m", "grader", str(sub), "--json", str(out), "-q", "--reveal-hidden",
                         *args], memory_bytes=memory_bytes, cpus=None, cpu_quota=cpu_quota, cwd=REPO,
                        timeout=timeout)
    assert run.returncode == 0 or run.timed_out, run.stdout[-2000:] + run.stderr[-2000:]
    return run, json.loads(out.read_text())


def _full_marks(run: container.Run, result: dict) -> None:
    bad = [(p["name"], p["status"], p["output"][:300]) for p in result["problems"]
           if p["status"] not in ("passed", "not run on a GPU")]
    assert not bad and result["score"] == result["max_score"], bad
    assert run.oom_kills == 0, f"the kernel killed {run.oom_kills} processes for memory"
    assert not run.timed_out, f"the platform would have stopped the grade at {GRADESCOPE_SECONDS} s"
    print(f"{run.wall_seconds:.0f} s wall, {run.cpu_seconds:.0f} CPU s, peak {run.peak_bytes >> 20} MiB in the "
          f"cgroup, {run.anon_peak >> 20} MiB resident and unreclaimable summed over its processes")


@needs_cgroups
@pytest.mark.full  # minutes at half a CPU (benchmarks/grader.py --memory 768 --cpus 0.5 measures it too)
@pytest.mark.timeout(2 * GRADESCOPE_SECONDS)
@pytest.mark.parametrize("memory", [GRADESCOPE_BYTES, 640 << 20], ids=["768MiB", "640MiB"])
def test_the_reference_gets_full_marks_in_gradescopes_default_container(tmp_path, memory):
    run, result = _grade_in(tmp_path, memory, cpu_quota=GRADESCOPE_CPUS, timeout=GRADESCOPE_SECONDS)
    _full_marks(run, result)
    assert run.wall_seconds <= GRADESCOPE_SECONDS / 2, f"{run.wall_seconds:.0f} s: too little margin on a quiet machine"


@needs_cgroups
@pytest.mark.load
@pytest.mark.full  # ten minutes of a loaded machine: benchmarks/grader.py --busy 3 measures it too
@pytest.mark.timeout(2 * GRADESCOPE_SECONDS)
def test_the_reference_gets_full_marks_in_gradescopes_container_beside_busy_processes(tmp_path):
    """3 busy processes per core beside the container: the quota is not fully
    delivered, and the grade still ends before the platform's limit."""
    with busy_machine(per_core=3, seconds=2 * GRADESCOPE_SECONDS):
        run, result = _grade_in(tmp_path, GRADESCOPE_BYTES, cpu_quota=GRADESCOPE_CPUS, timeout=GRADESCOPE_SECONDS)
    _full_marks(run, result)


@needs_cgroups
@pytest.mark.timeout(1200)
def test_a_worker_killed_for_memory_within_its_promise_is_a_grader_error(tmp_path):
    """512 MiB is too small for the training checks beside the grader's own
    processes: the kernel kills a worker holding no more than the memory it is
    promised (rubric ``worker_memory_mib``): not graded, never the
    submission's; the operator is told the machine is too small."""
    run, result = _grade_in(tmp_path, 512 << 20, "--profile", "dev", "--problems", "training")
    p = result["problems"][0]
    assert run.oom_kills > 0, "the container was not small enough to exercise the case"
    assert p["status"] == "grader error", p["output"][:1000]
    assert "ran out of memory" in p["output"] or "killed by SIGKILL" in p["output"], p["output"][:1000]
    assert "not of your code" in p["output"], p["output"][:1000]
    assert any("a worker the kernel kills for memory is a grader error here" in n for n in result["operator_warnings"])

"""The grader fits the machine it is given: in a container of the stated
minimum size (1 CPU, 1 GiB: a memory cgroup and a cpuset, where this machine
lets a test make them) the reference gets full marks, the kernel kills
nothing, and the grader sized itself from the container (one group, no spare
worker), not from the host. In a container too small for the checks, the
worker the kernel kills for memory below its own limit is a grader error, not
the submission's. docs/instructors.md and the Gradescope bundle's setup.sh
state the minimum."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from selftest import container

REPO = Path(__file__).resolve().parent.parent
AVAILABLE, WHY = container.available()
needs_cgroups = pytest.mark.skipif(not AVAILABLE, reason=WHY)

#: The smallest machine the grader is stated to need (docs/instructors.md, setup.sh).
MINIMUM_BYTES = 1 << 30


def _grade_in(tmp_path: Path, memory_bytes: int, *args: str) -> tuple[container.Run, dict]:
    sub = tmp_path / "ref"
    shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "result.json"
    run = container.run([sys.executable, "-m", "grader", str(sub), "--json", str(out), "-q", *args],
                        memory_bytes=memory_bytes, cpus="0", cwd=REPO, timeout=2400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run, json.loads(out.read_text())


@needs_cgroups
@pytest.mark.full  # ./lab test: the next test grades training, the heaviest problem, in a smaller container
@pytest.mark.timeout(2700)
def test_the_reference_gets_full_marks_in_the_stated_minimum_machine(tmp_path):
    run, result = _grade_in(tmp_path, MINIMUM_BYTES, "--profile", "ci")
    bad = [(p["name"], p["status"], p["output"][:300]) for p in result["problems"]
           if p["status"] not in ("passed", "not run on a GPU")]
    assert not bad and result["score"] == result["max_score"], bad
    assert run.oom_kills == 0, f"the kernel killed {run.oom_kills} processes for memory"
    assert any("memory limit lowered" in n for n in result["notes"]), result["notes"]


@needs_cgroups
@pytest.mark.timeout(1200)
def test_a_worker_killed_for_memory_below_its_limit_is_a_grader_error(tmp_path):
    """576 MiB is too small for the training checks (measured: the worker is
    killed saving or loading a 64 MiB checkpoint; at 640 MiB only sometimes):
    not graded, never the submission's."""
    run, result = _grade_in(tmp_path, 576 << 20, "--profile", "dev", "--problems", "training")
    p = result["problems"][0]
    assert run.oom_kills > 0, "the container was not small enough to exercise the case"
    assert p["status"] == "grader error", p["output"][:1000]
    assert "the machine ran out of memory" in p["output"] and "not of your code" in p["output"], p["output"][:1000]

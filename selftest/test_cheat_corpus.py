"""Every cheating submission in grader/corpus/cheat earns none of the points it
targets, and the grader exits normally with reports of its own."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.corpus import build_cheat
from grader.sandbox import bwrap_usable
from grader.worker import _ARCH

REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "grader" / "corpus" / "cheat"
BWRAP, WHY = bwrap_usable()
SECCOMP = sys.platform == "linux" and platform.machine() in _ARCH

# name: (problems it targets, what it needs to be graded safely here, expected statuses)
CASES = {
    "conftest_inside": ("precision", None, "failed"),
    "conftest_beside": ("precision", None, "failed"),
    "patch_allclose": ("precision", None, "failed"),
    "always_equal": ("precision", None, "failed"),
    "tensor_subclass": ("einops_ops", None, "failed"),
    "sys_exit": ("precision", None, "error"),
    "os_exit": ("precision", None, "error"),
    "write_results": ("precision", "bwrap", "failed"),
    "read_reference": ("precision", "bwrap", "failed"),
    "patched_timers": ("precision", None, "failed"),
    "infinite_loop": ("precision", None, "timeout"),
    "memory_bomb": ("precision", None, "failed|timeout"),
    "fork_bomb": ("precision", "seccomp", "failed"),
    "print_flood": ("precision", None, "failed"),
    "syntax_error": ("precision", None, "error"),
    "missing_module": ("precision", None, "error"),
    "hostile_replies": ("precision", None, "error"),
    # On a GPU it fails on speed (benchmarks/gpu.sh grades it there); here it is not run.
    "gpu_hog": ("mfu", None, "failed|timeout" if torch.cuda.is_available() else "not run on a GPU"),
    # Forged in-worker facts: otherwise-correct modules (the patched reference)
    # with one kind of bug, plus scenarios replaced to report what a correct
    # module would. They must lose the problem, as the stubs do.
    "forge_delegation": ("optimizers", None, "failed"),
    "forge_checkpoints": ("training", None, "failed"),
    "forge_memory": ("data,training", None, "failed"),
    "forge_resume": ("training", None, "failed"),
}


def test_every_cheat_has_a_case():
    assert sorted(p.name for p in CHEATS.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cheat_gains_nothing(name, tmp_path):
    problems, needs, status = CASES[name]
    if needs == "bwrap" and not BWRAP:
        pytest.skip(f"grading {name} safely needs bubblewrap ({WHY})")
    if needs == "seccomp" and not SECCOMP:
        pytest.skip(f"grading {name} safely needs the seccomp filter (Linux x86_64/aarch64)")
    out, gs = tmp_path / "result.json", tmp_path / "gradescope.json"
    folder = build_cheat(name, tmp_path / "built")
    forged = name.startswith("forge_")  # whole problems of real work: the limits of a real submission
    call_timeout = "4" if name == "infinite_loop" else "60" if forged else "10"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(folder), "--problems", problems, "--profile", "dev",
         "--json", str(out), "--gradescope", str(gs), "--call-timeout", call_timeout,
         "--time-limit", "600" if forged else "60", "--memory-limit", "8" if forged else "1.5"],
        cwd=REPO, capture_output=True, text=True, timeout=1800 if forged else 600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, f"the grader failed on {name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    result, gradescope = json.loads(out.read_text()), json.loads(gs.read_text())
    assert result["submission"] == str(folder), "the results file is not the grader's"
    assert result["score"] == 0 and gradescope["score"] == 0, f"{name} earned points: {result}"
    by = {p["name"]: p for p in result["problems"]}
    for p in problems.split(","):
        assert by[p]["score"] == 0 and by[p]["status"] in status.split("|"), (by[p]["status"], by[p]["output"][:2000])
    assert "score 0/" in proc.stdout
    if name == "print_flood":
        assert len(by["precision"]["log"]) < (64 << 10) + 200 and "dropped" in by["precision"]["log"]
    if name == "write_results":
        assert not list(REPO.glob("**/results.json")), "a forged results file appeared in the repository"

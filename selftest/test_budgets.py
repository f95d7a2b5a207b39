"""The grade does not depend on the machine: CPU-time budgets, checks cut short,
faults of the machine, and full marks on a busy machine.

* A problem whose CPU budget runs out says so in all four reports: the checks
  that did not run are "not run" (never "failed", no first failure, no input
  kind), the items whose checks all ran and passed keep their points.
* A worker that cannot start (bubblewrap passes its probe, then fails: exit
  127) is a "grader error" in all four reports, regraded once, and never the
  submission's mistake.
* On a machine running 3 busy processes per core (marker ``load``: ``./lab
  test`` runs these alone, after the other selftests), the reference and a
  correct solution 5 times slower than it (the ``*-five_times_slower`` entries
  of the correct corpus: every call costs 5 times the reference's CPU time,
  the slowdown the handout promises full marks) keep full marks on optimizers
  and einops_ops, and an infinite loop is still stopped by its CPU limit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import budgets
from grader.corpus import CORPUS, build_correct, correct_submissions
from grader.sandbox.isolation import bwrap_usable
from selftest.load import busy_machine
from selftest.sampling import FULL

REPO = Path(__file__).resolve().parent.parent


def grade(submission: Path, out: Path, *args: str, env: dict[str, str] | None = None,
          timeout: float = 1500) -> tuple[subprocess.CompletedProcess[str], dict, dict, ET.Element]:
    """Grade into every report; (process, --json, Gradescope, JUnit root)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {k: out / f"result.{k}" for k in ("json", "gs.json", "xml")}
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(submission), "--json", str(files["json"]), "--gradescope",
         str(files["gs.json"]), "--junit", str(files["xml"]), *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return (proc, json.loads(files["json"].read_text()), json.loads(files["gs.json"].read_text()),
            ET.fromstring(files["xml"].read_text()))


def reference_copy(folder: Path) -> Path:
    """The reference as a submission in ``folder``."""
    shutil.copytree(REPO / "reference", folder / "student", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def reference_with(tmp: Path, module: str, find: str, replace: str) -> Path:
    """The reference as a submission, one module patched."""
    folder = reference_copy(tmp / "sub")
    target = folder / "student" / f"{module}.py"
    text = target.read_text()
    assert text.count(find) == 1, f"{find!r} is not in {target} once"
    target.write_text(text.replace(find, replace))
    return folder


#: A correct overflows() that burns 0.2 CPU s per call: the problem's budget runs out within its checks.
SLOW_OVERFLOWS = ('def overflows(value: float, dtype: torch.dtype) -> bool:\n',
                  'def overflows(value: float, dtype: torch.dtype) -> bool:\n'
                  '    import time as _t\n'
                  '    _start = _t.process_time()\n'
                  '    while _t.process_time() - _start < 0.2:\n'
                  '        pass\n')


def test_a_problem_cut_by_its_budget_says_so_in_every_report(tmp_path):
    folder = reference_with(tmp_path, "precision", *SLOW_OVERFLOWS)
    # Public checks only: the public file runs the first items' checks (bytes, float formats) before
    # the first overflows() check; hidden checks of every item come after it.
    proc, result, gs, junit = grade(folder, tmp_path / "out", "--problems", "precision", "--profile", "dev",
                                    "--public-only", "--cpu-budget", "4")
    p = result["problems"][0]
    assert p["status"] == "timeout" and 0 < p["not_run"] < len(p["checks"]), p["output"]
    assert 4 <= p["cpu"] < 6 and p["cpu_budget"] == 4, (p["cpu"], p["cpu_budget"])
    unrun = [c for c in p["checks"] if c["outcome"] == "not run"]
    assert unrun and all(c["message"] in ("", "details withheld") or "did not run" in c["message"] for c in unrun)
    items = {i["name"]: i for i in p["items"]}
    cut = [i for i in p["items"] if i["not_run"]]
    kept = [i for i in p["items"] if i["status"] == "passed"]
    assert cut and kept, items  # items whose checks all ran before the cut keep their points
    assert p["score"] == sum(i["points"] for i in kept) > 0
    for i in cut:
        assert i["status"] == "not run" and i["score"] == 0 and i["failure"] is None, i
        assert "did not run" in i["note"], i["note"]
    assert "Cut short: the problem's CPU budget of 4 s ran out" in p["output"]
    assert "your code used" in p["output"] and "checks did not run" in p["output"]
    assert "hidden check failed" not in p["output"].lower()
    assert "cut short: used" in proc.stdout and "checks did not run" in proc.stdout
    by_name = {t["name"].split(": ", 1)[1]: t for t in gs["tests"]}
    for i in cut:
        t = by_name[i["name"]]
        assert t["score"] == 0 and t["status"] == "failed" and "not run" in t["output"], t
        assert "hidden check failed" not in t["output"].lower()
    for i in kept:
        assert by_name[i["name"]]["status"] == "passed"
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    for i in cut:
        failure = cases[i["name"]].find("failure")
        assert failure is not None and failure.get("type") == "not run", ET.tostring(cases[i["name"]])


def _fake_bwrap(folder: Path) -> Path:
    """A ``bwrap`` that passes the grader's probe (it runs ``true``) and then
    exits 127 for anything else, as if bubblewrap vanished after the check."""
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text('#!/bin/sh\nfor last; do :; done\n[ "$last" = true ] && exit 0\nexit 127\n')
    fake.chmod(0o755)
    return folder


@pytest.mark.skipif(sys.platform != "linux", reason="the grader runs bubblewrap on Linux only")
def test_a_worker_that_cannot_start_is_a_grader_error_in_every_report(tmp_path):
    bin_dir = _fake_bwrap(tmp_path / "bin")
    folder = reference_copy(tmp_path / "sub")
    proc, result, gs, junit = grade(folder, tmp_path / "out", "--problems", "views", "--profile", "dev",
                                    "--sandbox", "bwrap",
                                    env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    p = result["problems"][0]
    assert p["status"] == "grader error" and p["score"] == 0, p["output"]
    assert "not graded" in p["output"] and "not of your code" in p["output"]
    assert "status 127" in p["output"] and "did the submission" not in p["output"]
    assert all(i["status"] == "grader error" and i["failure"] is None for i in p["items"]), p["items"]
    assert any("regraded alone after a grader error" in n for n in result["notes"]), result["notes"]
    assert "not graded because of a grader error" in proc.stdout
    assert all(t["score"] == 0 and "not graded" in t["output"] for t in gs["tests"]), gs["tests"]
    assert "grader error" in gs["output"]
    assert int(junit.attrib["errors"]) == len(p["items"]) and int(junit.attrib["failures"]) == 0
    assert all(c.find("error") is not None for c in junit.iter("testcase"))


def test_budgets_cover_every_check_file_in_every_profile():
    """grader/budgets.toml holds the reference's cost of every check file the
    rubric grades on a CPU, in every profile (else its budget is a guess)."""
    from grader.rubric import load
    from grader.util import PROFILES

    costs = budgets.load()
    files = [f for p in load().problems if not p.gpu for f in p.check_files(REPO)]
    missing = [(profile, f) for profile in PROFILES for f in files if costs.file(profile, f) is None]
    assert not missing, f"not in grader/budgets.toml (run python -m grader calibrate): {missing}"
    assert costs.workload_seconds > 0


def test_a_workers_limits_sit_above_every_budget_and_scale_with_the_machine():
    """A worker's RLIMIT_CPU is above the largest budget it may serve (or
    --cpu-budget, when larger) plus its start-up on this machine; a call's and
    a start-up's CPU seconds scale with the machine's speed, and --call-cpu
    replaces a call's as given."""
    from grader.protocol import ProblemSpec
    from grader.rubric import Problem, Settings

    costs = budgets.Costs(1.0, "test", {"dev": {"a.py": budgets.FileCost(4.0, 1.0),
                                                "b.py": budgets.FileCost(10.0, 1.0)}})
    a, b = (Problem(n, "", 1.0, "visible", (f"{n}.py",)) for n in "ab")
    files = {"a": ("a.py",), "b": ("b.py",)}
    plan = budgets.Budgets("dev", costs, slowdown=5.0, floor=20.0, speed=2.0)
    assert plan.of(a, files["a"])[0] == 80.0 and plan.of(b, files["b"])[0] == 200.0  # 2 x 5 x reference x speed
    assert plan.cpu_limit([a, b], files, start_cpu=60.0) == 200 + 60 * 2 + 60
    assert plan.cpu_limit([a], files, start_cpu=60.0) == 80 + 60 * 2 + 60
    bigger = budgets.Budgets("dev", costs, slowdown=5.0, floor=20.0, speed=2.0, override=500.0)
    assert bigger.cpu_limit([a, b], files, start_cpu=60.0) == 500 + 60 * 2 + 60
    assert bigger.spec(a, files["a"]).cpu_budget == 500.0
    settings = Settings(call_cpu=30.0, start_cpu=60.0, wall_factor=10.0, worker_memory_mib=512.0)
    limits = budgets.limits_for(settings, speed=2.0, memory_bytes=3 << 30, cpu_seconds=380)
    assert (limits.call_cpu, limits.start_cpu, limits.cpu_seconds, limits.memory_bytes) == (60.0, 120.0, 380, 3 << 30)
    assert limits.growth_bytes == 512 << 20 and limits.wall_factor == 10.0
    assert budgets.limits_for(settings, speed=2.0, memory_bytes=3 << 30, cpu_seconds=380, call_cpu=7.0).call_cpu == 7.0
    # The trusted process's wall-clock limit grows with its problems' budgets.
    assert budgets.hard_limit_of([ProblemSpec("a", 100.0, ()), ProblemSpec("b", 50.0, ())]) == 1800 + 4 * 150


# --------------------------------------------------------------------------- on a busy machine


def five_times_slower(tmp: Path) -> Path:
    """The reference with the optimizers and the einops functions of the
    ``*-five_times_slower`` correct-corpus entries."""
    entries = [s for s in correct_submissions() if s.name.endswith("five_times_slower")]
    assert {s.problem for s in entries} == {"optimizers", "einops_ops"}, [s.name for s in entries]
    folder = reference_copy(tmp / "five_times_slower")
    for sub in entries:
        built = build_correct(sub, tmp / "built")
        for module in (built / "student").glob("*.py"):
            if module.stem == sub.problem:
                shutil.copy(module, folder / "student" / module.name)
    return folder


@pytest.mark.load
@pytest.mark.timeout(3000)
def test_full_marks_on_a_busy_machine_and_a_hang_still_stopped(tmp_path):
    """3 busy processes per core, each its own session (as other jobs are), for
    the length of the test: a solution 5 times slower than the reference (and,
    with LAB_FULL_CORPUS=1, the reference too) keeps full marks on optimizers
    and einops_ops, within their budgets; an infinite loop is stopped by its
    CPU limit (not the wall-clock backstop)."""
    subs = [("slow", five_times_slower(tmp_path))]
    if FULL:  # what the slower solution passes within its budgets, the reference passes with more to spare
        subs.insert(0, ("reference", reference_copy(tmp_path / "reference")))
    # Budgets are calibrated per profile, so the slower solution's share of its budget is alike in both; the
    # dev profile's fewer examples halve the trusted side's work on the loaded cores (./lab test runs this alone).
    profile = "ci" if FULL else "dev"
    def hang() -> tuple[dict, float]:
        start = time.monotonic()
        _, result, _, _ = grade(CORPUS / "cheat" / "infinite_loop", tmp_path / "out-loop", "--problems", "precision",
                                "--profile", "ci", "--call-cpu", "3")
        return result, time.monotonic() - start

    with busy_machine(per_core=3, seconds=2400), ThreadPoolExecutor(1) as pool:
        loop = pool.submit(hang)  # beside the other grades: one more load on the cores for both
        for name, sub in subs:
            _, result, _, _ = grade(sub, tmp_path / f"out-{name}", "--problems", "optimizers,einops_ops",
                                    "--profile", profile)
            for p in result["problems"]:
                assert p["status"] == "passed" and p["score"] == p["max_score"], (name, p["name"], p["output"])
                assert p["cpu"] < p["cpu_budget"], (name, p["name"], p["cpu"], p["cpu_budget"])
        result, elapsed = loop.result()
    p = result["problems"][0]
    assert p["status"] == "timeout" and p["score"] == 0, p["output"]
    assert "more than 3 CPU s" in p["output"] and "waited" not in p["output"], p["output"]
    backstop = 2 * (10 * 3 + 60) + 120  # two timeouts cut the problem; each call's wall backstop, start-up
    assert elapsed < backstop, f"the loop ran {elapsed:.0f} s on the busy machine, past its backstop"
    assert bwrap_usable()[0] or "rlimits only" in result["sandbox"]

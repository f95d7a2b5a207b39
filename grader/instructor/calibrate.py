"""``python -m grader calibrate``: measure what the reference costs, for the budgets.

Grades the reference (copied as a submission) in each hypothesis profile, a
few times with different hidden seeds, and writes ``grader/budgets.toml``:
per profile and check file, the CPU seconds the reference's workers used for
the file's checks (the most any run used: hidden inputs change with the seed)
and their wall-clock seconds on the trusted side (the median; the planner
balances parallel groups with it), plus this machine's time for the
calibration workload (:func:`grader.sandbox.budgets.workload_seconds`), against which
other machines are scaled (the median of its times before and after each
grade). Run it on an idle machine after changing the
checks or the reference; the budgets are :data:`grader.sandbox.budgets.MARGIN` times
the rubric's ``slowdown`` times these figures.

    python -m grader calibrate [--profiles grade,ci,dev] [--runs 3] [--out grader/budgets.toml]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from grader.engine import Options, grade
from grader.sandbox import budgets
from grader.util import PROFILES, REPO, cores, write_atomic

__all__ = ["main", "measure"]


def measure(profile: str, runs: int, problems: list[str] | None = None,
            workloads: list[float] | None = None) -> dict[str, tuple[float, float]]:
    """Per check file: (worker CPU seconds, the most of ``runs`` grades; wall
    seconds, their median) for the reference in ``profile``. The calibration
    workload is timed before and after each grade into ``workloads`` (the
    machine's speed can drift while it grades)."""
    cpu: dict[str, list[float]] = defaultdict(list)
    wall: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        sub = Path(tmp) / "reference"
        shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
        for run in range(runs):
            if workloads is not None:
                workloads.append(budgets.workload_seconds(repeats=15))
            result = grade(sub, Options(profile=profile, problems=problems, seed=run, reveal_hidden=True))
            if workloads is not None:
                workloads.append(budgets.workload_seconds(repeats=15))
            bad = [f"{p.name}: {p.status}" for p in result.problems if p.status not in ("passed", "not run on a GPU")]
            if bad:
                raise RuntimeError(f"the reference did not pass in the {profile} profile ({'; '.join(bad)}): "
                                   "its costs would mean nothing")
            per_file_cpu: dict[str, float] = defaultdict(float)
            per_file_wall: dict[str, float] = defaultdict(float)
            for p in result.problems:
                for c in p.checks:
                    path = c.test.split("::")[0]
                    per_file_cpu[path] += c.cpu
                    per_file_wall[path] += c.duration
            for path, value in per_file_cpu.items():
                cpu[path].append(value)
                wall[path].append(per_file_wall[path])
    return {path: (max(cpu[path]), statistics.median(wall[path])) for path in sorted(cpu)}


def render(figures: dict[str, dict[str, tuple[float, float]]], workload: float) -> str:
    """``budgets.toml``'s text."""
    machine = (f"{cores()} cores, {platform.machine()} {platform.system()}, Python {platform.python_version()}")
    lines = [
        "# What the reference costs, per hypothesis profile and check file: the CPU seconds",
        "# of its workers (the most of a few grades with different hidden seeds) and the",
        "# wall-clock seconds of the checks on the trusted side (their median). Written by",
        "# `python -m grader calibrate` on an idle machine; grader/sandbox/budgets.py turns these",
        "# into each problem's CPU budget, scaled by how fast the grading machine runs the",
        "# calibration workload compared with this one (workload_seconds).",
        "",
        "[machine]",
        f'description = "{machine}"',
        f"workload_seconds = {workload:.5f}",
    ]
    for profile, files in figures.items():
        lines += ["", f"[profiles.{profile}]"]
        for path, (cpu, seconds) in files.items():
            lines.append(f'"{path}" = {{ worker_cpu = {cpu:.3f}, seconds = {seconds:.2f} }}')
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated hypothesis profiles")
    ap.add_argument("--runs", type=int, default=3, help="grades per profile (each with its own hidden seed)")
    ap.add_argument("--out", type=Path, default=budgets.BUDGETS, help="the file to write")
    args = ap.parse_args(argv)
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown or args.runs < 1:
        print(f"grader calibrate: profiles must be among {PROFILES} and --runs >= 1", file=sys.stderr)
        return 2
    workloads: list[float] = []
    figures = {}
    for profile in profiles:
        print(f"calibrate: grading the reference {args.runs} times in the {profile} profile", file=sys.stderr)
        figures[profile] = measure(profile, args.runs, workloads=workloads)
    workload = statistics.median(workloads)
    write_atomic(args.out, render(figures, workload))
    print(f"calibrate: wrote {args.out} (workload {workload * 1000:.1f} ms on this machine)", file=sys.stderr)
    return 0

"""``python -m grader calibrate``: measure what the reference costs, for the budgets.

Grades the reference (copied as a submission) in each hypothesis profile, a
few times with different hidden seeds, and writes ``grader/budgets.toml``:
per profile and check file, the CPU seconds the reference's workers used for
the file's checks (the most any run used: hidden inputs change with the seed)
and their wall-clock seconds on the trusted side (the median), plus this machine's time for the
calibration workload (:func:`grader.budgets.workload_seconds`), against which
other machines are scaled (the shortest of its times before and after each
grade). Run it on an idle machine after changing the
checks or the reference; the budgets are :data:`grader.budgets.MARGIN` times
the rubric's ``slowdown`` times these figures.

With ``--problems``, only those problems are graded, and the file keeps the
other problems' figures: the new ones are scaled to the machine the file
describes (by the ratio of its workload time to this machine's), and the named
problems' old entries (check files renamed or split included) are replaced.

    python -m grader calibrate [--profiles grade,ci,dev] [--runs 3] [--problems a,b] [--out grader/budgets.toml]
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

from grader import budgets, rubric
from grader.engine import Options, grade
from grader.util import PROFILES, REPO, cores, write_atomic

__all__ = ["main", "measure", "merged"]


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


def merged(old: budgets.Costs, figures: dict[str, dict[str, tuple[float, float]]], workload: float,
           replaced: set[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """``old``'s figures with ``figures`` (measured where the calibration
    workload took ``workload`` seconds) in place of every entry of a file in
    ``replaced`` (the recalibrated problems' check files) or not in ``figures``'
    problems any more; new figures scaled to ``old``'s machine."""
    scale = old.workload_seconds / workload if old.workload_seconds > 0 and workload > 0 else 1.0
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for profile in sorted(set(old.profiles) | set(figures)):
        gone = replaced if profile in figures else set()  # a profile not recalibrated keeps all it had
        kept = {f: (c.worker_cpu, c.seconds) for f, c in old.profiles.get(profile, {}).items() if f not in gone}
        new = {f: (cpu * scale, seconds * scale) for f, (cpu, seconds) in figures.get(profile, {}).items()}
        out[profile] = dict(sorted({**kept, **new}.items()))
    return out


def render(figures: dict[str, dict[str, tuple[float, float]]], workload: float, machine: str = "") -> str:
    """``budgets.toml``'s text."""
    here = f"{cores()} cores, {platform.machine()} {platform.system()}, Python {platform.python_version()}"
    machine = machine or here
    lines = [
        "# What the reference costs, per hypothesis profile and check file: the CPU seconds",
        "# of its workers (the most of a few grades with different hidden seeds) and the",
        "# wall-clock seconds of the checks on the trusted side (their median). Written by",
        "# `python -m grader calibrate` on an idle machine; grader/budgets.py turns these",
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
    ap.add_argument("--problems", default="", help="comma-separated problems to recalibrate (default: all); "
                    "the file keeps the others' figures")
    ap.add_argument("--out", type=Path, default=budgets.BUDGETS, help="the file to write")
    args = ap.parse_args(argv)
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in profiles if p not in PROFILES]
    rub = rubric.load()
    problems = [p for p in args.problems.split(",") if p]
    if unknown or args.runs < 1 or any(p not in {q.name for q in rub.problems} for p in problems):
        print(f"grader calibrate: profiles must be among {PROFILES}, problems among the rubric's, and --runs >= 1",
              file=sys.stderr)
        return 2
    workloads: list[float] = []
    figures = {}
    for profile in profiles:
        print(f"calibrate: grading the reference {args.runs} times in the {profile} profile", file=sys.stderr)
        figures[profile] = measure(profile, args.runs, problems or None, workloads=workloads)
    workload = min(workloads)  # the least disturbed: a timing right after a grade still shares the CPUs
    if problems:
        old = budgets.load(args.out)
        others = {f for q in rub.problems if q.name not in problems for f in q.files}
        replaced = {f for files in old.profiles.values() for f in files if f not in others}
        text = render(merged(old, figures, workload, replaced), old.workload_seconds or workload, old.machine)
    else:
        text = render(figures, workload)
    write_atomic(args.out, text)
    print(f"calibrate: wrote {args.out} (workload {workload * 1000:.1f} ms on this machine)", file=sys.stderr)
    return 0

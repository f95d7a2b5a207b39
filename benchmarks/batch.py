"""Batch grading throughput: submissions graded per minute with --jobs 1, 2, ...

    python -m benchmarks.batch                           # 6 submissions, jobs 1 and 2, precision+views, dev
    python -m benchmarks.batch --submissions 10 --jobs 1 2 4 --problems all --profile grade

Each run grades the same generated class (the reference copied as student/,
so every check runs to the end: the slowest case per check) into a fresh output
folder with the real grader (``python -m grader batch``), and the figure is the
wall-clock time of the whole batch, start-up included: what an instructor
waits for. On a machine shared with other work the figures move with its load;
the load average is printed next to them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_class(root: Path, n: int) -> None:
    for i in range(n):
        shutil.copytree(REPO / "reference", root / f"sub-{i:03d}" / "student",
                        ignore=shutil.ignore_patterns("__pycache__"))


def run(subs: Path, out: Path, jobs: int, grader_args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), "--jobs",
                           str(jobs), "--quiet", *grader_args], cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"batch failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = (out / "gradebook.csv").read_text().splitlines()[1:]
    not_full = [r for r in rows if ",graded," not in r]
    if not_full:
        raise SystemExit(f"some submissions were not graded: {not_full[:3]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--submissions", type=int, default=6)
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--problems", default="precision,views", help="comma-separated, or 'all'")
    p.add_argument("--profile", default="dev", choices=("dev", "ci", "grade"))
    args = p.parse_args(argv)
    grader_args = ["--profile", args.profile] + ([] if args.problems == "all" else ["--problems", args.problems])
    print(f"{args.submissions} submissions (reference as student/), problems: {args.problems}, "
          f"profile: {args.profile}, {os.cpu_count()} CPUs")
    print(f"{'jobs':>4}  {'seconds':>8}  {'per minute':>10}  {'speed-up':>8}  load average")
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as tmp:
        subs = Path(tmp) / "class"
        make_class(subs, args.submissions)
        base = None
        for jobs in args.jobs:
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            seconds = run(subs, Path(tmp) / f"out-{jobs}", jobs, grader_args)
            base = base or seconds
            print(f"{jobs:>4}  {seconds:>8.1f}  {60 * args.submissions / seconds:>10.2f}  {base / seconds:>7.2f}x"
                  f"  {load:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

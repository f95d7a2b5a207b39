"""How long ``python -m grader --help`` takes, beside what it no longer imports.

    python -m benchmarks.cli            # 7 runs of each row
    python -m benchmarks.cli --runs 15

Each row is a fresh interpreter (a subprocess, as a user runs it), timed on the
wall clock around the whole process; the table prints the median, the fastest
and the slowest run. The rows beside ``--help``: a bare interpreter (the floor),
importing the grading pipeline (``grader.engine`` and ``grader.report.render``, what
``--help`` imported before the pipeline was imported after argument parsing),
and importing torch (what a heavy import costs here). Figures, not a verdict:
selftest/test_cli.py checks what makes ``--help`` fast (no torch, no pipeline).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ROWS: tuple[tuple[str, list[str]], ...] = (
    ("python -c pass (the floor)", ["-c", "pass"]),
    ("python -m grader --help", ["-m", "grader", "--help"]),
    ("import grader.engine, grader.report.render", ["-c", "import grader.engine, grader.report.render"]),
    ("import torch", ["-c", "import torch"]),
)


def wall_times(args: list[str], runs: int) -> list[float]:
    """Seconds of ``runs`` fresh ``python ARGS`` processes, one after another."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, timeout=300)
        times.append(time.perf_counter() - start)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cli", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per row (default 7)")
    args = ap.parse_args(argv)
    wall_times(["-c", "pass"], 1)  # warm the file cache for the first row
    print(f"{'row':<38} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.runs} runs each)")
    for name, row in ROWS:
        t = wall_times(row, args.runs)
        print(f"{name:<38} {statistics.median(t):9.3f} {min(t):7.3f} {max(t):7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

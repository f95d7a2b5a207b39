"""A student's first ``pytest``: the public suite on the untouched stubs of the
student release, its wall time and how many lines it prints.

    python -m benchmarks.stubs                 # build the release, run `pytest` in it once
    python -m benchmarks.stubs --repeats 3     # three runs: each figure, and the best
    python -m benchmarks.stubs -- -m precision # arguments after -- go to pytest

The release is built as ``python -m grader release`` builds it (no git
commit), into a temporary folder deleted afterwards, and ``pytest`` runs there
exactly as a student types it: no options (the release's pyproject.toml and
conftest.py supply every default), this interpreter, single-process. The time
is the wall-clock time of the whole command, start-up (importing torch) and
collection included: what the student waits for; next to it, the CPU time of
pytest's process tree (user + system), which a busy machine moves far less: on
an idle machine the single-process run's wall time is about its CPU time. The targets for a
student's first hour: under 30 s on 2 cores, under 200 lines. The
machine's load average is printed before and after, since a busy machine moves
the time (never the line count).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_SECONDS, TARGET_LINES = 30.0, 200


def build_student_release(dest: Path) -> Path:
    """The student release (stubs, public tests, no reference) in ``dest``."""
    from grader.instructor.release import build_release

    build_release(dest, git=False)
    return dest


def run_pytest(folder: Path, pytest_args: Sequence[str] = ()) -> dict[str, Any]:
    """``python -m pytest`` in ``folder``: wall seconds, CPU seconds (its process
    tree's user + system time), exit status, lines printed, last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], cwd=folder, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    lines = (proc.stdout + proc.stderr).splitlines()
    return {"seconds": seconds, "cpu": cpu, "returncode": proc.returncode, "lines": len(lines),
            "summary": lines[-1].strip("= ") if lines else "", "output": proc.stdout + proc.stderr}


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs of pytest (default 1)")
    parser.add_argument("--show", action="store_true", help="print the last run's output")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="stub-bench-") as tmp:
        release = build_student_release(Path(tmp) / "release")
        print(f"student release in {release}; pytest {' '.join(args.pytest_args)}; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.2f} before")
        print(f"{'run':>3}  {'wall s':>7}  {'CPU s':>6}  {'lines':>5}  {'exit':>4}  last line")
        for i in range(args.repeats):
            run = run_pytest(release, args.pytest_args)
            runs.append(run)
            print(f"{i + 1:>3}  {run['seconds']:7.1f}  {run['cpu']:6.1f}  {run['lines']:>5}  {run['returncode']:>4}  "
                  f"{run['summary']}")
    best = min(runs, key=lambda r: r["seconds"])
    print(f"best {best['seconds']:.1f} s wall, {best['cpu']:.1f} s CPU (target < {TARGET_SECONDS:.0f} s), "
          f"{best['lines']} lines "
          f"(target < {TARGET_LINES}); load average {os.getloadavg()[0]:.2f} after")
    if args.show:
        print(runs[-1]["output"])
    return runs


if __name__ == "__main__":
    main()

"""How much the sandbox costs: wall time of grading the reference through the
grader (trusted pytest + one sandboxed worker per problem) against the
in-process public suite (``pytest tests --impl reference``), in one run.

    python benchmarks/grader.py [--profile dev] [--problems a,b]

Prints both times and their ratio (target: under 2x). The grader also runs the
hidden checks, so it is timed twice: public checks only (the like-for-like
ratio) and everything (what grading really costs).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and its own name
# would shadow the grader package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # pytest: 1 = some test failed (still a full run)
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="dev", choices=("dev", "ci", "grade"))
    ap.add_argument("--problems", default=None, help="comma-separated problems (default: all)")
    args = ap.parse_args(argv)
    from grader.rubric import load

    problems = [p for p in load().problems if not args.problems or p.name in args.problems.split(",")]
    public = [c for p in problems for c in p.checks if c.startswith("tests/") and (REPO / c).is_file()]
    select = ["--problems", ",".join(p.name for p in problems)]
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp)
        shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
        local = _timed([sys.executable, "-m", "pytest", *public, "--impl", "reference", "-q", "-p", "no:xdist",
                        "-p", "no:cacheprovider", "--hypothesis-profile", args.profile])
        graded_public = _timed([sys.executable, "-m", "grader", str(sub), "--profile", args.profile,
                                "--public-only", "-q", *select])
        graded_all = _timed([sys.executable, "-m", "grader", str(sub), "--profile", args.profile, "-q", *select])
    print(f"in-process public suite (pytest --impl reference): {local:7.1f} s")
    print(f"grader, public checks only (sandboxed):           {graded_public:7.1f} s  "
          f"ratio {graded_public / local:.2f}x")
    print(f"grader, public + hidden checks (sandboxed):       {graded_all:7.1f} s  "
          f"ratio {graded_all / local:.2f}x")


if __name__ == "__main__":
    main()

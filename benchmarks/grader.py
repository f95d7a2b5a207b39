"""How much the sandbox costs: wall time of grading the reference through the
grader (trusted pytest + sandboxed workers) against the same checks run
in-process by one pytest (``pytest <checks> --impl reference``), side by side in
one run.

    python benchmarks/grader.py [--profile dev|ci|grade] [--problems a,b] [--durations N]
                                [--skip public,sequential]

Rows (each a fresh process, in this order):

* in-process single-process, public checks: ``pytest tests/... --impl reference``;
* in-process single-process, public + hidden checks: the same with
  ``grader/hidden/...`` (the baseline of the full grade);
* grader, public checks only (sandboxed, parallel): like-for-like with the first;
* full grade, sequential (``--parallel 1``: one trusted pytest process, as before
  problems ran in parallel);
* full grade, parallel (``--parallel`` auto: min(cores, problems, memory slots)).

Each grader row is followed by its ratio to the matching in-process row (target
for the full grade, parallel: at most 1.0x). Then, from the trusted side's clock
(the grader's ``--json``): per-problem time of both full grades, and the
slowest checks (``--durations N``, as pytest's ``--durations``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def _graded(sub: Path, profile: str, select: list[str], extra: list[str], json_path: Path) -> tuple[float, Any]:
    seconds = _timed([sys.executable, "-m", "grader", str(sub), "--profile", profile, "-q", "--reveal-hidden",
                      "--json", str(json_path), *select, *extra])
    result = json.loads(json_path.read_text())
    lost = [p["name"] for p in result["problems"] if p["status"] not in ("passed", "not run on a GPU", "no checks")]
    if lost:  # the reference must pass: a timeout (an overloaded machine) cuts the run short
        print(f"WARNING: the reference did not pass {lost} (the next figure is cut short): "
              + "; ".join(p["output"].splitlines()[1][:200] for p in result["problems"]
                          if p["name"] in lost and len(p["output"].splitlines()) > 1), flush=True)
    return seconds, result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="dev", choices=("dev", "ci", "grade"))
    ap.add_argument("--problems", default=None, help="comma-separated problems (default: all)")
    ap.add_argument("--durations", type=int, default=15, metavar="N", help="slowest checks listed (default: 15)")
    ap.add_argument("--skip", default="", help="rows to skip: public (both public-only rows), sequential")
    args = ap.parse_args(argv)
    from grader.rubric import load
    from grader.util import cores

    skip = {s for s in args.skip.split(",") if s}
    problems = [p for p in load().problems if not args.problems or p.name in args.problems.split(",")]
    public = [f for p in problems for f in p.check_files(REPO, public_only=True)]
    everything = [f for p in problems for f in p.check_files(REPO, public_only=False)]
    select = ["--problems", ",".join(p.name for p in problems)]
    pytest = [sys.executable, "-m", "pytest", "--impl", "reference", "-q", "-p", "no:xdist", "-p",
              "no:cacheprovider", "--hypothesis-profile", args.profile]
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"profile {args.profile}, {len(problems)} problems, {cores()} cores, load average {load_before:.1f}",
          flush=True)
    rows: list[tuple[str, float, float | None]] = []
    results: dict[str, Any] = {}

    def show(name: str, seconds: float, ratio: float | None) -> None:  # as measured: a later failure keeps it
        rows.append((name, seconds, ratio))
        print(f"{name:<45} {seconds:7.1f} s" + (f"  ratio {ratio:.2f}x" if ratio is not None else ""), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp)
        shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
        local_public = None
        if "public" not in skip:
            local_public = _timed([*pytest, *public])
            show("in-process single-process, public checks", local_public, None)
        local_all = _timed([*pytest, *everything])
        show("in-process single-process, public + hidden", local_all, None)
        if local_public is not None:
            t, _ = _graded(sub, args.profile, select, ["--public-only"], sub / "public.json")
            show("grader, public checks only (parallel)", t, t / local_public)
        if "sequential" not in skip:
            t, results["sequential"] = _graded(sub, args.profile, select, ["--parallel", "1"], sub / "seq.json")
            show("full grade, sequential (--parallel 1)", t, t / local_all)
        t, results["parallel"] = _graded(sub, args.profile, select, [], sub / "par.json")
        show("full grade, parallel", t, t / local_all)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load_after:.1f}")
    print("\nper-problem time, trusted side (s):")
    names = [p["name"] for p in results["parallel"]["problems"]]
    head = "".join(f"{k:>12}" for k in results)
    print(f"{'problem':<12}{head}")
    for i, name in enumerate(names):
        print(f"{name:<12}" + "".join(f"{r['problems'][i].get('time', 0.0):>12.1f}" for r in results.values()))
    checks = [(c.get("duration", 0.0), p["name"], c["test"]) for p in results["parallel"]["problems"]
              for c in p["checks"]]
    print(f"\nslowest {args.durations} checks (full grade, parallel; worker start-up is in a problem's first):")
    for seconds, problem, test in sorted(checks, reverse=True)[: args.durations]:
        print(f"{seconds:7.2f} s  {problem:<11} {test}")


if __name__ == "__main__":
    main()

"""Where a full grade's CPU goes, beside the same checks run in one process.

    python benchmarks/grader.py [--profile grade] [--problems a,b] [--memory MIB] [--cpus 0.5]
                                [--busy N] [--timeout S] [--skip inprocess]

Grades the reference (copied to a temporary ``X/student``) twice, side by
side in one run, each command in a fresh cgroup that counts the CPU seconds
of every process it ran, alive or not (:mod:`selftest.container`; root with
cgroup v1, or a delegated cgroup v2 subtree, else it stops saying why):

* **in-process**: the same check files in one pytest process
  (``pytest tests/... grader/hidden/... --impl=X --hypothesis-profile P``),
  with one torch thread, as the grader's processes have (a second row with
  torch's default threads shows what spinning thread pools cost);
* **full grade**: ``python -m grader X --json ... --reveal-hidden``, in the
  container asked for (``--memory`` MiB, ``--cpus`` a CFS quota: 768 and 0.5
  are Gradescope's default container) and killed after ``--timeout`` seconds
  as a platform would, with ``--busy N`` busy processes per core beside it.

It prints each row's CPU seconds, wall seconds and memory (the cgroup's
peak, page cache included, and the largest resident memory its processes
held together), the full grade's ratio to the in-process run, and where the
full grade's CPU went, per kind of process, from the grade's own ``--json``
(its ``costs`` and each problem's CPU, read by the trusted side from
outside the workers): the engine (calibration apart), the trusted pytest
processes' start-up and checks, the fork servers' start-up (each imports
torch once), the workers forked, the submission's own calls, sealing
torch.optim, regrades, and what no figure names (bwrap, the fork servers
between forks, the kernel's accounting of exited processes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and its own name
# would shadow the grader package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))

from selftest import container  # noqa: E402
from selftest.load import busy_machine  # noqa: E402


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def breakdown(result: dict[str, Any], total: float) -> list[tuple[str, float]]:
    """(kind, CPU seconds) of a full grade from its ``--json`` (revealed), the
    rest of the cgroup's ``total`` last."""
    costs = result.get("costs", [])
    startup = sum(c["startup"] for c in costs)
    seal = sum(c["seal"] for c in costs)
    trusted = sum(c["trusted"] for c in costs) - startup - seal
    servers = sum(c["server_start"] for c in costs)
    submission = sum(p.get("cpu", 0.0) + p.get("hidden_cpu", 0.0) for p in result["problems"])
    calibration = result.get("calibration_cpu", 0.0)
    engine = result.get("engine_cpu", 0.0) - calibration
    rows = [
        ("engine (staging, scoring, reports)", engine),
        ("calibration workload", calibration),
        (f"trusted pytest start-up ({len(costs)} processes)", startup),
        ("trusted checks (oracles, hypothesis, wire)", trusted),
        (f"fork servers' start-up ({sum(c['servers'] for c in costs)}, torch imported once each)", servers),
        ("sealing torch.optim's sources", seal),
        (f"the submission's calls ({sum(c['workers'] for c in costs)} workers forked)", submission),
    ]
    rows.append(("the rest (bwrap, servers between forks, workers' own start)", total - sum(v for _, v in rows)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="grade", choices=("dev", "ci", "grade"))
    ap.add_argument("--problems", default=None, help="comma-separated problems (default: all)")
    ap.add_argument("--memory", type=int, default=16 << 10, metavar="MIB", help="the grade's memory cap (MiB)")
    ap.add_argument("--cpus", type=float, default=None, help="the grade's CPU quota (e.g. 0.5; default: none)")
    ap.add_argument("--busy", type=int, default=0, metavar="N", help="busy processes per core beside the grade")
    ap.add_argument("--timeout", type=float, default=3600, metavar="S", help="kill the grade after S seconds")
    ap.add_argument("--skip", default="", help="rows to skip: inprocess, threads")
    args = ap.parse_args(argv)
    ok, why = container.available()
    if not ok:
        print(f"not measured: {why}")
        return 2
    from grader.rubric import load
    from grader.util import cores

    skip = {s for s in args.skip.split(",") if s}
    problems = [p for p in load().problems if not args.problems or p.name in args.problems.split(",")]
    files = [f for p in problems for f in p.check_files(REPO, public_only=False)]
    load_before = os.getloadavg()[0]
    print(f"profile {args.profile}, {len(problems)} problems, {cores()} cores, load average {load_before:.1f}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp)
        shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
        big = 64 << 30
        rows: list[tuple[str, container.Run]] = []

        def inprocess(threads: str | None) -> container.Run:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
            if threads is not None:
                env["OMP_NUM_THREADS"] = threads
            return container.run([sys.executable, "-m", "pytest", *files, f"--impl={sub}", "-q", "-p", "no:xdist",
                                  "-p", "no:cacheprovider", "--hypothesis-profile", args.profile],
                                 memory_bytes=big, cpus=None, cwd=REPO, env=env)

        if "inprocess" not in skip:
            rows.append(("in-process, one torch thread", inprocess("1")))
            if "threads" not in skip:
                rows.append(("in-process, torch's default threads", inprocess(None)))
        out = sub / "grade.json"
        select = ["--problems", ",".join(p.name for p in problems)]
        grade_argv = [sys.executable, "-m", "grader", str(sub), "--profile", args.profile, "-q", "--no-progress",
                      "--reveal-hidden", "--json", str(out), *select]
        with busy_machine(args.busy) if args.busy else contextlib.nullcontext():
            graded = container.run(grade_argv, memory_bytes=args.memory << 20, cpus=None, cpu_quota=args.cpus,
                                   cwd=REPO, timeout=args.timeout)
        where = f"{args.memory} MiB" + (f", {args.cpus:g} CPU" if args.cpus else "") + (
            f", {args.busy} busy/core" if args.busy else "")
        rows.append((f"full grade ({where})", graded))
        result = json.loads(out.read_text()) if out.is_file() else None
    base = rows[0][1].cpu_seconds if rows and "inprocess" not in skip else None
    print(f"\n{'row':<44} {'CPU s':>7} {'wall s':>7} {'ratio':>6} {'peak':>9} {'RSS sum':>9} {'anon sum':>9}")
    for name, r in rows:
        ratio = f"{r.cpu_seconds / base:.2f}x" if base else ""
        print(f"{name:<44} {r.cpu_seconds:7.1f} {r.wall_seconds:7.1f} {ratio:>6} {_mib(r.peak_bytes):>9} "
              f"{_mib(r.rss_peak):>9} {_mib(r.anon_peak):>9}")
    print(f"full grade: exit {graded.returncode}, OOM kills {graded.oom_kills}"
          + (", KILLED at the timeout" if graded.timed_out else ""))
    if result is None:
        print("no --json report: the grade wrote none")
        return 1
    lost = [(p["name"], p["status"]) for p in result["problems"] if p["status"] not in ("passed", "not run on a GPU")]
    print(f"score {result['score']:g}/{result['max_score']:g}" + (f"; not passed: {lost}" if lost else ""))
    print("\nwhere the full grade's CPU went:")
    for kind, seconds in breakdown(result, graded.cpu_seconds):
        print(f"  {kind:<70} {seconds:7.1f} s")
    regrades = [n for n in result.get("notes", []) if "regraded" in n]
    if regrades:
        print("regrades: " + "; ".join(regrades))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The grade on an idle and on a busy machine, side by side: wall time, and per
problem the CPU seconds the submission's workers used against their budget and
the reference's, for the reference and the deliberately slow correct solutions.

    python -m benchmarks.budgets [--profile grade] [--problems a,b] [--per-core 3] [--skip slow]

Rows, in this order, each a fresh grader: the reference idle; the reference
with ``--per-core`` busy processes per core (each in its own session, as
other jobs are: ``selftest/load.py``); the same two for the slow solutions
(the ``*-five_times_slower`` correct-corpus entries laid over the reference:
every call of their optimizers and einops functions costs 5 times the
reference's CPU time, the slowdown the handout promises full marks). The ratio
columns are CPU used over the reference's figure for the same checks
(``reference_cpu``, from ``grader/budgets.toml`` scaled to this machine) and
over the budget (must stay below 1); wall time is the grader's own
``execution_time``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))

from selftest.load import busy_machine  # noqa: E402
from selftest.test_budgets import five_times_slower, reference_copy  # noqa: E402


def _grade(sub: Path, profile: str, problems: str | None, out: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "grader", str(sub), "--profile", profile, "-q", "--json", str(out)]
    if problems:
        argv += ["--problems", problems]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the grader failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.budgets", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="grade")
    ap.add_argument("--problems", default=None, help="comma-separated problems (default: all)")
    ap.add_argument("--per-core", type=int, default=3, help="busy processes per core for the loaded rows")
    ap.add_argument("--skip", default="", help="comma-separated: slow (the 5 times slower solution's rows)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-budgets-") as tmp_name:
        tmp = Path(tmp_name)
        subjects = [("reference", reference_copy(tmp / "reference"))]
        if "slow" not in args.skip.split(","):
            subjects.append(("5 times slower", five_times_slower(tmp)))
        for name, sub in subjects:
            for loaded in (False, True):
                out = tmp / f"{sub.name}-{loaded}.json"
                if loaded:
                    with busy_machine(per_core=args.per_core, seconds=3600):
                        result = _grade(sub, args.profile, args.problems, out)
                else:
                    result = _grade(sub, args.profile, args.problems, out)
                rows.append((name, loaded, result))
    print("| submission | machine | problem | status | CPU s | reference CPU s | CPU / reference | CPU / budget |")
    print("|---|---|---|---|---|---|---|---|")
    for name, loaded, result in rows:
        machine = f"{args.per_core} busy per core" if loaded else "idle"
        for p in result["problems"]:
            if p["status"] == "not run on a GPU":
                continue
            ref, budget = p["reference_cpu"], p["cpu_budget"]
            print(f"| {name} | {machine} | {p['name']} | {p['status']} | {p['cpu']:.2f} | {ref:.2f} | "
                  f"{p['cpu'] / ref if ref else 0:.2f} | {p['cpu'] / budget if budget else 0:.3f} |")
    print()
    print("| submission | machine | wall s | score | machine speed |")
    print("|---|---|---|---|---|")
    for name, loaded, result in rows:
        machine = f"{args.per_core} busy per core" if loaded else "idle"
        print(f"| {name} | {machine} | {result['execution_time']:.1f} | {result['score']:g}/{result['max_score']:g} | "
              f"{result.get('speed', 1.0):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

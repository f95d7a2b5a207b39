"""The one table benchmarks/gpu.sh commits: benchmarks, tests and grades together.

``python -m benchmarks.gpu_report --bench BENCH.md --work DIR --out FILE``
reads what gpu.sh left in ``DIR`` (``tests.rc``, ``tests.log``, and for each
grade ``NAME.json`` plus ``NAME.rc``) and appends, below the benchmark table,
one row per test run and per grade: the grader's verdict of each problem
(the MFU problem's first lines of output, which carry its figures when it
fails) and the time it took.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: Grades gpu.sh runs, in order: (file stem, what it is, the MFU verdict it must get on a GPU).
GRADES = (
    ("reference", "full grade of the reference", "passed"),
    ("slow_loop", "grader/corpus/mfu/slow_loop (fp32, loss.item() per step)", "failed"),
    ("gpu_hog", "grader/corpus/cheat/gpu_hog (a bit slow + a GPU hog thread)", "failed"),
)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _last_line(path: Path) -> str:
    """The last non-blank line of a log (the grader's reason when it could not run), or ""."""
    log = path.read_text(errors="replace") if path.is_file() else ""
    return next((ln for ln in reversed(log.strip().splitlines()) if ln.strip()), "")


def grade_rows(work: Path) -> list[str]:
    rows = []
    for stem, what, want in GRADES:
        path, rc_path = work / f"{stem}.json", work / f"{stem}.rc"
        if not rc_path.is_file():
            rows.append(f"| grade: {what} | not run | |")
            continue
        rc = rc_path.read_text().strip()
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            rows.append(f"| grade: {what} | no result (exit {rc}{', timed out' if rc == '124' else ''}) | "
                        f"{_cell(_last_line(work / f'{stem}.log'))[:500]} |")
            continue
        problems = {p["name"]: p for p in result.get("problems", [])}
        mfu = problems.get("mfu", {})
        status = mfu.get("status", "not graded")
        ok = "" if status == want or status == "not run on a GPU" else " **UNEXPECTED**"
        others = [p for n, p in problems.items() if n != "mfu"]
        summary = f"mfu: {status} (must be {want}){ok}"
        if others:
            failed = [p["name"] for p in others if p["status"] != "passed"]
            summary += f"; other problems: {len(others) - len(failed)}/{len(others)} passed"
            if failed:
                summary += f" (not: {', '.join(failed)})"
        detail = " / ".join(mfu.get("output", "").strip().splitlines()[:12])[:1500]
        rows.append(f"| grade: {what} | {_cell(summary)} | score {result.get('score')}/{result.get('max_score')}, "
                    f"{result.get('execution_time', 0):.0f} s; {_cell(detail)} |")
    return rows


def test_rows(work: Path) -> list[str]:
    rc_path = work / "tests.rc"
    if not rc_path.is_file():
        return ["| GPU tests | not run | |"]
    rc = rc_path.read_text().strip()
    last = _last_line(work / "tests.log")
    return [f"| GPU tests (public gpu-marked tests on the reference) | exit {rc} | {_cell(last)} |"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/<date>-<device>[-smoke].md, from the benchmark's title")
    args = parser.parse_args(argv)
    text = args.bench.read_text() if args.bench.is_file() else \
        "# Benchmarks: not run, NOT GPU figures\n\n| measurement | value | notes |\n|---|---|---|\n"
    if args.out is None:
        from benchmarks.gpu_bench import default_out

        title = text.splitlines()[0].removeprefix("# Benchmarks: ")
        args.out = default_out(title, "NOT GPU figures" not in text)
    text = text.rstrip("\n") + "\n" + "\n".join(test_rows(args.work) + grade_rows(args.work)) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The one table benchmarks/gpu.sh commits: benchmarks, tests and grades together.

``python -m benchmarks.gpu_report --bench BENCH.md --work DIR [--stand-in] --out FILE``
reads what gpu.sh left in ``DIR`` (``bench.json``, ``tests.rc``,
``tests.log``, and for each grade ``NAME.json`` plus ``NAME.rc``) and
appends, below the benchmark table, one row per test run and per grade: the
grader's verdict of the MFU problem against the verdict it must get (a row
that misses it is marked UNEXPECTED), the other problems' verdicts for the
full grade, the graded MFU figures and the time it took.

``--stand-in``: the CPU stood in for the GPU (gpu.sh --smoke). Every verdict
must be reached all the same; where the CPU cannot show why a loop fails on a
GPU (the slow loop runs fp32 where the reference runs bf16, and a CPU whose
bf16 matmuls are not faster than its fp32 ones cannot tell them apart), the
row says so and takes either verdict.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.mfu.leaderboard import Entry
from grader.mfu.settings import DEFAULT_CRITERIA


@dataclass(frozen=True)
class Grade:
    """One grade gpu.sh runs: its file stem, what it is, and the MFU verdict it
    must get: "passed"; "failed" (on speed or work); "rejected" (failed, and
    the work item among what it lost)."""

    stem: str
    what: str
    must: str


#: Grades gpu.sh runs, in order.
GRADES = (
    Grade("reference", "full grade of the reference", "passed"),
    Grade("slow_loop", "grader/corpus/mfu/slow_loop (fp32, loss.item() per step)", "failed"),
    Grade("gpu_hog", "grader/corpus/cheat/gpu_hog (twice the work + a GPU hog thread)", "failed"),
    Grade("half_steps", "grader/corpus/mfu/half_steps (PARTIAL: half the steps)", "rejected"),
    Grade("half_batch", "grader/corpus/mfu/half_batch (PARTIAL: half of each batch)", "rejected"),
)
#: The MFU item a partial loop must lose (grader/rubric.toml).
WORK_ITEM = "train does the reference's work"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _last_line(path: Path) -> str:
    """The last non-blank line of a log (the grader's reason when it could not run), or ""."""
    log = path.read_text(errors="replace") if path.is_file() else ""
    return next((ln for ln in reversed(log.strip().splitlines()) if ln.strip()), "")


def _bf16_shows(bench: dict[str, Any]) -> tuple[bool, str]:
    """Whether this device's bf16 matmuls beat its fp32 ones by more than the
    pass fraction allows (so an fp32 loop must fail), and the figures."""
    bf16, fp32 = bench.get("bf16_matmul"), bench.get("fp32_matmul")
    if not bf16 or not fp32:
        return False, "the benchmark's matmul rates are missing"
    return bf16 * DEFAULT_CRITERIA.fraction > fp32, (f"bf16 matmuls {bf16 / 1e9:.0f} GFLOP/s, "
                                                     f"fp32 {fp32 / 1e9:.0f} GFLOP/s")


def _mfu(problem: dict[str, Any]) -> dict[str, float]:
    """The graded MFU figures (the check's recorded figures, instructors' JSON)."""
    out: dict[str, float] = {}
    for check in problem.get("checks", []):
        out.update(check.get("figures", {}))
    return out


def _leaderboard(entry: Any) -> str:
    """Where the graded MFU stands on a leaderboard (grader/mfu/leaderboard.py), or "" where none was graded."""
    e = Entry.from_json(entry)
    if e is None:
        return ""
    if not e.verified:
        return "leaderboard: not listed (work not verified)"
    return f"leaderboard: ranked ({e.board})" if e.ranked else f"leaderboard: not ranked ({'; '.join(e.doubts)})"


def verdict(grade: Grade, result: dict[str, Any], *, stand_in: bool, bench: dict[str, Any]) -> tuple[str, str]:
    """(the row's verdict cell, its notes) for one grade's ``--json`` result."""
    problems = {p["name"]: p for p in result.get("problems", [])}
    mfu = problems.get("mfu", {})
    status = mfu.get("status", "not graded")
    lost = [i["name"] for i in mfu.get("items", []) if i.get("score", 0) < i.get("points", 0)]
    got = "rejected" if status == "failed" and WORK_ITEM in lost else status
    ok = got == grade.must or (grade.must == "failed" and got == "rejected")
    notes: list[str] = []
    if grade.stem == "slow_loop" and stand_in:
        shows, rates = _bf16_shows(bench)
        if not shows and got in ("passed", "failed"):
            ok = True
            notes.append(f"on this CPU fp32 is not slower than bf16 ({rates}): the GPU's verdict cannot be shown "
                         "here, either verdict is expected")
    cell = f"mfu: {got} (must be {grade.must}){'' if ok else ' **UNEXPECTED**'}"
    others = [p for n, p in problems.items() if n != "mfu"]
    if others:
        failed = [p["name"] for p in others if p["status"] != "passed"]
        cell += f"; other problems: {len(others) - len(failed)}/{len(others)} passed"
        if failed:
            cell += f" (not: {', '.join(failed)}) **UNEXPECTED**"
    figures = _mfu(mfu)
    if "mfu_ratio" in figures:
        notes.append(f"MFU {figures['mfu_ratio']:.3f} of the reference's (needs {DEFAULT_CRITERIA.fraction})")
    for key, what in (("mfu_vs_dense_peak", "the submission"), ("reference_mfu_vs_dense_peak", "the reference")):
        if key in figures:
            notes.append(f"{what}: MFU {figures[key]:.3f} of the dense peak")
    notes.append(_leaderboard(mfu.get("leaderboard")))
    if lost:
        notes.append(f"lost: {', '.join(lost)}")
    if got != grade.must:
        notes.append(" / ".join(mfu.get("output", "").strip().splitlines()[:12])[:1500])
    seconds = result.get("wall_time") or result.get("execution_time") or 0
    return cell, f"score {result.get('score')}/{result.get('max_score')}, {seconds:.0f} s; " \
        + "; ".join(n for n in notes if n)


def grade_rows(work: Path, *, stand_in: bool = False) -> list[str]:
    bench = _load(work / "bench.json")
    rows = []
    for grade in GRADES:
        path, rc_path = work / f"{grade.stem}.json", work / f"{grade.stem}.rc"
        if not rc_path.is_file():
            rows.append(f"| grade: {grade.what} | not run **UNEXPECTED** | |")
            continue
        rc = rc_path.read_text().strip()
        result = _load(path)
        if not result:
            rows.append(f"| grade: {grade.what} | no result (exit {rc}{', timed out' if rc == '124' else ''}) "
                        f"**UNEXPECTED** | {_cell(_last_line(work / f'{grade.stem}.log'))[:500]} |")
            continue
        cell, notes = verdict(grade, result, stand_in=stand_in, bench=bench)
        rows.append(f"| grade: {grade.what} | {_cell(cell)} | {_cell(notes)} |")
    return rows


def _load(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def sandbox_rows(work: Path) -> list[str]:
    """The sandbox the grades ran in, as the reference's grade names it."""
    result = _load(work / f"{GRADES[0].stem}.json")
    sandbox = result.get("sandbox", "")
    return [f"| grades' sandbox | {_cell(sandbox.split(' (')[0]) if sandbox else 'unknown'} | "
            f"sandbox: {_cell(sandbox)} |"]


def test_rows(work: Path, *, stand_in: bool = False) -> list[str]:
    rc_path = work / "tests.rc"
    if not rc_path.is_file():
        return ["| GPU tests | not run | |"]
    rc = rc_path.read_text().strip()
    last = _last_line(work / "tests.log")
    what = "GPU tests (public gpu-marked tests on the reference)"
    if stand_in:  # no CUDA: pytest skips every one of them, saying why
        return [f"| {what} | exit {rc}: not run on a GPU | {_cell(last)} |"]
    return [f"| {what} | exit {rc}{'' if rc == '0' else ' **UNEXPECTED**'} | {_cell(last)} |"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--stand-in", action="store_true", help="the CPU stood in for the GPU (gpu.sh --smoke)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/<date>-<device>[-smoke].md, from the benchmark's title")
    args = parser.parse_args(argv)
    text = args.bench.read_text() if args.bench.is_file() else \
        "# Benchmarks: not run, NOT GPU figures\n\n| measurement | value | notes |\n|---|---|---|\n"
    if args.out is None:
        from benchmarks.gpu_bench import default_out

        title = text.splitlines()[0].removeprefix("# Benchmarks: ")
        args.out = default_out(title, "NOT GPU figures" not in text)
    rows = test_rows(args.work, stand_in=args.stand_in) + grade_rows(args.work, stand_in=args.stand_in) \
        + sandbox_rows(args.work)
    text = text.rstrip("\n") + "\n" + "\n".join(rows) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The class's outputs from its records: ``gradebook.csv``, ``summary.md``, ``summary.png``
(with the MFU leaderboard where an MFU was graded: :mod:`.leaderboard`).

Contract: every record is one gradebook row (who, what happened and why, total
and per-problem scores), sorted by id; pass rates count every submission,
including those that could not be graded (they did not pass), except those
where the problem was not run (it needs a GPU the machine lacked): a problem
run for nobody shows "not run", never 0% or 0, in the gradebook, the summary
and its plot. Each problem's counts (:data:`OUTCOMES`) put every submission
in exactly one column, so they add up to the class and, "not run" aside, to
the pass rate's denominator. Files are written atomically (:mod:`.files`), so a reader never
sees half a gradebook.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from grader.instructor import leaderboard
from grader.instructor.files import csv_text
from grader.instructor.records import NOT_COUNTED_STATUSES, STATUSES, stand_in
from grader.util import write_atomic

__all__ = ["NOT_RUN_CELL", "OUTCOMES", "class_summary", "gradebook_csv", "print_summary", "summary_figure",
           "summary_markdown",
           "summary_png", "write_outputs"]

#: A cell of a problem that was not run for that submission (it needs a GPU), where a score would be.
NOT_RUN_CELL = "not run"


def _problem_names(records: Iterable[dict[str, Any]]) -> list[str]:
    """The problems the records' results name, in first-seen order."""
    names: list[str] = []
    for rec in records:
        for prob in (rec.get("result") or {}).get("problems", []):
            if prob.get("name") not in names:
                names.append(prob.get("name"))
    return names


def _class_max(records: Sequence[dict[str, Any]]) -> float | None:
    """The highest max_score among graded records (None when none was graded)."""
    maxes = [r["max_score"] for r in records if r["status"] == "graded"]
    return max(maxes) if maxes else None


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def gradebook_csv(records: Sequence[dict[str, Any]]) -> str:
    """One row per record: who, what happened and why, total and per-problem scores
    (cells a spreadsheet would run as formulas are neutralised: :func:`.files.csv_text`).
    ``stand_in`` names the problems graded with the CPU standing in for a GPU
    (``--cpu-stand-in``): a rehearsal's points, never a GPU's grade."""
    problems = _problem_names(records)
    class_max = _class_max(records)
    # a submission without a result for a problem did not pass it, unless it ran for nobody
    ran = {p.get("name") for r in records for p in (r.get("result") or {}).get("problems", [])
           if _outcome(p) != NOT_RUN_CELL}
    rows = []
    for rec in sorted(records, key=lambda r: r["id"]):
        people = rec.get("submitters") or []
        result = rec.get("result") or {}
        per = {p.get("name"): NOT_RUN_CELL if p.get("status") in NOT_COUNTED_STATUSES else _fmt(p.get("score", 0.0))
               for p in result.get("problems", [])}
        rows.append([
            rec["id"],
            "; ".join(p.get("name", "") for p in people),
            "; ".join(p.get("sid", "") for p in people),
            "; ".join(p.get("email", "") for p in people),
            rec["status"], rec.get("reason", ""),
            _fmt(rec.get("score", 0.0)),
            _fmt(rec.get("max_score") if rec["status"] == "graded" else class_max),
            _fmt(result.get("gpu_points_not_run", 0.0)),
            " ".join(p.get("name", "") for p in result.get("problems", []) if stand_in(p)),
            *[per.get(name, "0" if name in ran else NOT_RUN_CELL) for name in problems],
            _fmt(rec.get("wall_time")), rec.get("source", ""),
        ])
    return csv_text(["id", "name", "sid", "email", "status", "reason", "score", "max_score",
                     "gpu_points_not_run", "stand_in", *problems, "wall_time_s", "source"], rows)

#: A problem's outcomes for one submission, as the summary counts them: every
#: submission is in exactly one, so a row's counts add up to the class size,
#: and all but "not run" to the pass rate's denominator. "not graded": no
#: verdict on that problem (the submission could not be graded at all, or a
#: grader error); "not run": it needs a GPU the machine lacked, or has no checks.
OUTCOMES = ("passed", "failed", "error", "timeout", "not graded", NOT_RUN_CELL)


def _outcome(prob: dict[str, Any] | None) -> str:
    """Which of :data:`OUTCOMES` a submission's result for one problem counts in (None: no result)."""
    status = None if prob is None else prob.get("status")
    if status in NOT_COUNTED_STATUSES:
        return NOT_RUN_CELL
    return status if status in OUTCOMES[:4] else "not graded"


def class_summary(records: Sequence[dict[str, Any]], who: Callable[[str], str] | None = None,
                  ids: str = "pseudonym") -> dict[str, Any]:
    """Per-problem counts of :data:`OUTCOMES` and pass rates (over every submission
    the problem was not left out for: one that could not be graded did not pass;
    ``over`` is that denominator, None rate and mean when it ran for nobody),
    the distribution of total scores and, with ``who`` (a submission id's name
    on a board, :func:`.leaderboard.namer`; ``ids``: which kind), the MFU
    leaderboard's boards (:func:`.leaderboard.boards`)."""
    n = len(records)
    statuses = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    problems = []
    for name in _problem_names(records):
        entries = [next((p for p in (r.get("result") or {}).get("problems", []) if p.get("name") == name), None)
                   for r in records]
        counts = dict.fromkeys(OUTCOMES, 0)
        for p in entries:
            counts[_outcome(p)] += 1
        # a problem's worth, where it counted or not (max_score 0 and not_counted its points: needs a GPU)
        max_score = max((p.get("max_score", 0.0) + p.get("not_counted", 0.0) for p in entries if p), default=0.0)
        over = n - counts[NOT_RUN_CELL]
        ran = any(p is not None and _outcome(p) != NOT_RUN_CELL for p in entries)  # for somebody
        mean = sum(p.get("score", 0.0) for p in entries if p) / over if ran else None
        problems.append({"name": name, "max_score": max_score, "mean_score": mean, "over": over,
                         "pass_rate": counts["passed"] / over if ran else None, "counts": counts})
    scores = [float(r.get("score", 0.0)) for r in records]
    return {
        "submissions": n, "statuses": statuses, "problems": problems, "scores": scores,
        "max_score": _class_max(records),
        "mean": statistics.fmean(scores) if scores else 0.0,
        "median": statistics.median(scores) if scores else 0.0,
        "leaderboard": leaderboard.boards(records, who) if who is not None else [], "leaderboard_ids": ids,
    }


def summary_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: the statuses, the score's mean and median, a table per problem."""
    s = summary
    lines = ["# Class summary", "",
             f"{s['submissions']} submissions: " + ", ".join(f"{v} {k}" for k, v in s["statuses"].items() if v) + ".",
             "", f"Total score: mean {s['mean']:.2f}, median {s['median']:.2f}"
             + (f" out of {s['max_score']:g}." if s["max_score"] is not None else "."), "",
             "| problem | points | mean score | pass rate | of | " + " | ".join(OUTCOMES) + " |",
             "|---|" + "---:|" * (4 + len(OUTCOMES))]
    for p in s["problems"]:
        c = p["counts"]
        lines.append(f"| {p['name']} | {p['max_score']:g} | {_mean(p)} | {_rate(p)} | {p['over']} | "
                     + " | ".join(str(c[k]) for k in OUTCOMES) + " |")
    lines += ["", "Pass rates are of the submissions in \"of\": every one, including those that could not be "
              "graded (\"not graded\"), except those a problem was not run for (it needs a GPU, or has no checks); "
              "\"not run\" when it ran for none. passed + failed + error + timeout + not graded = of.",
              "", "![pass rates and scores](summary.png)", ""]
    lines += leaderboard.markdown(s.get("leaderboard", []), s.get("leaderboard_ids", "pseudonym"))
    return "\n".join(lines)


def _rate(p: dict[str, Any]) -> str:
    return NOT_RUN_CELL if p["pass_rate"] is None else f"{100 * p['pass_rate']:.0f}%"


def _mean(p: dict[str, Any]) -> str:
    return NOT_RUN_CELL if p["mean_score"] is None else f"{p['mean_score']:.2f}"


def summary_png(summary: dict[str, Any], path: Path) -> None:
    """:func:`summary_figure`, written to ``path`` (atomically)."""
    import matplotlib.pyplot as plt

    fig = summary_figure(summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def summary_figure(summary: dict[str, Any]) -> Any:
    """Pass rate per problem (bars), the histogram of total scores and, beside
    them, each MFU leaderboard board (:func:`.leaderboard.draw`); a matplotlib
    Figure (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on graders and CI machines
    import matplotlib.pyplot as plt

    boards = summary.get("leaderboard", [])
    fig, axes = plt.subplots(1, 2 + len(boards), figsize=(11 + 5.5 * len(boards), 4.2))
    ax1, ax2 = axes[0], axes[1]
    for ax, board in zip(axes[2:], boards, strict=True):
        leaderboard.draw(ax, board)
    names = [p["name"] for p in summary["problems"]]
    rates = [None if p["pass_rate"] is None else 100 * p["pass_rate"] for p in summary["problems"]]
    bars = ax1.barh(names[::-1], [r or 0.0 for r in rates[::-1]], color="#4C72B0")
    for bar, rate in zip(bars, rates[::-1], strict=True):  # a problem run for nobody: no bar, and says so
        ax1.text(1 if rate is None else min(rate + 1, 92), bar.get_y() + bar.get_height() / 2,
                 NOT_RUN_CELL if rate is None else f"{rate:.0f}%", va="center",
                 color="#777777" if rate is None else "black")
    ax1.set_xlim(0, 100)
    ax1.set_xlabel("submissions passing (%)")
    ax1.set_title(f"Pass rate per problem ({summary['submissions']} submissions)")
    top = summary["max_score"] or max(summary["scores"], default=1.0) or 1.0
    ax2.hist(summary["scores"], bins=min(20, max(5, int(top) + 1)), range=(0, top), color="#55A868",
             edgecolor="white")
    ax2.set_xlabel(f"total score (out of {top:g})")
    ax2.set_ylabel("submissions")
    ax2.set_title(f"Scores: mean {summary['mean']:.2f}, median {summary['median']:.2f}")
    fig.tight_layout()
    return fig


def print_summary(summary: dict[str, Any]) -> None:
    """The per-problem table on the console (rich), then the submissions not graded."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Class: {summary['submissions']} submissions, mean {summary['mean']:.2f}"
                  + (f" / {summary['max_score']:g}" if summary["max_score"] is not None else ""))
    for col in ("problem", "points", "mean", "pass rate", "of", *OUTCOMES):
        table.add_column(col, justify="left" if col == "problem" else "right")
    for p in summary["problems"]:
        c = p["counts"]
        table.add_row(p["name"], f"{p['max_score']:g}", _mean(p), _rate(p), str(p["over"]),
                      *(str(c[k]) for k in OUTCOMES))
    console = Console()
    if not console.is_terminal:  # a log or pipe is no 80-column terminal: the table's eleven columns keep their words
        console = Console(width=120)
    console.print(table)
    for board in leaderboard.rich_tables(summary.get("leaderboard", [])):
        console.print(board)
    other = {k: v for k, v in summary["statuses"].items() if k != "graded" and v}
    if other:
        print("not graded: " + ", ".join(f"{v} {k}" for k, v in other.items()))


def write_outputs(out: Path, records: Sequence[dict[str, Any]], *, quiet: bool = False,
                  leaderboard_ids: str = "pseudonym") -> dict[str, Any]:
    """Write gradebook.csv, summary.md and summary.png for ``records`` into ``out``
    (and print the summary unless ``quiet``); return the summary. The MFU
    leaderboard names submissions by ``leaderboard_ids`` (:data:`.leaderboard.ID_MODES`)."""
    write_atomic(out / "gradebook.csv", gradebook_csv(records))
    summary = class_summary(records, leaderboard.namer(out, leaderboard_ids), leaderboard_ids)
    write_atomic(out / "summary.md", summary_markdown(summary))
    summary_png(summary, out / "summary.png")
    if not quiet:
        print_summary(summary)
    return summary

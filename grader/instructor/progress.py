"""The batch's progress: a rich bar on a terminal, one line per submission otherwise (CI logs).

Contract: what a submission's line shows comes from its record and is made
printable (no control characters from a submission reach the terminal).
"""

from __future__ import annotations

import sys
from typing import Any

from grader.util import printable

__all__ = ["Progress"]


class Progress:
    """Progress over ``total`` submissions of which ``done`` already have results."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.bar: Any = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.description}"), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("", total=total, completed=done)

    def advance(self, rec: dict[str, Any]) -> None:
        """One more submission done, with this record."""
        self.done += 1
        what = (f"{rec['score']:g}/{rec['max_score']:g}" if rec["status"] == "graded"
                else f"{rec['status']}: {rec['reason']}")
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"{rec['id']}: {what}"[:60])
        else:
            print(printable(f"[{self.done}/{self.total}] {rec['id']}: {what} ({rec.get('wall_time', 0):.1f} s)"),
                  flush=True)

    def close(self) -> None:
        """Stop the bar (if any); idempotent enough to call in a ``finally``."""
        if self.bar is not None:
            self.bar.stop()

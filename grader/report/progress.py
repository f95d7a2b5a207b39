"""Progress while grading: a single grade's problems as they start and finish
(:class:`GradeProgress`), and a batch's submissions (:class:`BatchProgress`).

The trusted pytest processes (:mod:`grader.plugin`) write one JSON line per
event to the results pipe (``GroupSpec.results_fd``): ``start`` (with the number of
the problem's checks in the phase), ``check`` (one check's outcome) and
``end`` (the process ran the problem's last check). A problem finishes with
its ``end``, or when its phase's process exits without one.

:class:`GradeProgress` turns these events into a rich display on a terminal
(one bar per problem, its checks done) or, elsewhere, one plain line when a
problem starts and one when it finishes::

    optimizers: started
    optimizers: 15/15 checks passed in 41 s

Contract: everything shown is a problem name the engine planned, counts and
times; nothing the submission says reaches it (its code runs only in the
workers, and an event naming an unplanned problem or holding anything but the
fields above is dropped). Progress is written to ``stream`` (stderr by
default), so a table or JSON on stdout stays clean. The events only inform:
the verdicts and points come from :mod:`grader.scoring`, never from here.

:class:`BatchProgress` is a rich bar on a terminal and one line per submission
otherwise (CI logs); what a submission's line shows comes from its record
and is made printable.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from grader.util import printable

__all__ = ["OUTCOMES", "BatchProgress", "GradeProgress", "summary"]

#: The outcomes a check event may carry (grader.protocol.CheckOutcome's).
OUTCOMES = ("passed", "failed", "error", "skipped", "timeout", "not run", "grader error")
_NOUNS = ("error", "timeout", "grader error")  # the outcomes counted as "2 timeouts", not "2 failed"


@dataclass
class _Problem:
    """One problem's progress in its phase's process."""

    label: str = ""  # how it is shown: its name, and which of its checks run now
    total: int = 0  # checks announced by its start
    outcomes: dict[str, int] = field(default_factory=dict)
    start: float | None = None
    done: bool = False
    task: Any = None  # its rich task, on a terminal

    @property
    def checked(self) -> int:
        return sum(self.outcomes.values())


def summary(passed: int, total: int, others: dict[str, int], seconds: float, missing: int = 0) -> str:
    """A finished problem's line after its name: ``15/15 checks passed in 41 s``,
    ``12/15 checks passed (2 failed, 1 timeout) in 41 s``."""
    extra = [f"{n} {outcome}" + ("s" if n != 1 and outcome in _NOUNS else "") for outcome, n in others.items() if n]
    if missing:
        extra.append(f"{missing} without a result")
    took = f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{passed}/{total} checks passed" + (f" ({', '.join(extra)})" if extra else "") + f" in {took}"


class GradeProgress:
    """The progress of one grade, fed by the engine from several threads.

    ``rich``: None picks a rich display when ``stream`` is a terminal and plain
    lines otherwise; ``transient``: the rich display is cleared when it
    closes (a student's terminal keeps the table, not the bars). Call
    :meth:`plan` before a run's events, :meth:`close` before anything else is
    printed (it stops the rich display)."""

    def __init__(self, stream: TextIO | None = None, *, rich: bool | None = None, transient: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.problems: dict[str, _Problem] = {}
        self.lock = threading.Lock()
        self.bar: Any = None
        if rich is None:
            rich = bool(getattr(self.stream, "isatty", lambda: False)())
        if rich:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(SpinnerColumn(finished_text="•"), TextColumn("{task.description:<20}"),
                                BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.fields[status]}"),
                                console=Console(file=self.stream), transient=transient)
            self.bar.start()

    # ------------------------------------------------------------------ fed by the engine
    def assign(self, problems: list[str], phase: str = "") -> None:
        """A phase's trusted process starts, holding ``problems``; ``phase``
        (e.g. "hidden checks") is shown after each name. A problem assigned
        again (the next phase, a regrade) starts afresh."""
        with self.lock:
            for name in problems:
                self.problems[name] = _Problem(label=f"{name} ({phase})" if phase else name)

    def event(self, line: bytes | str) -> None:
        """One event line from the phase's process; anything malformed is dropped."""
        try:
            raw = json.loads(line)
        except ValueError:
            return
        if not isinstance(raw, dict):
            return
        name, kind = raw.get("problem"), raw.get("event")
        if not isinstance(name, str):
            return
        with self.lock:
            p = self.problems.get(name)
            if p is None or p.done:
                return
            if kind == "start":
                checks = raw.get("checks")
                p.total += checks if isinstance(checks, int) and 0 <= checks < 1_000_000 else 0
                self._started(name, p)
            elif kind == "check" and raw.get("outcome") in OUTCOMES:
                self._started(name, p)
                outcome = raw["outcome"]
                p.outcomes[outcome] = p.outcomes.get(outcome, 0) + 1
                if self.bar is not None and p.task is not None:
                    self.bar.update(p.task, total=max(p.total, p.checked), completed=p.checked)
            elif kind == "end":
                self._finished(name, p)

    def ended(self) -> None:
        """The phase's process exited: whatever it held and did not end is over."""
        with self.lock:
            for name, p in self.problems.items():
                self._finished(name, p)

    def note(self, text: str) -> None:
        """A line of the engine's own (a regrade, say), above the display."""
        with self.lock:
            if self.bar is not None:
                self.bar.console.print(printable(text), markup=False, highlight=False)
            else:
                self._line(text)

    def close(self) -> None:
        """Stop the rich display (if any); safe to call twice."""
        bar, self.bar = self.bar, None
        if bar is not None:
            bar.stop()

    # ------------------------------------------------------------------ rendering (under the lock)
    def _started(self, name: str, p: _Problem) -> None:
        if p.start is not None:
            if self.bar is not None and p.task is not None:
                self.bar.update(p.task, total=max(p.total, p.checked))
            return
        p.start = self.clock()
        if self.bar is not None:
            p.task = self.bar.add_task(p.label, total=max(p.total, 1), completed=0, status="")
        else:
            self._line(f"{p.label}: started")

    def _finished(self, name: str, p: _Problem) -> None:
        if p.done:
            return
        p.done = True
        if p.start is None and not p.checked:  # its processes never reached it (a crash, a collection error)
            p.start = self.clock()
            if self.bar is not None:
                p.task = self.bar.add_task(p.label, total=1, completed=0, status="")
        passed = p.outcomes.get("passed", 0)
        others = {o: p.outcomes[o] for o in OUTCOMES if o != "passed" and p.outcomes.get(o)}
        text = "no checks ran" if not p.total and not p.checked else summary(
            passed, max(p.total, p.checked), others, self.clock() - (p.start or 0.0),
            missing=max(0, p.total - p.checked))
        if self.bar is not None and p.task is not None:
            total = max(p.total, p.checked, 1)
            self.bar.update(p.task, total=total, completed=total, status=printable(text.split(" in ")[0]))
        else:
            self._line(f"{p.label}: {text}")

    def _line(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stderr never stops a grade
            print(printable(text), file=self.stream, flush=True)


class BatchProgress:
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

"""An instructor's limit on probing the hidden checks: ``--full-feedback N/WINDOW``.

A failed hidden check tells the student its function, the property it extends
and the kind of input. Resubmitting again and again can map the hidden checks
out that way, so a course may give those details for the first ``N``
submissions in any ``WINDOW`` (``3/24h``: at most three in any 24 hours) and
points only after that: each item's score, and for a failed hidden check only
that one failed. The public checks' feedback is never limited (students run
them themselves), nor are the points. Off unless asked for.

The count comes from Gradescope's ``/autograder/submission_metadata.json``
(its "Submission Metadata": ``created_at``, this submission's time, and
``previous_submissions[].submission_time``): the previous submissions made in
the ``WINDOW`` before this one, whatever feedback they got. It is read before
any code of the submission runs; a regrade of an old submission counts the
same ones (none made after it), so it gets the same feedback.

- No such file (a grade outside Gradescope: local, batch): no limit.
- A file that cannot be read as that format: full feedback (fail open), and
  a note for whoever runs the grader. Gradescope writes the file, not the
  student; a format it changed would otherwise withhold from a whole class,
  silently, the feedback students are promised by default, while failing
  open costs only the limit, for as long as the file is wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

__all__ = ["Feedback", "FeedbackLimit", "decide", "parse_limit"]

_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


@dataclass(frozen=True)
class FeedbackLimit:
    """Full hidden-check feedback for ``count`` submissions in any ``window``."""

    count: int
    window: timedelta
    text: str  # as given, normalised: "3/24h"
    window_words: str  # "24 hours"


def parse_limit(text: str) -> FeedbackLimit:
    """``"N/WINDOW"`` (``3/24h``, ``2/1d``, ``5/90m``: N >= 0 submissions, a
    window in minutes, hours or days) as a :class:`FeedbackLimit`; ValueError
    saying what is expected otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*([mhd])\s*", text)
    if not m or int(m.group(2)) == 0:
        raise ValueError(f"--full-feedback expects N/WINDOW such as 3/24h (a window in m, h or d), got {text!r}")
    count, number, unit = int(m.group(1)), int(m.group(2)), _UNITS[m.group(3)]
    return FeedbackLimit(count, timedelta(**{unit: number}), f"{count}/{number}{m.group(3)}",
                         f"{number} {unit[:-1] if number == 1 else unit}")


@dataclass(frozen=True)
class Feedback:
    """What this grade tells the student of its hidden checks."""

    details: bool = True  # the function, property and input kind of a failed hidden check
    note: str = ""  # for the student (the reports' output): how the limit applies to this submission
    operator: str = ""  # for whoever runs the grader (stderr): why the limit is not applied


def _submissions(n: int) -> str:
    return f"{n} submission{'' if n == 1 else 's'}"


def _time(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"a time that is not a string: {value!r}")
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def decide(limit: FeedbackLimit | None, metadata: Path | None) -> Feedback:
    """The feedback of a submission under ``limit`` (None: no limit) from
    Gradescope's submission metadata file (see the module docstring)."""
    if limit is None:
        return Feedback()
    if metadata is None or not metadata.is_file():
        return Feedback(operator=f"--full-feedback {limit.text}: no submission metadata "
                                 f"({metadata or 'none given'}): the limit is off, every hidden check's details shown")
    try:
        doc = json.loads(metadata.read_text())
        created = _time(doc["created_at"])
        previous = doc["previous_submissions"]
        if not isinstance(previous, list):
            raise ValueError("previous_submissions is not a list")
        times = [_time(p["submission_time"]) for p in previous]
        recent = sorted(t for t in times if created - limit.window < t < created)
    except (OSError, ValueError, KeyError, TypeError) as e:  # (JSON errors are ValueErrors; naive vs aware: TypeError)
        return Feedback(operator=f"--full-feedback {limit.text}: {metadata} could not be read as Gradescope's "
                                 f"submission metadata ({type(e).__name__}: {str(e)[:200]}): the limit is off for "
                                 "this submission (fail open), every hidden check's details shown")
    window = limit.window_words
    if len(recent) < limit.count:
        return Feedback(note=f"Hidden checks' details: shown for {_submissions(limit.count)} in any {window}; "
                             f"this is {len(recent) + 1} of {limit.count}.")
    # The next submission shows them again once fewer than N of these (this one included) fall in its window.
    again = ([*recent, created][len(recent) + 1 - limit.count] + limit.window) if limit.count else None
    when = f" A submission after {again.isoformat(timespec='minutes')} shows them again, if none comes before it " \
           "(every submission counts)." if again else ""
    return Feedback(details=False, note=(
        f"Hidden checks: points only this time. This assignment shows their details (function, property, kind of "
        f"input) for {_submissions(limit.count)} in any {window}, and you made {len(recent)} in the {window} before "
        f"this one.{when}"))

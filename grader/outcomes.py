"""What a check's failure and its test item say, read on the trusted side for
its :class:`grader.protocol.CheckOutcome` (by :mod:`grader.plugin`).

A failure is classified by the types of its exceptions (:func:`chain`: its
group's, causes and contexts), never by names: the types are the trusted
side's own (:mod:`grader.sandbox.errors`) or the fixed table that
:func:`tests.wire.reply_value` rebuilds a worker's error from, while a name
(a worker-side class's, ``remote_type``) is whatever the submission called it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grader.protocol import CRASH, IMPORT
from grader.sandbox.errors import GraderFault, NotRun, WorkerCrashed, WorkerError, WorkerTimeout
from tests.wire import RemoteError

if TYPE_CHECKING:
    import pytest

__all__ = ["cause", "chain", "describe", "extends_of", "figures_of", "input_kind_of", "no_verdict"]

#: Exceptions that end a check without a verdict on the submission's answers,
#: each saying the outcome it gives (the first that applies).
_NO_VERDICT: tuple[type[WorkerError], ...] = (GraderFault, NotRun, WorkerTimeout)



def chain(exc: BaseException | None, seen: set[int] | None = None) -> list[BaseException]:
    """``exc``, the exceptions of its group, its causes and contexts (each once)."""
    seen = set() if seen is None else seen
    if exc is None or id(exc) in seen:
        return []
    seen.add(id(exc))
    out = [exc]
    for sub in getattr(exc, "exceptions", ()) or ():
        out += chain(sub, seen)
    return out + chain(exc.__cause__, seen) + chain(exc.__context__, seen)


def no_verdict(exceptions: list[BaseException]) -> str:
    """The outcome a failure's exceptions give its check instead of "failed" ("": none)."""
    for kind in _NO_VERDICT:
        if any(isinstance(exc, kind) for exc in exceptions):
            return kind.outcome
    return ""


def cause(exceptions: list[BaseException]) -> str:
    """Why a failure is no wrong answer but an error of the submission, by its
    exceptions' types: :data:`IMPORT` for a SyntaxError, ImportError (or a
    subclass) raised in the worker and rebuilt by :func:`tests.wire.reply_value`
    (which gives it a ``remote_type``; the trusted side's own have none), or a
    SystemExit there (it crosses as a :class:`tests.wire.RemoteError` naming
    it: no builtin ``Exception``); else :data:`CRASH` for a
    :class:`grader.sandbox.errors.WorkerCrashed` (ProtocolError and
    KilledForMemory included); else ""."""
    for exc in exceptions:
        remote = getattr(exc, "remote_type", "")
        if (remote and isinstance(exc, SyntaxError | ImportError)) \
                or (isinstance(exc, RemoteError) and remote == "SystemExit"):
            return IMPORT
    return CRASH if any(isinstance(exc, WorkerCrashed) for exc in exceptions) else ""


def describe(exc: BaseException) -> tuple[str, str]:
    """(message, falsifying example) of a failure."""
    message = f"{type(exc).__name__}: {exc}"
    notes = [str(n) for n in getattr(exc, "__notes__", []) or []]
    for sub in getattr(exc, "exceptions", ()) or ():  # hypothesis groups distinct failures
        notes += [str(n) for n in getattr(sub, "__notes__", []) or []]
    example = "\n".join(n for n in notes if n.startswith(("Falsifying", "Draw", "You can reproduce")))
    return message[:4000], example[:4000]


def extends_of(item: pytest.Item) -> str:
    """The public test a hidden check names with ``@pytest.mark.extends(...)`` ("" if none)."""
    marker = item.get_closest_marker("extends")
    value = marker.args[0] if marker is not None and marker.args else ""
    return value if isinstance(value, str) else ""


def figures_of(item: pytest.Item) -> dict[str, float]:
    """The numbers a check recorded with ``record_property(name, number)`` (measured on this side)."""
    return {str(k): float(v) for k, v in item.user_properties
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def input_kind_of(item: pytest.Item) -> dict[str, str]:
    """The facts a hidden check recorded with ``input_kind(...)`` (the last call wins)."""
    kinds = [v for k, v in item.user_properties if k == "input_kind" and isinstance(v, dict)]
    return {str(k): str(v) for k, v in kinds[-1].items()} if kinds else {}

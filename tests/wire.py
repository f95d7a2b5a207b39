"""Frames, requests and replies: how values cross between processes.

Messages travel as length-prefixed frames (:func:`write_frame`,
:func:`read_frame`) of :mod:`tests.codec`'s data-only encoding (its
:func:`encode`, :func:`decode`, :class:`Record` and :class:`WireError` are
re-exported here), and this module is the one home of the request/reply
protocol both sides of a call speak, the grader's sandboxed worker
(grader/worker/main.py) and LocalImpl's child process (tests/local.py) alike:
the request loop (:func:`serve`), the replies (:func:`value_reply`,
:func:`error_reply`) and their decoding into a value or an exception
(:func:`reply_value`), by one rule (:data:`BUILTIN_ERRORS`), so that an error
raises the same exception in a student's ``pytest`` as when graded.
"""

from __future__ import annotations

import builtins
import os
import traceback
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from tests.codec import LENGTH, MAX_MESSAGE_BYTES, Record, WireError, decode, encode

__all__ = ["BUILTIN_ERRORS", "LENGTH", "MAX_MESSAGE_BYTES", "NOT_DATA", "FrameTooLarge", "Harness", "MalformedReply",
           "Record", "RemoteError", "WireError", "decode", "encode", "error_name", "error_reply", "read_exact",
           "read_frame", "reply_value", "serve", "value_reply", "write_frame"]


class FrameTooLarge(WireError):
    """A frame announced more bytes than the reader accepts."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a frame of {size} bytes (limit {limit})")
        self.size, self.limit = size, limit


def write_frame(fd: int, data: bytes, wait: Callable[[], None] | None = None) -> None:
    """Write ``data`` to ``fd`` as one length-prefixed frame.

    Without ``wait`` the write blocks. With it (a non-blocking ``fd``),
    ``wait()`` is called before each write and returns once ``fd`` is writable
    or raises (e.g. on a deadline); a write the pipe refuses is retried.
    """
    view = memoryview(LENGTH.pack(len(data)) + data)
    while view:
        if wait is not None:
            wait()
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            if wait is None:
                raise


def read_exact(fd: int, n: int, wait: Callable[[], None] | None = None) -> bytes | None:
    """Exactly ``n`` bytes from ``fd``, or None at end of file; ``wait()``, when
    given, is called before each read and returns once ``fd`` is readable (or raises)."""
    chunks, got = [], 0
    while got < n:
        if wait is not None:
            wait()
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(fd: int, limit: int | None = None, wait: Callable[[], None] | None = None) -> bytes | None:
    """The body of the next frame on ``fd``, or None at end of file (also in
    the middle of a frame). Raises :class:`FrameTooLarge`, before reading the
    body, when the frame announces more than ``limit`` bytes. ``wait``: as
    for :func:`read_exact`."""
    head = read_exact(fd, LENGTH.size, wait)
    if head is None:
        return None
    (n,) = LENGTH.unpack(head)
    if limit is not None and n > limit:
        raise FrameTooLarge(n, limit)
    return read_exact(fd, n, wait)


# --------------------------------------------------------------------------- requests and replies

#: The most characters of an error's message and traceback a reply carries
#: (what the receiving side shows of them: :data:`SHOWN_ERROR_TEXT`).
MAX_ERROR_TEXT = 20_000
SHOWN_ERROR_TEXT = 5_000
#: The ``type`` of the error reply to a call whose value is not data.
NOT_DATA = "NotData"
#: Builtins that never cross as themselves: ``Exception`` names no error, and
#: a ``StopIteration`` raised again on the receiving side would end the
#: iteration around the call (``all(map(call, inputs))``) instead of failing it.
_NOT_CROSSING: tuple[type[Exception], ...] = (Exception, StopIteration, StopAsyncIteration)


def _builtin_errors() -> dict[str, type[Exception]]:
    table: dict[str, type[Exception]] = {}
    for name, cls in vars(builtins).items():
        if not (isinstance(cls, type) and issubclass(cls, Exception) and cls.__name__ == name
                and cls.__module__ == "builtins") or cls in _NOT_CROSSING:
            continue
        try:
            cls("")
        except TypeError:  # more than a message to build it from (UnicodeDecodeError, ExceptionGroup)
            continue
        table[name] = cls
    return table


#: The exceptions that cross by name, the one rule for both sides: every
#: builtin ``Exception`` class that can be built from a message, but
#: ``Exception``, ``StopIteration`` and ``StopAsyncIteration``. An error
#: crosses as the first of these in its class hierarchy (a subclass of
#: ValueError as ValueError, PermissionError as itself), anything else
#: (a class whose only builtin base is ``Exception``, ``SystemExit``,
#: ``KeyboardInterrupt``) as :class:`RemoteError`.
BUILTIN_ERRORS: Mapping[str, type[Exception]] = MappingProxyType(_builtin_errors())


class RemoteError(Exception):
    """An error of the process that answered which crosses as no builtin
    (:data:`BUILTIN_ERRORS`), or a value that was not data (``remote_type``
    :data:`NOT_DATA`). Every exception :func:`reply_value` raises has a
    ``remote_type``: the name of the class raised over there (for reports
    only; it is never used to find or build a class)."""

    def __init__(self, message: str, remote_type: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type


class MalformedReply(Exception):
    """A decoded reply that is not a reply (the trusted side kills its worker)."""


def error_name(e: BaseException) -> str:
    """The name ``e`` crosses as: the first class of its hierarchy in
    :data:`BUILTIN_ERRORS`, else ``"RemoteError"``."""
    return next((c.__name__ for c in type(e).__mro__ if BUILTIN_ERRORS.get(c.__name__) is c), "RemoteError")


def error_reply(e: BaseException, skip: str = "") -> bytes:
    """The reply to a request that raised ``e``: ``{"ok": False, "type":
    error_name(e), "original": its class's qualified name, "message",
    "traceback"}`` (both texts capped at :data:`MAX_ERROR_TEXT`). The
    traceback leaves out its first frames of file ``skip`` (the code that
    answers requests: noise to students)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == skip:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    return encode({"ok": False, "type": error_name(e), "original": type(e).__qualname__,
                   "message": str(e)[:MAX_ERROR_TEXT], "traceback": text[-MAX_ERROR_TEXT:]})


def value_reply(value: Any, where: str) -> bytes:
    """The reply to a request that returned ``value``: ``{"ok": True,
    "value": value}``, or, when ``value`` is not data, an error reply of
    type :data:`NOT_DATA` naming ``where`` (never a TypeError on the other side)."""
    try:
        return encode({"ok": True, "value": value})
    except WireError as e:
        return encode({"ok": False, "type": NOT_DATA, "original": "WireError",
                       "message": f"{where} returned something that is not data: {e}", "traceback": ""})


def reply_value(reply: Any) -> Any:
    """The value of a decoded reply ``{"ok": True, "value": ...}``. For an
    error reply, raises the builtin of :data:`BUILTIN_ERRORS` it names, else
    :class:`RemoteError`, with the message and the traceback (capped at
    :data:`SHOWN_ERROR_TEXT`). Raises :class:`MalformedReply` for anything
    else. Only those classes are ever built: what a reply says picks one from
    a fixed table, or none."""
    if type(reply) is not dict or type(reply.get("ok")) is not bool:
        raise MalformedReply("the worker's reply is not a reply")
    if reply["ok"]:
        if set(reply) != {"ok", "value"}:
            raise MalformedReply("the worker's reply has unexpected fields")
        return reply["value"]
    kind, message = reply.get("type"), reply.get("message")
    original, tb = reply.get("original", ""), reply.get("traceback", "")
    if not (type(kind) is str and type(message) is str and type(original) is str and type(tb) is str):
        raise MalformedReply("the worker's error reply is malformed")
    message, tb = message[:SHOWN_ERROR_TEXT], tb[-SHOWN_ERROR_TEXT:]
    if kind == NOT_DATA:
        raise RemoteError(message, NOT_DATA)
    cls = BUILTIN_ERRORS.get(kind)
    if cls is None:
        raise RemoteError(f"{original}: {message}\n\nin the submission:\n{tb}", original)
    # (A KeyError's str() is the repr of its argument: its message alone reads best.)
    err: Exception = cls(message if cls is KeyError or not tb else
                         f"{message}\n\nraised in the submission ({original}):\n{tb}")
    vars(err)["remote_type"] = original  # as RemoteError's (what a report classifies by)
    raise err


class Harness(Protocol):
    """What answers the requests of :func:`serve`."""

    def answer(self, request: Any) -> bytes:
        """The reply frame's bytes for one decoded request (it never raises:
        an error is an :func:`error_reply`)."""
        ...


def serve(in_fd: int, out_fd: int, harness: Harness, hello: Any) -> None:
    """The request loop of a process that answers requests (the grader's
    sandboxed worker, LocalImpl's child process): write the frame
    ``{"hello": hello}`` to ``out_fd``, then answer each request frame read
    from ``in_fd`` with ``harness.answer``'s reply, until ``in_fd`` ends."""
    write_frame(out_fd, encode({"hello": hello}))
    while (body := read_frame(in_fd)) is not None:
        write_frame(out_fd, harness.answer(decode(body)))

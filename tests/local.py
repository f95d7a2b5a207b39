"""LocalImpl: the implementation imported into this process (students' ``pytest``),
and the child process its fresh, interrupted and measured scenarios run in.

The child speaks the worker's protocol (:mod:`tests.wire`'s request loop,
replies and their decoding), so a scenario meets the same data, and its
errors raise the same exceptions, locally as in the grader's sandboxed worker.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import wire
from tests.harness import (
    REPO,
    ImplBase,
    Interrupted,
    Modules,
    fail_if_only_stubs,
    import_submission,
    package_dir,
    read_source,
    resolve_scenario,
    returned_data,
    scenario_name,
    stubs_fail_fast,
)
from tests.memwatch import MemoryWatch, return_freed_memory

__all__ = ["LocalImpl"]


class LocalImpl(ImplBase):
    """The implementation imported into this process (students' ``pytest``).

    ``which`` is ``"student"`` (this repo's stubs), ``"reference"``, or a path to a
    folder holding ``student/`` (a submission).
    """

    def __init__(self, which: str = "student") -> None:
        if which in ("student", "reference"):
            self.package = which
            if which == "student":
                import_submission(REPO)
        else:
            path = Path(which).expanduser().resolve()
            import_submission(path)
            self.package = "student"
        self.name = which
        self.modules = Modules(self.package)

    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(getattr(self.modules, module), function)
        args, kwargs = wire.decode(wire.encode((args, kwargs)))
        with stubs_fail_fast():
            value = fn(*args, **kwargs)
        return returned_data(value, f"{module}.{function}")

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fn = resolve_scenario(scenario_name(fn))
        args, kwargs = wire.decode(wire.encode((args, kwargs)))
        with stubs_fail_fast():
            value = fn(self.modules, *args, **kwargs)
        return returned_data(value, fn.__qualname__)

    def source(self, module: str) -> str:
        return read_source(package_dir(self.name), module)

    # The three below run in a child process: on a student's machine nothing
    # needs defending, but a fresh process is what makes "state only travels
    # through the file" true, and a child is what the test can kill.
    # An untouched stub fails them at once, without a child (fail_if_only_stubs).
    def fresh_scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fail_if_only_stubs(self.modules, fn)
        with _Child(self.name) as child:
            child.send(scenario_name(fn), args, kwargs)
            return child.reply(time.monotonic() + 600)

    def interrupted_scenario(self, fn: Callable[..., Any], *args: Any, kill_when: Callable[[], bool],
                             timeout: float = 120.0, **kwargs: Any) -> Interrupted:
        fail_if_only_stubs(self.modules, fn)
        with _Child(self.name) as child:
            child.wait_ready(time.monotonic() + 600)
            child.send(scenario_name(fn), args, kwargs)
            deadline = time.monotonic() + timeout
            while not child.readable(0.001):
                if kill_when():
                    child.kill()
                    return Interrupted(True)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{fn.__qualname__} ran past {timeout:g} s")
            return Interrupted(False, child.reply(deadline))

    def measured_scenario(self, fn: Callable[..., Any], *args: Any, warm_up: Callable[..., Any] | None = None,
                          **kwargs: Any) -> tuple[Any, int]:
        fail_if_only_stubs(self.modules, fn)
        with _Child(self.name) as child:
            child.wait_ready(time.monotonic() + 600)
            if warm_up is not None:
                child.send(scenario_name(warm_up), (), {})
                child.reply(time.monotonic() + 600)
            watch = MemoryWatch(child.proc.pid)
            child.send(scenario_name(fn), args, kwargs)
            watch.start()
            try:
                value = child.reply(time.monotonic() + 600)
            finally:
                peak = watch.stop()
            return value, peak


# --------------------------------------------------------------------------- the child process

class _Scenarios:
    """What the child answers: LocalImpl's scenarios, ``{"op": "scenario",
    "name", "args", "kwargs"}`` requests (:func:`tests.wire.serve`)."""

    def __init__(self, impl: LocalImpl) -> None:
        self.impl = impl

    def answer(self, req: Any) -> bytes:
        try:
            fn = resolve_scenario(req["name"])
            return wire.value_reply(fn(self.impl.modules, *req["args"], **req["kwargs"]), fn.__qualname__)
        except BaseException as e:  # reported to the parent, which raises it as the grader would
            return wire.error_reply(e, skip=__file__)


def _child_main(which: str, in_fd: int, out_fd: int) -> None:
    """The child of :class:`_Child`: LocalImpl's scenarios, one request per frame."""
    return_freed_memory()
    wire.serve(in_fd, out_fd, _Scenarios(LocalImpl(which)), hello=os.getpid())


class _Child:
    """A child process running one implementation's scenarios for LocalImpl."""

    def __init__(self, which: str) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.local import _child_main; "
                "_child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, str(REPO), which, str(req_r), str(rep_w)],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, cwd=str(REPO),
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.ready = False

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for fd in (self.req_w, self.rep_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.req_w = self.rep_r = -1

    def readable(self, timeout: float) -> bool:
        return bool(select.select([self.rep_r], [], [], timeout)[0])

    def _frame(self, deadline: float) -> Any:
        def wait() -> None:
            while not self.readable(max(deadline - time.monotonic(), 0.0)):
                if time.monotonic() >= deadline:
                    raise TimeoutError("the child process did not answer in time")

        body = wire.read_frame(self.rep_r, wait=wait)
        if body is None:
            raise RuntimeError(f"the child process died (exit status {self.proc.wait()})")
        return wire.decode(body)

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            self._frame(deadline)
            self.ready = True

    def send(self, name: str, args: Any, kwargs: Any) -> None:
        self.wait_ready(time.monotonic() + 600)
        wire.write_frame(self.req_w, wire.encode({"op": "scenario", "name": name, "args": args, "kwargs": kwargs}))

    def reply(self, deadline: float) -> Any:
        self.wait_ready(deadline)
        rep = self._frame(deadline)
        with stubs_fail_fast():
            return wire.reply_value(rep)

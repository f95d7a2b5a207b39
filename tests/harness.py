"""How tests reach the implementation under test.

**The rule for test authors.** A test never holds an object made by the
implementation. It reaches the implementation only through an :class:`Impl`:

* ``impl.precision.bytes_per_element(torch.float16)`` calls a function of a
  handout module with plain data and gets plain data back;
* ``impl.scenario(scenarios.optimizers.trajectory, "AdamW", ...)`` runs a
  *scenario*: a module-level function in ``tests/scenarios/`` that receives the
  implementation's modules (``modules.optimizers``) plus plain data, builds and drives
  the implementation's objects (optimizers, models) and returns plain data.

Arguments and results always go through :mod:`tests.wire` (also in-process), so
what a test sees locally is exactly what the grader sees when the same call is
sent to a sandboxed worker process: a fresh plain tensor, a :class:`~tests.wire.Record`
for a dataclass, a :class:`~tests.wire.WireError` for anything that is not data.
Oracles (torch built-ins, measured bytes) run in the test itself, never in a
scenario, because in the grader scenarios run next to untrusted code.

**What a verdict may rest on.** In the grader a scenario runs in the sandboxed
worker next to the submission, which can replace it (or anything else in that
process): whatever a scenario *reports about the implementation* (a count, a
flag, "it saved N bytes", "the child was killed", a measurement taken in that
process) is forgeable. So a test decides only on

* (a) values the test computes itself (oracles: torch, the reference, formulas);
* (b) what the test observes from outside the implementation's process: files
  left on disk (``tmp_path`` is shared with the worker), whether and when the
  process was killed, its memory as the OS reports it, the test's own clock;
* (c) static facts about the submitted source, read here (:meth:`Impl.source`);
* (d) results the implementation returns, checked against an independent
  oracle (a) -- with inputs it cannot predict where a forger could otherwise
  compute the answer without doing the work.

The Impl methods below give tests (b) and (c): :meth:`Impl.source`,
:meth:`Impl.fresh_scenario` (a process that has run nothing else, so state can
only travel through files), :meth:`Impl.interrupted_scenario` (the test kills
the process itself when it sees the moment on disk) and
:meth:`Impl.measured_scenario` (peak resident memory read from outside).

**Why the harness lives in ``tests/``** (with :mod:`tests.wire` and
``tests/scenarios/``) and not in a package of its own: it is part of what
students receive and run. ``pytest`` in the student release needs it next to
the public tests, with no install step; the grader's worker runs the very same
files (copied into its working copy beside ``student/``), so a student reading
``tests/`` reads exactly the code that calls their functions when graded. A
separate package would be one more thing to install and version for students,
and a second copy for the worker to keep in step. The grader (``grader/``)
imports from here; nothing here imports ``grader``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import os
import re
import select
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, Protocol

from tests import wire

__all__ = [
    "HANDOUT_MODULES", "CouldNotRun", "Impl", "Interrupted", "LocalImpl", "MemoryWatch", "Modules",
    "NotImplementedYet", "fail_if_only_stubs", "process_tree", "resolve_scenario", "return_freed_memory",
    "scenario_name", "stub_message", "stubs_fail_fast",
]

REPO = Path(__file__).resolve().parent.parent

#: The handout's modules, in handout order; each is one graded problem.
HANDOUT_MODULES = (
    "precision", "views", "memory",       # §1
    "einops_ops",                           # §2
    "flops", "model",                       # §3
    "optimizers",                           # §4
    "data",                                 # §5
    "training",                             # §6
)


class CouldNotRun(BaseException):
    """A check that could not be carried out on this machine (it needs a moment
    the machine was too busy to catch, say): no verdict on the implementation.
    Locally pytest reports the test as skipped, with the reason; the grader
    counts it as its own error (not graded, regraded). A ``BaseException``, so
    that no ``pytest.raises(Exception)`` in a test swallows it."""


#: The message of an untouched stub: ``NotImplementedError("<name>: see handout §N")``.
_STUB = re.compile(r"([\w.]+): see handout §([\w.]+)")


class NotImplementedYet(BaseException):
    """A call reached a function that is still its stub. No input could have
    avoided it, so the test fails at once, in one line: a ``BaseException``,
    which hypothesis neither shrinks nor retries (there is nothing to shrink
    towards) and no ``pytest.raises(...)`` in a test swallows. Its cause is the
    stub's ``NotImplementedError``; ``function`` and ``section`` are the stub's
    name and handout section, as its message states them."""

    def __init__(self, function: str, section: str) -> None:
        super().__init__(f"{function} is not implemented yet: see handout §{section}")
        self.function = function
        self.section = section

    def __reduce__(self) -> tuple[Any, ...]:  # pickles with both arguments
        return type(self), (self.function, self.section)


@contextlib.contextmanager
def stubs_fail_fast() -> Iterator[None]:
    """Turn the ``NotImplementedError`` of an untouched stub (its message is
    ``"<name>: see handout §N"``) raised inside the block into
    :class:`NotImplementedYet`; any other exception passes as it is."""
    try:
        yield
    except NotImplementedError as e:
        found = _STUB.match(str(e))
        if type(e) is not NotImplementedError or found is None:
            raise
        raise NotImplementedYet(found.group(1), found.group(2)) from e


def stub_message(fn: object) -> str | None:
    """The message of ``fn`` when it is an untouched stub: a plain function
    whose body is (a docstring and) ``raise NotImplementedError("<name>: see
    handout §N")``, as in the code it runs now (the source is read from its code
    object, so a decorator's ``__wrapped__`` cannot stand in for it); None for
    anything else."""
    if not isinstance(fn, FunctionType) or fn.__code__.co_names != ("NotImplementedError",):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn.__code__)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    func = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(func, ast.FunctionDef):
        return None
    body = func.body[1:] if ast.get_docstring(func) is not None else func.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or not isinstance(body[0].exc, ast.Call):
        return None
    call = body[0].exc
    if not (isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError" and not call.keywords
            and len(call.args) == 1 and isinstance(call.args[0], ast.Constant)):
        return None
    message = call.args[0].value
    if not isinstance(message, str) or message not in fn.__code__.co_consts or not _STUB.fullmatch(message):
        return None
    return message


def _scenario_calls(fn: Callable[..., Any]) -> list[tuple[str, str]] | None:
    """The ``modules.<module>.<name>`` a scenario uses, in source order, when those
    are its only uses of ``modules`` (its first parameter); None when it hands
    ``modules`` to anything else (a helper could call other functions first)."""
    try:
        func = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(func, ast.FunctionDef) or not func.args.args:
        return None
    first = func.args.args[0].arg
    parent = {id(child): node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}
    used: list[tuple[int, int, str, str]] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Name) and node.id == first):
            continue
        module, name = parent.get(id(node)), None
        if isinstance(module, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = parent.get(id(module))
        if not isinstance(name, ast.Attribute) or not isinstance(name.ctx, ast.Load):
            return None
        used.append((node.lineno, node.col_offset, module.attr, name.attr))
    return [(m, n) for _, _, m, n in sorted(used)] or None


def fail_if_only_stubs(modules: Modules, fn: Callable[..., Any]) -> None:
    """Raise :class:`NotImplementedYet` when every function of the
    implementation that the scenario ``fn`` uses is an untouched stub: its first
    call into the implementation would raise it, so no process need start (and
    import torch) to find out. Anything else returns, and the scenario runs."""
    calls = _scenario_calls(fn)
    if calls is None:
        return
    messages = []
    for module, name in calls:
        try:
            message = stub_message(getattr(getattr(modules, module), name))
        except Exception:  # an import error and the like: the scenario's own run reports it
            return
        if message is None:
            return
        messages.append(message)
    with stubs_fail_fast():
        raise NotImplementedError(messages[0])


@dataclass(frozen=True)
class Interrupted:
    """What :meth:`Impl.interrupted_scenario` saw: ``killed`` is True when the
    test's side killed the process before the call returned (then ``value`` is
    None); otherwise the call returned ``value`` first."""

    killed: bool
    value: Any = None


class Impl(Protocol):
    """An implementation under test, reached through data only."""

    name: str

    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any: ...

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def source(self, module: str) -> str:
        """The source text of the implementation's module ``module`` (dotted,
        relative to its package: ``"optimizers"``, ``"_util"``; ``"__init__"``),
        read by the test's side, never asked of the implementation's process.
        FileNotFoundError when there is no such file."""
        ...

    def fresh_scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`scenario`, in a process that has run nothing of the
        implementation before (what one call leaves for the next can only
        travel through files)."""
        ...

    def interrupted_scenario(self, fn: Callable[..., Any], *args: Any, kill_when: Callable[[], bool],
                             timeout: float = 120.0, **kwargs: Any) -> Interrupted:
        """Run the scenario in a fresh process and SIGKILL that process (and its
        children) as soon as ``kill_when()`` -- polled by the test's side about
        every millisecond, e.g. "a file appeared in tmp_path" -- is true; when
        this returns, the process is gone."""
        ...

    def measured_scenario(self, fn: Callable[..., Any], *args: Any, warm_up: Callable[..., Any] | None = None,
                          **kwargs: Any) -> tuple[Any, int]:
        """Run the scenario in a fresh process; return its value and the peak
        growth of that process's resident memory during the call over what it
        held just before, in bytes, as the OS reports it from outside (the
        kernel's high-water mark, reset before the call, and sampling).

        ``warm_up``, a scenario taking no arguments that never touches the
        implementation, runs first in the same process, unmeasured: what
        torch allocates once on first use (tens of MiB) then is not counted as
        the call's, and nothing of the implementation has run before the
        measured call."""
        ...


class _ModuleProxy:
    def __init__(self, impl: Impl, module: str) -> None:
        self._impl, self._module = impl, module

    def __getattr__(self, function: str) -> Callable[..., Any]:
        if function.startswith("_"):
            raise AttributeError(function)
        impl, module = self._impl, self._module

        def call(*args: Any, **kwargs: Any) -> Any:
            return impl.call(module, function, *args, **kwargs)

        call.__name__ = call.__qualname__ = f"{module}.{function}"
        return call


class ImplBase:
    """Gives every Impl ``impl.<module>.<function>(...)`` attribute access."""

    name: str

    def __getattr__(self, module: str) -> _ModuleProxy:
        if module not in HANDOUT_MODULES:
            raise AttributeError(f"{module!r} is not a handout module ({', '.join(HANDOUT_MODULES)})")
        return _ModuleProxy(self, module)  # type: ignore[arg-type]


class Modules:
    """What a scenario receives: the implementation's modules by attribute."""

    def __init__(self, package: str) -> None:
        self._package = package

    def __getattr__(self, module: str) -> ModuleType:
        if module not in HANDOUT_MODULES:
            raise AttributeError(f"{module!r} is not a handout module")
        return importlib.import_module(f"{self._package}.{module}")


def scenario_name(fn: Callable[..., Any]) -> str:
    """``module:function`` of a scenario; scenarios must be top-level functions
    of a module under ``tests.scenarios`` so a worker process can find them."""
    mod, qual = getattr(fn, "__module__", ""), getattr(fn, "__qualname__", "")
    if not mod.startswith("tests.scenarios.") or "." in qual or "<" in qual:
        raise ValueError(f"{mod}.{qual} is not a top-level function in tests/scenarios/")
    return f"{mod}:{qual}"


def resolve_scenario(name: str) -> Callable[..., Any]:
    """Inverse of :func:`scenario_name` (only ``tests.scenarios.*`` names)."""
    mod, _, qual = name.partition(":")
    if not mod.startswith("tests.scenarios.") or not qual.isidentifier():
        raise ValueError(f"not a scenario name: {name!r}")
    fn = getattr(importlib.import_module(mod), qual)
    if scenario_name(fn) != name:
        raise ValueError(f"not a scenario: {name!r}")
    return fn


def _package_dir(which: str) -> Path:
    if which in ("student", "reference"):
        return REPO / which
    return Path(which).expanduser().resolve() / "student"


def read_source(package_dir: Path, module: str) -> str:
    """``module``'s source in ``package_dir`` (see :meth:`Impl.source`)."""
    parts = module.split(".")
    if not module or not all(p.isidentifier() for p in parts):
        raise ValueError(f"not a module name: {module!r}")
    base = package_dir.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file() and not path.is_symlink():
            return path.read_text(encoding="utf-8", errors="replace")
    raise FileNotFoundError(f"no module {module} in {package_dir.name}/")


def import_submission(path: Path) -> None:
    """Make ``student`` name the package in ``path/student`` for this process."""
    pkg = path / "student"
    if not (pkg / "__init__.py").is_file():
        raise ValueError(f"--impl {path}: expected a folder holding student/__init__.py")
    for name in [m for m in sys.modules if m == "student" or m.startswith("student.")]:
        del sys.modules[name]
    sys.path.insert(0, str(path))
    importlib.invalidate_caches()
    spec_origin = Path(importlib.import_module("student").__file__ or "").resolve()
    if spec_origin.parent != pkg.resolve():
        raise ValueError(f"--impl {path}: imported student from {spec_origin} instead")


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
        return _returned(value, f"{module}.{function}")

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fn = resolve_scenario(scenario_name(fn))
        args, kwargs = wire.decode(wire.encode((args, kwargs)))
        with stubs_fail_fast():
            value = fn(self.modules, *args, **kwargs)
        return _returned(value, fn.__qualname__)

    def source(self, module: str) -> str:
        return read_source(_package_dir(self.name), module)

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


def _returned(value: Any, where: str) -> Any:
    try:
        return wire.decode(wire.encode(value))
    except wire.WireError as e:
        raise wire.WireError(f"{where} returned something that is not data: {e}") from None


# --------------------------------------------------------------------------- child processes

def _builtin_base(e: BaseException) -> str:
    return next((c.__name__ for c in type(e).__mro__ if issubclass(c, Exception)
                 and getattr(builtins, c.__name__, None) is c), "RuntimeError")


def return_freed_memory() -> None:
    """Make glibc's malloc hand freed blocks of 64 KiB and more back to the OS at
    once (and keep few arenas), so that a process's resident memory follows
    what it holds instead of what it once held: measured peaks
    (:class:`MemoryWatch`) then compare live data, not allocator caches. A
    no-op without glibc. The implementation's process calls it at its start,
    before any of the implementation's code runs."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 64 << 10)  # M_MMAP_THRESHOLD (fixed: no dynamic raise)
    mallopt(-1, 0)  # M_TRIM_THRESHOLD
    mallopt(-8, 2)  # M_ARENA_MAX


def _child_main(which: str, in_fd: int, out_fd: int) -> None:
    """The child of :class:`_Child`: LocalImpl's scenarios, one request per frame."""
    return_freed_memory()
    impl = LocalImpl(which)
    wire.write_frame(out_fd, wire.encode({"hello": os.getpid()}))
    while (head := wire.read_exact(in_fd, wire.FRAME.size)) is not None:
        body = wire.read_exact(in_fd, wire.FRAME.unpack(head)[0])
        if body is None:
            return
        req = wire.decode(body)
        try:
            fn = resolve_scenario(req["name"])
            reply = wire.encode({"ok": True, "value": fn(impl.modules, *req["args"], **req["kwargs"])})
        except BaseException as e:  # reported to the parent, which re-raises it
            reply = wire.encode({"ok": False, "type": _builtin_base(e), "original": type(e).__qualname__,
                                 "message": str(e)[:20_000],
                                 "traceback": "".join(traceback.format_exception(e))[-20_000:]})
        wire.write_frame(out_fd, reply)


class _Child:
    """A child process running one implementation's scenarios for LocalImpl."""

    def __init__(self, which: str) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.harness import _child_main; "
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
        while not self.readable(max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= deadline:
                raise TimeoutError("the child process did not answer in time")
        head = wire.read_exact(self.rep_r, wire.FRAME.size)
        body = None if head is None else wire.read_exact(self.rep_r, wire.FRAME.unpack(head)[0])
        if body is None:
            raise RuntimeError(f"the child process died (exit status {self.proc.wait()})")
        return wire.decode(body)

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            self._frame(deadline)
            self.ready = True

    def send(self, name: str, args: Any, kwargs: Any) -> None:
        self.wait_ready(time.monotonic() + 600)
        wire.write_frame(self.req_w, wire.encode({"name": name, "args": args, "kwargs": kwargs}))

    def reply(self, deadline: float) -> Any:
        self.wait_ready(deadline)
        rep = self._frame(deadline)
        if rep["ok"]:
            return rep["value"]
        cls = getattr(builtins, rep["type"], RuntimeError)
        with stubs_fail_fast():
            raise cls(f"{rep['message']}\n\nin the child process ({rep['original']}):\n{rep['traceback']}")


# --------------------------------------------------------------------------- memory seen from outside


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (Linux: /proc; elsewhere psutil)."""
    if sys.platform == "linux":
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                        todo += [int(c) for c in f.read().split()]
        return out
    import psutil

    try:
        proc = psutil.Process(root)
        return [root, *(c.pid for c in proc.children(recursive=True))]
    except psutil.Error:
        return [root]


def _status_bytes(pid: int, *keys: str) -> list[int]:
    """``VmRSS``/``VmHWM``... of ``pid`` in bytes (0 when it is gone)."""
    values = dict.fromkeys(keys, 0)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in values:
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return [values[k] for k in keys]


def _rss(pids: list[int]) -> int:
    if sys.platform == "linux":
        return sum(_status_bytes(p, "VmRSS")[0] for p in pids)
    import psutil

    total = 0
    for p in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(p).memory_info().rss
    return total


class MemoryWatch:
    """Peak resident memory of a process tree during a call, seen from outside.

    ``start()`` resets the kernel's high-water mark (``VmHWM``, by writing 5 to
    ``/proc/PID/clear_refs``, where allowed), records the resident set, and
    samples it about every millisecond in a thread; ``stop()`` returns the peak
    growth: the larger of the sampled peak and the summed high-water marks,
    minus the resident set before. (The process itself could reset its own
    high-water mark; the sampling still sees any allocation that lives for more
    than a few milliseconds, and touching 100 MiB takes longer than that.)
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.before = self.peak = 0
        self.hwm_ok = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        pids = process_tree(self.root)
        if sys.platform == "linux":
            self.hwm_ok = True
            for p in pids:
                try:
                    with open(f"/proc/{p}/clear_refs", "w") as f:
                        f.write("5")
                except OSError:
                    self.hwm_ok = False
        self.before = self.peak = _rss(pids)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        pids, n = process_tree(self.root), 0
        while not self._stop.wait(0.001):
            n += 1
            if n % 64 == 0:
                pids = process_tree(self.root)
            self.peak = max(self.peak, _rss(pids))

    def stop(self) -> int:
        pids = process_tree(self.root)
        self.peak = max(self.peak, _rss(pids))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.hwm_ok:
            self.peak = max(self.peak, sum(_status_bytes(p, "VmHWM")[0] for p in pids))
        return max(self.peak - self.before, 0)

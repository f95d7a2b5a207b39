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
A test whose verdict can only come from inside the implementation's process
is marked ``@pytest.mark.feedback_only(reason)``: students see it, the grader
deselects it, and a hidden check that decides by this rule extends it. How
the grader observes (b) and draws the inputs of (d): grader/README.md, "The
trust boundary" (in the course's checkout).

The implementations: :class:`tests.local.LocalImpl` (students' ``pytest``:
the implementation imported here, and a child process for the three methods
above) and the grader's ``RemoteImpl`` (grader/sandbox/remote.py: a sandboxed
worker). :mod:`tests.memwatch` measures memory from outside a process.

**Why the harness lives in ``tests/``** (with :mod:`tests.codec`, :mod:`tests.wire`, :mod:`tests.local`,
:mod:`tests.memwatch` and ``tests/scenarios/``) and not in a package of its own: it is part of what
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
import contextlib
import importlib
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, Protocol

from tests import handout_problems, wire

__all__ = [
    "HANDOUT_MODULES", "Impl", "ImplBase", "Interrupted", "Modules", "NotImplementedYet", "contents_change",
    "fail_if_only_stubs", "import_submission", "package_dir", "read_source", "resolve_scenario", "returned_data",
    "scenario_name", "stub_message", "stubs_fail_fast",
]

REPO = Path(__file__).resolve().parent.parent

#: The handout's modules, in handout order; each is one graded problem. Read
#: from the rubric (tests/__init__.py: :func:`tests.handout_problems`), never restated.
HANDOUT_MODULES = tuple(handout_problems(REPO))


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
        if not (isinstance(module, ast.Attribute) and isinstance(name, ast.Attribute)
                and isinstance(name.ctx, ast.Load)):
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


def contents_change(path: Path) -> Callable[[], bool]:
    """A ``kill_when`` for :meth:`Impl.interrupted_scenario`: true as soon as
    the contents at ``path`` are no longer what they are now (a file that is
    gone counts as changed). Reads ``path`` now; each poll is cheap while the
    file is small (its size first, then its bytes)."""
    old = path.read_bytes()

    def changed() -> bool:
        try:
            if os.stat(path).st_size != len(old):
                return True
            with open(path, "rb") as f:
                return f.read() != old
        except OSError:  # gone: nothing at `path` now
            return True

    return changed


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


def package_dir(which: str) -> Path:
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


def returned_data(value: Any, where: str) -> Any:
    """``value`` as the wire delivers it (a fresh copy of plain data); a
    :class:`~tests.wire.WireError` naming ``where`` when it is not data."""
    try:
        return wire.decode(wire.encode(value))
    except wire.WireError as e:
        raise wire.WireError(f"{where} returned something that is not data: {e}") from None

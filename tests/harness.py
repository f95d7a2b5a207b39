"""How tests reach the implementation under test.

**The rule for test authors.** A test never holds an object made by the
implementation. It reaches the implementation only through an :class:`Impl`:

* ``impl.precision.bytes_per_element(torch.float16)`` calls a function of a
  handout module with plain data and gets plain data back;
* ``impl.scenario(scenarios.optimizers.trajectory, "AdamW", ...)`` runs a
  *scenario*: a module-level function in ``tests/scenarios/`` that receives the
  implementation's modules (``lab.optimizers``) plus plain data, builds and drives
  the implementation's objects (optimizers, models) and returns plain data.

Arguments and results always go through :mod:`tests.wire` (also in-process), so
what a test sees locally is exactly what the grader sees when the same call is
sent to a sandboxed worker process: a fresh plain tensor, a :class:`~tests.wire.Record`
for a dataclass, a :class:`~tests.wire.WireError` for anything that is not data.
Oracles (torch built-ins, measured bytes) run in the test itself, never in a
scenario, because in the grader scenarios run next to untrusted code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from tests import wire

__all__ = ["HANDOUT_MODULES", "Impl", "LocalImpl", "Modules", "resolve_scenario", "scenario_name"]

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


class Impl(Protocol):
    """An implementation under test, reached through data only."""

    name: str

    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any: ...

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...


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
        return _returned(fn(*args, **kwargs), f"{module}.{function}")

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fn = resolve_scenario(scenario_name(fn))
        args, kwargs = wire.decode(wire.encode((args, kwargs)))
        return _returned(fn(self.modules, *args, **kwargs), fn.__qualname__)


def _returned(value: Any, where: str) -> Any:
    try:
        return wire.decode(wire.encode(value))
    except wire.WireError as e:
        raise wire.WireError(f"{where} returned something that is not data: {e}") from None

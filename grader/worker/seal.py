"""Sealing torch.optim in the optimizers' worker (sandbox side).

Copied into the working copy beside the worker script as ``_grader_seal.py``
and imported by it (grader/worker/main.py) before the submission, when the
worker's first request is about the optimizers. Like the worker script it
imports nothing of ``grader``; the trusted side imports its constants from
here (``grader.worker.seal``) to carve the sealed copies
(:mod:`grader.sandbox.optimseal`).
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

#: torch.optim's modules that hold no update rule and stay usable: the base
#: class (handout §4 subclasses it), schedulers, weight averaging.
OPTIM_KEPT = frozenset({"torch.optim", "torch.optim.optimizer", "torch.optim.lr_scheduler",
                        "torch.optim.swa_utils", "torch.optim._stateless"})
#: torch's fused optimizer kernels (every overload of each).
FUSED_KERNELS = ("_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad")


#: What a sealed part of torch.optim says after "... is not available to
#: submissions" (here and in the sealed sources of grader/sandbox/optimseal.py).
SEALED_HINT = ("the handout asks for the update rule written with tensor operations "
               "(torch.optim.Optimizer is the only base class)")


class SealedError(RuntimeError):
    """Raised by every sealed part of torch.optim (a RuntimeError: neither the
    ValueError nor the TypeError the handout's checks of bad input expect)."""


def _sealed(what: str) -> Any:
    def sealed(*_args: Any, **_kwargs: Any) -> Any:
        raise SealedError(f"{what} is not available to submissions: {SEALED_HINT}")

    sealed.__name__ = sealed.__qualname__ = what.rsplit(".", 1)[-1].rsplit(" ", 1)[-1]
    return sealed


class _SealedModules:
    """A meta path finder, first on ``sys.meta_path``: a sealed module cannot be
    imported afresh (``importlib.reload`` finds its spec through here too)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name in self.names or (name.startswith("torch.optim.") and name not in OPTIM_KEPT
                                  and name not in sys.modules):
            raise ImportError(f"{name} is not available to submissions")


def seal_torch_optim() -> list[str]:
    """Make torch.optim's algorithms unusable in this process, in place, before
    any submission code runs; return what is left of them (empty: none).

    * Every subclass of ``torch.optim.Optimizer`` (recursively: Adam, AdamW,
      SGD, ... and the ``_multi_tensor`` variants) keeps its name, but each
      method and attribute its class body defines raises :class:`SealedError`;
      ``Optimizer`` itself, ``lr_scheduler`` and ``swa_utils`` are untouched.
    * Every function of the algorithm modules (``torch.optim.adam.adam``,
      ``_single_tensor_adam``, ``_multi_tensor_adam``, ``_fused_adam``,
      ``torch.optim._functional``, ...) is replaced, and so is every other
      reference the garbage collector can see to one of them (the registry in
      ``torch.optim.optimizer``, closures, lists): the originals are then
      unreachable and collected. The return value lists survivors.
    * Those modules cannot be imported afresh or reloaded (:class:`_SealedModules`).
    * The fused kernels (``torch._fused_adam_`` and every overload of
      ``aten::_fused_{adam,adamw,sgd,adagrad}``) get CPU, CUDA, MPS and XPU
      kernels that raise.

    ``torch._foreach_*`` stays: each is one elementwise operation over a list of
    tensors, the building block the handout recommends (and the reference
    uses), holding no optimizer's rule; composing them is writing the rule.

    All of this lives in the submission's own process, which could rebuild
    torch's optimizers from torch's files (execute the sources read from disk,
    or unmarshal their bytecode from ``__pycache__``). In bubblewrap mode that is
    prevented from outside: the optimizers' worker sees sealed copies of those
    sources and no torch.optim bytecode (``grader/sandbox/optimseal.py``); in uid mode
    Landlock keeps it from those files (:func:`restrict_files`, where the kernel
    has it). In rlimits mode, or uid mode without Landlock, it is not: such a
    rebuild is a copy of torch's code, for the similarity report (which compares
    with torch.optim's sources) and the instructors.
    """
    import gc

    import torch
    import torch.optim
    from torch.optim import Optimizer

    modules = {name: m for name, m in list(sys.modules.items())
               if name.startswith("torch.optim.") and name not in OPTIM_KEPT and isinstance(m, types.ModuleType)}
    originals: dict[int, Any] = {}  # id -> the replacement of each original function
    classes: list[type] = []
    todo = [Optimizer]
    while todo:
        for cls in todo.pop().__subclasses__():
            if cls not in classes and cls.__module__.startswith("torch."):
                classes.append(cls)
                todo.append(cls)
    # (each pass is a function of its own: no local variable here may keep an original alive)
    _seal_classes(classes, originals)
    files = {path for m in modules.values() if isinstance(path := getattr(m, "__file__", None), str)}
    _seal_module_functions(modules, files, originals)
    sys.meta_path.insert(0, _SealedModules(frozenset(modules)))
    _seal_fused_kernels(torch)

    def survivors() -> list[types.FunctionType]:
        gc.collect()
        with warnings.catch_warnings():  # isinstance on some of torch's lazy objects warns of deprecations
            warnings.simplefilter("ignore")
            return [o for o in gc.get_objects()
                    if isinstance(o, types.FunctionType) and o.__code__.co_filename in files]

    for _round in range(3):  # references held elsewhere: replace them where they are
        left = survivors()
        if not left:
            break
        _replace_references(left, originals)
        del left
    return [f"{fn.__module__}.{fn.__qualname__}" for fn in survivors()]


def _seal_classes(classes: list[type], originals: dict[int, Any]) -> None:
    """Replace each method and attribute the class bodies of ``classes`` define."""
    for cls in classes:
        for key, value in list(vars(cls).items()):
            if key in ("__module__", "__doc__", "__dict__", "__weakref__", "__qualname__", "__annotations__"):
                continue
            if callable(value) or hasattr(value, "__get__"):
                originals[id(getattr(value, "__func__", value))] = replacement = \
                    _sealed(f"torch.optim's {cls.__name__}.{key}")
                setattr(cls, key, replacement)
        for key in ("__init__", "step"):
            if key not in vars(cls):
                setattr(cls, key, _sealed(f"torch.optim's {cls.__name__}.{key}"))


def _seal_module_functions(modules: dict[str, types.ModuleType], files: set[str], originals: dict[int, Any]) -> None:
    """Replace every function the algorithm modules define."""
    for name, module in modules.items():
        for key, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType) and value.__code__.co_filename in files:
                originals[id(value)] = replacement = _sealed(f"{name}.{key}")
                setattr(module, key, replacement)


def _replace_references(functions: list[types.FunctionType], originals: dict[int, Any]) -> None:
    """Replace every reference the garbage collector sees to each of
    ``functions`` (in dicts, lists and closure cells) by its sealed
    replacement. A function of its own, so that no local variable of the
    caller keeps the last of them alive; and no comprehension here: before
    Python 3.12 one that names the function makes a closure cell of this
    frame's variable, which is then among the function's referrers, and
    rebinding it mid-way would leave the later referrers alone."""
    import gc

    for original in list(functions):
        replacement = originals.get(id(original)) or _sealed(f"{original.__module__}.{original.__qualname__}")
        for ref in gc.get_referrers(original):
            if isinstance(ref, dict):
                keys = []
                for key, value in ref.items():
                    if value is original:
                        keys.append(key)
                for key in keys:
                    ref[key] = replacement
            elif isinstance(ref, list):
                for i, value in enumerate(ref):
                    if value is original:
                        ref[i] = replacement
            elif isinstance(ref, types.CellType):
                ref.cell_contents = replacement


def _seal_fused_kernels(torch: Any) -> None:
    """Raising CPU, CUDA, MPS and XPU kernels for every overload of torch's
    fused optimizer operators, registered through a dispatcher handle that no
    Python object refers to: kept alive by one leaked reference (the handle is
    not tracked by the garbage collector, so ``gc`` cannot find it, and
    nothing here holds it for a submission to destroy), the registration lasts
    as long as the process."""
    import ctypes

    handle = torch._C._dispatch_library("IMPL", "aten", "", "<sealed optimizers>", 0)
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = qualified.partition("::")
        if namespace != "aten" or op.split(".")[0].rstrip("_") not in FUSED_KERNELS:
            continue
        for key in ("CPU", "CUDA", "MPS", "XPU"):  # every device a grader or a student's machine may have
            with warnings.catch_warnings():  # "overriding a previously registered kernel": the point
                warnings.simplefilter("ignore")
                handle.impl(op, key, _sealed(f"torch's fused optimizer kernel {op}"), False)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))  # never released: its kernels stay registered

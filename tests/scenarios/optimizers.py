"""Scenarios for handout §4: build the implementation's optimizer from plain data,
drive it through given gradients and report what happened as plain data.

A run is described by:

* ``params``: the initial parameter values (tensors);
* ``groups``: one ``(indices, hyperparameters)`` pair per param group, the
  indices into ``params`` and the hyperparameters the group overrides;
* ``defaults``: keyword arguments of the constructor;
* ``grads_per_step``: for each step, one gradient (or None: no gradient) per param;
* ``lrs``: optionally, for each step, the learning rate of each group, set in
  ``param_groups`` before the step (as a schedule does).

The tests build the same run with ``torch.optim`` and compare; nothing here
judges the implementation.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

Groups = list[tuple[list[int], dict[str, Any]]]
Grads = list[list[torch.Tensor | None]]

#: modules of torch.optim whose optimizers the handout's imitate
_TORCH_MODULES = ("sgd", "adagrad", "rmsprop", "adam", "adamw")
_TORCH_CLASSES = ("SGD", "Adagrad", "RMSprop", "Adam", "AdamW")
_TORCH_KERNELS = ("_fused_sgd_", "_fused_adagrad_", "_fused_adam_", "_fused_adamw_", "_fused_adam", "_fused_adamw")


def build(lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any]) -> Any:
    """The implementation's optimizer ``name`` over ``params`` (as nn.Parameters)."""
    cls = getattr(lab.optimizers, name)
    param_groups = [{"params": [params[i] for i in idx], **hp} for idx, hp in groups]
    return cls(param_groups, **defaults)


def run_steps(opt: Any, params: list[torch.Tensor], grads_per_step: Grads, lrs: list[list[float]] | None,
              first_step: int = 0) -> list[list[torch.Tensor]]:
    """Step ``opt`` once per entry of ``grads_per_step`` (None: no grad), setting the
    groups' lrs first when ``lrs`` is given; the params after each step. The tests'
    torch.optim oracle is driven by this same loop."""
    out = []
    for k, grads in enumerate(grads_per_step):
        if lrs is not None:
            for group, lr in zip(opt.param_groups, lrs[first_step + k], strict=True):
                group["lr"] = lr
        for p, g in zip(params, grads, strict=True):
            p.grad = None if g is None else g.clone()
        opt.step()
        out.append([p.detach().clone() for p in params])
    return out


def _parameters(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [nn.Parameter(v.clone()) for v in values]


def trajectory(
    lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads, lrs: list[list[float]] | None = None,
) -> list[list[torch.Tensor]]:
    """The parameters after each step: ``result[step][param]``."""
    ps = _parameters(params)
    opt = build(lab, name, ps, groups, defaults)
    return run_steps(opt, ps, grads_per_step, lrs)


def resumed_trajectory(
    lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads, split: int, lrs: list[list[float]] | None = None,
) -> list[list[torch.Tensor]]:
    """Like :func:`trajectory`, but after ``split`` steps the optimizer's
    ``state_dict()`` goes through ``torch.save`` / ``torch.load(weights_only=True)``
    (as in a checkpoint) into a fresh optimizer over fresh parameters holding
    the same values. The fresh optimizer is built with the same param groups
    but no hyperparameters (its constructor's defaults): ``load_state_dict``
    must restore them along with the state."""
    ps = _parameters(params)
    opt = build(lab, name, ps, groups, defaults)
    before = run_steps(opt, ps, grads_per_step[:split], lrs)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    del opt
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = _parameters([p.detach() for p in ps])
    opt = build(lab, name, fresh, [(idx, {}) for idx, _ in groups], {})
    opt.load_state_dict(state)
    return before + run_steps(opt, fresh, grads_per_step[split:], lrs, first_step=split)


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"shape": tuple(value.shape), "dtype": value.dtype, "bytes": value.numel() * value.element_size()}
    if type(value) in (int, float, bool) or value is None:
        return value
    return f"<{type(value).__name__}>"


def state_after(
    lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads,
) -> list[dict[str, Any]]:
    """After the run, what ``optimizer.state[p]`` holds for each param: per key,
    a tensor's shape, dtype and bytes, or a number as it is."""
    ps = _parameters(params)
    opt = build(lab, name, ps, groups, defaults)
    run_steps(opt, ps, grads_per_step, None)
    return [{str(k): _describe(v) for k, v in opt.state[p].items()} if p in opt.state else {} for p in ps]


def construct(lab: Any, name: str, defaults: dict[str, Any], group_overrides: dict[str, Any] | None = None) -> None:
    """Build ``name`` over one small parameter (for checks of bad hyperparameters):
    with ``defaults`` as constructor arguments, and ``group_overrides`` (if any)
    as the hyperparameters of a second param group."""
    groups: Groups = [([0], {})]
    if group_overrides is not None:
        groups.append(([1], dict(group_overrides)))
    build(lab, name, _parameters([torch.ones(3), torch.ones(2)]), groups, defaults)


@contextlib.contextmanager
def _spying_on_torch_optim(calls: list[str]) -> Iterator[None]:
    """Record in ``calls`` every call of torch.optim's optimizers' ``step``,
    their functional forms (``torch.optim.adam.adam``, ``_single_tensor_adam``,
    ``torch.optim._functional.adam``, ...) and the ``torch._fused_*`` kernels."""
    patched: list[tuple[Any, str, Any, bool]] = []

    def spy(owner: Any, attr: str, label: str) -> None:
        had = attr in vars(owner) if isinstance(owner, type) else True
        original = getattr(owner, attr)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(label)
            return original(*args, **kwargs)

        patched.append((owner, attr, vars(owner).get(attr) if isinstance(owner, type) else original, had))
        setattr(owner, attr, wrapper)

    try:
        for mod_name in _TORCH_MODULES:
            mod = importlib.import_module(f"torch.optim.{mod_name}")
            for attr, value in list(vars(mod).items()):
                if callable(value) and not isinstance(value, type) and (
                    attr in _TORCH_MODULES or attr.startswith(("_single_tensor_", "_multi_tensor_", "_fused_"))
                ):
                    spy(mod, attr, f"torch.optim.{mod_name}.{attr}")
        functional = importlib.import_module("torch.optim._functional")
        for attr in _TORCH_MODULES:
            if callable(getattr(functional, attr, None)):
                spy(functional, attr, f"torch.optim._functional.{attr}")
        for cls_name in _TORCH_CLASSES:
            spy(getattr(torch.optim, cls_name), "step", f"torch.optim.{cls_name}.step")
        for attr in _TORCH_KERNELS:
            if hasattr(torch, attr):
                spy(torch, attr, f"torch.{attr}")
        yield
    finally:
        for owner, attr, original, had in reversed(patched):
            if had:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)


def delegation_facts(
    lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads,
) -> dict[str, Any]:
    """Facts about how the implementation's optimizer works: the classes it
    derives from (``module.qualname``), the torch.optim functions called while
    it was built and run, and its trajectory."""
    cls = getattr(lab.optimizers, name)
    calls: list[str] = []
    with _spying_on_torch_optim(calls):
        ps = _parameters(params)
        opt = build(lab, name, ps, groups, defaults)
        steps = run_steps(opt, ps, grads_per_step, None)
    return {
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__],
        "torch_optim_calls": sorted(set(calls)),
        "trajectory": steps,
    }


# --------------------------------------------------------------------------- issue 16: more inputs


def grads_after_steps(
    lab: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads,
) -> list[list[torch.Tensor | None]]:
    """Like :func:`trajectory`, but report each param's ``.grad`` as read back
    after each step (what a gradient-norm logger or clipping would see)."""
    ps = _parameters(params)
    opt = build(lab, name, ps, groups, defaults)
    out: list[list[torch.Tensor | None]] = []
    for grads in grads_per_step:
        for p, g in zip(ps, grads, strict=True):
            p.grad = None if g is None else g.clone()
        opt.step()
        out.append([None if p.grad is None else p.grad.detach().clone() for p in ps])
    return out


def quadratic_closure(opt: Any, ps: list[torch.Tensor], targets: list[torch.Tensor]) -> Any:
    """The closure torch.optim's docs describe: zero the grads, compute the loss
    ``sum((p - target)^2)``, backward, return the loss."""

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = sum(((p - t) ** 2).sum() for p, t in zip(ps, targets, strict=True))
        loss.backward()
        return loss

    return closure


def steps_with_closure(
    lab: Any, name: str, params: list[torch.Tensor], targets: list[torch.Tensor], defaults: dict[str, Any],
    steps: int,
) -> Any:
    """``step(closure)`` ``steps`` times; report what each call returned (a
    tensor or None) and the parameters after each step."""
    ps = _parameters(params)
    opt = build(lab, name, ps, [(list(range(len(ps))), {})], defaults)
    closure = quadratic_closure(opt, ps, targets)
    returned, after = [], []
    for _ in range(steps):
        value = opt.step(closure)
        returned.append(value.detach().clone() if isinstance(value, torch.Tensor) else value)
        after.append([p.detach().clone() for p in ps])
    return {"returned": returned, "params": after}

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

import functools
import io
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

Groups = list[tuple[list[int], dict[str, Any]]]
Grads = list[list[torch.Tensor | None]]


def build(modules: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any]) -> Any:
    """The implementation's optimizer ``name`` over ``params`` (as nn.Parameters)."""
    cls = getattr(modules.optimizers, name)
    param_groups = [{"params": [params[i] for i in idx], **hp} for idx, hp in groups]
    return cls(param_groups, **defaults)


def run_steps(opt: Any, params: list[torch.Tensor], grads_per_step: Grads, lrs: list[list[float]] | None,
              first_step: int = 0, in_place: bool = False) -> list[list[torch.Tensor]]:
    """Step ``opt`` once per entry of ``grads_per_step`` (None: no grad), setting the
    groups' lrs first when ``lrs`` is given; the params after each step. With
    ``in_place`` each param keeps one ``.grad`` tensor that every step's gradient
    is written into (as ``zero_grad(set_to_none=False)`` and ``backward()`` do);
    otherwise each step gets fresh gradient tensors. The tests' torch.optim
    oracle is driven by this same loop."""
    out = []
    for k, grads in enumerate(grads_per_step):
        if lrs is not None:
            for group, lr in zip(opt.param_groups, lrs[first_step + k], strict=True):
                group["lr"] = lr
        for p, g in zip(params, grads, strict=True):
            if g is None:
                p.grad = None
            elif in_place and p.grad is not None:
                p.grad.copy_(g)
            else:
                p.grad = g.clone()
        opt.step()
        out.append([p.detach().clone() for p in params])
    return out


def _parameters(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [nn.Parameter(v.clone()) for v in values]


def trajectory(
    modules: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads, lrs: list[list[float]] | None = None, in_place: bool = False,
) -> list[list[torch.Tensor]]:
    """The parameters after each step: ``result[step][param]`` (``in_place``: see :func:`run_steps`)."""
    ps = _parameters(params)
    opt = build(modules, name, ps, groups, defaults)
    return run_steps(opt, ps, grads_per_step, lrs, in_place=in_place)


def trajectory_from_a_generator(
    modules: Any, name: str, params: list[torch.Tensor], defaults: dict[str, Any], grads_per_step: Grads,
) -> list[list[torch.Tensor]]:
    """The parameters after each step of ``name`` built from a generator of
    params (as ``Opt(model.parameters())`` passes them), one group."""
    ps = _parameters(params)
    opt = getattr(modules.optimizers, name)((p for p in ps), **defaults)
    return run_steps(opt, ps, grads_per_step, None)


def grads_after_steps(
    modules: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads,
) -> list[list[torch.Tensor | None]]:
    """Like :func:`trajectory`, but report each param's ``.grad`` as read back
    after each step (what a gradient-norm logger or clipping would see)."""
    ps = _parameters(params)
    opt = build(modules, name, ps, groups, defaults)
    out: list[list[torch.Tensor | None]] = []
    for grads in grads_per_step:
        for p, g in zip(ps, grads, strict=True):
            p.grad = None if g is None else g.clone()
        opt.step()
        out.append([None if p.grad is None else p.grad.detach().clone() for p in ps])
    return out


def quadratic_closure(opt: Any, ps: Sequence[torch.Tensor], targets: Sequence[torch.Tensor]) -> Any:
    """The closure torch.optim's docs describe: zero the grads, compute the loss
    ``sum((p - target)^2)``, backward, return the loss."""

    def closure() -> torch.Tensor:
        opt.zero_grad()
        # the terms added left to right, as sum() would (a tensor, not sum()'s int start, for the type checker)
        loss = functools.reduce(operator.add, (((p - t) ** 2).sum() for p, t in zip(ps, targets, strict=True)))
        loss.backward()
        return loss

    return closure


def steps_with_closure(
    modules: Any, name: str, params: list[torch.Tensor], targets: list[torch.Tensor], defaults: dict[str, Any],
    steps: int,
) -> Any:
    """``step(closure)`` ``steps`` times; report what each call returned (a
    tensor or None) and the parameters after each step."""
    ps = _parameters(params)
    opt = build(modules, name, ps, [(list(range(len(ps))), {})], defaults)
    closure = quadratic_closure(opt, ps, targets)
    returned, after = [], []
    for _ in range(steps):
        value = opt.step(closure)
        returned.append(value.detach().clone() if isinstance(value, torch.Tensor) else value)
        after.append([p.detach().clone() for p in ps])
    return {"returned": returned, "params": after}


def resumed_trajectory(
    modules: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads, split: int, lrs: list[list[float]] | None = None,
) -> list[list[torch.Tensor]]:
    """Like :func:`trajectory`, but after ``split`` steps the optimizer's
    ``state_dict()`` goes through ``torch.save`` / ``torch.load(weights_only=True)``
    (as in a checkpoint) into a fresh optimizer over fresh parameters holding
    the same values. The fresh optimizer is built with the same param groups
    but no hyperparameters (its constructor's defaults): ``load_state_dict``
    must restore them along with the state."""
    ps = _parameters(params)
    opt = build(modules, name, ps, groups, defaults)
    before = run_steps(opt, ps, grads_per_step[:split], lrs)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    del opt
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = _parameters([p.detach() for p in ps])
    opt = build(modules, name, fresh, [(idx, {}) for idx, _ in groups], {})
    opt.load_state_dict(state)
    return before + run_steps(opt, fresh, grads_per_step[split:], lrs, first_step=split)


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"shape": tuple(value.shape), "dtype": value.dtype, "bytes": value.numel() * value.element_size()}
    if type(value) in (int, float, bool) or value is None:
        return value
    return f"<{type(value).__name__}>"


def state_after(
    modules: Any, name: str, params: list[torch.Tensor], groups: Groups, defaults: dict[str, Any],
    grads_per_step: Grads,
) -> list[dict[str, Any]]:
    """After the run, what ``optimizer.state[p]`` holds for each param: per key,
    a tensor's shape, dtype and bytes, or a number as it is."""
    ps = _parameters(params)
    opt = build(modules, name, ps, groups, defaults)
    run_steps(opt, ps, grads_per_step, None)
    return [{str(k): _describe(v) for k, v in opt.state[p].items()} if p in opt.state else {} for p in ps]


def construct(modules: Any, name: str, defaults: dict[str, Any], group_overrides: dict[str, Any] | None = None) -> None:
    """Build ``name`` over one small parameter (for checks of bad hyperparameters):
    with ``defaults`` as constructor arguments, and ``group_overrides`` (if any)
    as the hyperparameters of a second param group."""
    groups: Groups = [([0], {})]
    if group_overrides is not None:
        groups.append(([1], dict(group_overrides)))
    build(modules, name, _parameters([torch.ones(3), torch.ones(2)]), groups, defaults)

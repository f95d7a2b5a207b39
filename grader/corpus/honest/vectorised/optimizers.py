"""Handout §4: SGD, SGD with momentum, AdaGrad, RMSProp, Adam and AdamW, on torch._foreach_*."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None

_RULES = {
    "lr": (lambda v: v >= 0, ">= 0"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "eps": (lambda v: v > 0, "> 0"),
    "alpha": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "momentum": (lambda v: 0 < v < 1, "in (0, 1)"),
    "dampening": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "lr_decay": (lambda v: v >= 0, ">= 0"),
    "initial_accumulator_value": (lambda v: v >= 0, ">= 0"),
    "betas": (lambda v: 0 <= v < 1, "in [0, 1)"),
}


def _num(k, v):
    """Reject anything but a Python int or float."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{k} must be a Python number, got {type(v).__name__}")
    return v


def _validate(h):
    """Check every known hyperparameter in h."""
    for k, (ok, rng) in _RULES.items():
        if k not in h:
            continue
        v = h[k]
        if k == "betas":
            if not isinstance(v, (tuple, list)):
                raise TypeError(f"betas must be a pair of numbers, got {type(v).__name__}")
            if len(v) != 2:
                raise ValueError(f"betas must have 2 entries, got {len(v)}")
        if not all(ok(_num(k, x)) for x in (v if k == "betas" else (v,))):
            raise ValueError(f"{k} must be {rng}, got {v!r}")


def _buf(s, k, p, fill=0.0):
    """State tensor k of p, created on first use."""
    if k not in s:
        s[k] = torch.full_like(p, fill, memory_format=torch.preserve_format)
    return s[k]


def _l2(wd, ps, gs):
    """g + wd*p as new tensors (never touches .grad)."""
    return torch._foreach_add(gs, ps, alpha=wd) if wd else gs


def _tick(ss):
    """Bump per-param step counts and return them."""
    for s in ss:
        s["step"] = s.get("step", 0) + 1
    return [s["step"] for s in ss]


class _Base(Optimizer):
    """Validation, grad filtering and closure handling shared by all optimizers."""

    def __init__(self, params, **hp):
        _validate(hp)
        super().__init__(params, hp)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _validate({k: v for k, v in {**self.defaults, **param_group}.items() if k != "params"})
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g in self.param_groups:
            ps = [p for p in g["params"] if p.grad is not None]
            if ps:
                self._update(g, ps, [p.grad for p in ps], [self.state[p] for p in ps])
        return loss

    def _update(self, g, ps, gs, ss):
        raise NotImplementedError


class SGD(_Base):
    """torch.optim.SGD without momentum."""

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay)

    def _update(self, g, ps, gs, ss):
        torch._foreach_add_(ps, _l2(g["weight_decay"], ps, gs), alpha=-g["lr"])


class SGDMomentum(_Base):
    """torch.optim.SGD with momentum and dampening."""

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)

    def _update(self, g, ps, gs, ss):
        gs = _l2(g["weight_decay"], ps, gs)
        old = [(s["momentum_buffer"], d) for s, d in zip(ss, gs) if "momentum_buffer" in s]
        if old:
            bs, ds = map(list, zip(*old))
            torch._foreach_mul_(bs, g["momentum"])
            torch._foreach_add_(bs, ds, alpha=1 - g["dampening"])
        for s, d in zip(ss, gs):
            s.setdefault("momentum_buffer", d.clone(memory_format=torch.preserve_format))
        torch._foreach_add_(ps, [s["momentum_buffer"] for s in ss], alpha=-g["lr"])


class AdaGrad(_Base):
    """torch.optim.Adagrad."""

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        super().__init__(params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps)

    def _update(self, g, ps, gs, ss):
        gs = _l2(g["weight_decay"], ps, gs)
        G = [_buf(s, "sum", p, g["initial_accumulator_value"]) for s, p in zip(ss, ps)]
        ts = _tick(ss)
        torch._foreach_addcmul_(G, gs, gs)
        den = torch._foreach_sqrt(G)
        torch._foreach_add_(den, g["eps"])
        torch._foreach_addcdiv_(ps, gs, den, [-g["lr"] / (1 + (t - 1) * g["lr_decay"]) for t in ts])


class RMSProp(_Base):
    """torch.optim.RMSprop (no momentum, not centered)."""

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)

    def _update(self, g, ps, gs, ss):
        gs, a = _l2(g["weight_decay"], ps, gs), g["alpha"]
        vs = [_buf(s, "square_avg", p) for s, p in zip(ss, ps)]
        torch._foreach_mul_(vs, a)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - a)
        den = torch._foreach_sqrt(vs)
        torch._foreach_add_(den, g["eps"])
        torch._foreach_addcdiv_(ps, gs, den, value=-g["lr"])


class _AdamBase(_Base):
    """Adam's moments and bias-corrected step; AdamW decouples the decay."""

    decoupled = False

    def _update(self, g, ps, gs, ss):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        if not self.decoupled:
            gs = _l2(wd, ps, gs)
        elif wd:
            torch._foreach_mul_(ps, 1 - lr * wd)
        ms, vs = ([_buf(s, k, p) for s, p in zip(ss, ps)] for k in ("exp_avg", "exp_avg_sq"))
        ts = _tick(ss)
        torch._foreach_lerp_(ms, gs, 1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
        den = torch._foreach_sqrt(vs)
        torch._foreach_div_(den, [math.sqrt(1 - b2**t) for t in ts])
        torch._foreach_add_(den, g["eps"])
        torch._foreach_addcdiv_(ps, ms, den, [-lr / (1 - b1**t) for t in ts])


class Adam(_AdamBase):
    """torch.optim.Adam (L2 weight decay)."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class AdamW(_AdamBase):
    """torch.optim.AdamW (decoupled weight decay)."""

    decoupled = True

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

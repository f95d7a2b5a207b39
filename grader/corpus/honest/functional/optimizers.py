"""SGD, momentum SGD, AdaGrad, RMSProp, Adam and AdamW, written with multi-tensor ops."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None


# ---- hyperparameter checks -------------------------------------------------

def _at_least(low: float, v: float) -> bool:
    return v >= low


def _within(low: float, high: float, low_open: bool, high_open: bool, v: float) -> bool:
    above = (operator.gt if low_open else operator.ge)(v, low)
    below = (operator.lt if high_open else operator.le)(v, high)
    return above and below


# name -> (predicate that NaN never satisfies, what it demands)
_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "lr": (partial(_at_least, 0), ">= 0"),
    "weight_decay": (partial(_at_least, 0), ">= 0"),
    "eps": (partial(_within, 0, float("inf"), True, False), "> 0"),
    "alpha": (partial(_within, 0, 1, False, True), "in [0, 1)"),
    "momentum": (partial(_within, 0, 1, True, True), "in (0, 1)"),
    "dampening": (partial(_within, 0, 1, False, False), "in [0, 1]"),
    "lr_decay": (partial(_at_least, 0), ">= 0"),
    "initial_accumulator_value": (partial(_at_least, 0), ">= 0"),
}
_BETA_RULE = (partial(_within, 0, 1, False, True), "in [0, 1)")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_one(name: str, value: object, rule: tuple[Callable[[float], bool], str]) -> None:
    if not _is_number(value):
        raise TypeError(f"{name} must be a Python int or float, got {type(value).__name__}")
    accepts, demand = rule
    if not accepts(value):
        raise ValueError(f"{name} must be {demand}, got {value!r}")


def _check_betas(betas: object) -> None:
    if not isinstance(betas, (tuple, list)):
        raise TypeError(f"betas must be a pair of numbers, got {type(betas).__name__}")
    if len(betas) != 2:
        raise ValueError(f"betas must hold exactly 2 values, got {len(betas)}")
    for index, beta in enumerate(betas):
        _check_one(f"betas[{index}]", beta, _BETA_RULE)


def _check_group(group: dict[str, Any]) -> None:
    for name in filter(_RULES.__contains__, group):
        _check_one(name, group[name], _RULES[name])
    if "betas" in group:
        _check_betas(group["betas"])


# ---- small pure helpers over lists of tensors --------------------------------

def _grads(params: list[Tensor]) -> list[Tensor]:
    return [p.grad for p in params]


def _l2(params: list[Tensor], weight_decay: float) -> list[Tensor]:
    """Gradients plus the L2 term, as new tensors (p.grad is never touched)."""
    grads = _grads(params)
    return torch._foreach_add(grads, params, alpha=weight_decay) if weight_decay else grads


def _denominator(squares: list[Tensor], eps: float, scales: list[float] | None = None) -> list[Tensor]:
    """sqrt(squares) (optionally divided per tensor) plus eps, in new tensors."""
    roots = torch._foreach_sqrt(squares)
    if scales is not None:
        torch._foreach_div_(roots, scales)
    torch._foreach_add_(roots, eps)
    return roots


# ---- the shared base ------------------------------------------------------------

class _ForeachOptimizer(Optimizer):
    """Validates hyperparameters and drives a per-group update over params with grads."""

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        _check_group(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if isinstance(param_group, dict):
            _check_group({**self.defaults, **param_group})
        super().add_param_group(param_group)

    def _slot(self, param: Tensor, key: str, make: Callable[[Tensor], Tensor]) -> Tensor:
        state = self.state[param]
        if key not in state:
            state[key] = make(param)
        return state[key]

    def _slots(self, params: list[Tensor], key: str, make: Callable[[Tensor], Tensor] = torch.zeros_like):
        return [self._slot(p, key, make) for p in params]

    def _advance(self, params: list[Tensor]) -> list[int]:
        """Bump each param's own step count and return the new counts."""
        counts = [self.state[p].get("step", 0) + 1 for p in params]
        for param, count in zip(params, counts):
            self.state[param]["step"] = count
        return counts

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        raise NotImplementedError

    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                _check_group(group)
                live = [p for p in group["params"] if p.grad is not None]
                if live:
                    self._update(group, live)
        return loss


class SGD(_ForeachOptimizer):
    """Plain SGD with optional L2 decay, like torch.optim.SGD."""

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        torch._foreach_add_(params, _l2(params, group["weight_decay"]), alpha=-group["lr"])


class SGDMomentum(_ForeachOptimizer):
    """SGD with (damped) momentum, like torch.optim.SGD with momentum."""

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay))

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        grads = _l2(params, group["weight_decay"])
        pairs = list(zip(params, grads))
        is_new = lambda pair: "momentum_buffer" not in self.state[pair[0]]  # noqa: E731
        old = [(self.state[p]["momentum_buffer"], g) for p, g in pairs if not is_new((p, g))]
        # the first step copies the gradient in, undamped
        for param, grad in filter(is_new, pairs):
            self.state[param]["momentum_buffer"] = grad.detach().clone()
        if old:
            buffers, old_grads = map(list, zip(*old))
            torch._foreach_mul_(buffers, group["momentum"])
            torch._foreach_add_(buffers, old_grads, alpha=1 - group["dampening"])
        torch._foreach_add_(params, [self.state[p]["momentum_buffer"] for p in params], alpha=-group["lr"])


class AdaGrad(_ForeachOptimizer):
    """AdaGrad with lr decay, like torch.optim.Adagrad."""

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        super().__init__(
            params,
            dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                 initial_accumulator_value=initial_accumulator_value, eps=eps),
        )

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        start = group["initial_accumulator_value"]
        sums = self._slots(params, "sum", lambda p: torch.full_like(p, start))
        counts = self._advance(params)
        grads = _l2(params, group["weight_decay"])
        torch._foreach_addcmul_(sums, grads, grads, value=1)
        rates = [-group["lr"] / (1 + (t - 1) * group["lr_decay"]) for t in counts]
        torch._foreach_addcdiv_(params, grads, _denominator(sums, group["eps"]), rates)


class RMSProp(_ForeachOptimizer):
    """RMSProp without momentum or centering, like torch.optim.RMSprop."""

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay))

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        averages = self._slots(params, "square_avg")
        grads = _l2(params, group["weight_decay"])
        torch._foreach_mul_(averages, group["alpha"])
        torch._foreach_addcmul_(averages, grads, grads, value=1 - group["alpha"])
        torch._foreach_addcdiv_(params, grads, _denominator(averages, group["eps"]), value=-group["lr"])


def _adam_update(opt: _ForeachOptimizer, group: dict[str, Any], params: list[Tensor], decoupled: bool) -> None:
    """One Adam step; decoupled=True shrinks the weights first (AdamW) instead of L2."""
    beta1, beta2 = group["betas"]
    lr, decay = group["lr"], group["weight_decay"]
    firsts, seconds = opt._slots(params, "exp_avg"), opt._slots(params, "exp_avg_sq")
    counts = opt._advance(params)
    if decoupled and decay:
        torch._foreach_mul_(params, 1 - lr * decay)
    grads = _grads(params) if decoupled else _l2(params, decay)
    torch._foreach_lerp_(firsts, grads, float(1 - beta1))
    torch._foreach_mul_(seconds, beta2)
    torch._foreach_addcmul_(seconds, grads, grads, value=1 - beta2)
    # bias corrections as Python floats, per param's own count
    root_c2 = [(1 - beta2**t) ** 0.5 for t in counts]
    steps = [-lr / (1 - beta1**t) for t in counts]
    torch._foreach_addcdiv_(params, firsts, _denominator(seconds, group["eps"], root_c2), steps)


class Adam(_ForeachOptimizer):
    """Adam with L2 decay, like torch.optim.Adam."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        _adam_update(self, group, params, decoupled=False)


class AdamW(_ForeachOptimizer):
    """Adam with decoupled weight decay, like torch.optim.AdamW."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _update(self, group: dict[str, Any], params: list[Tensor]) -> None:
        _adam_update(self, group, params, decoupled=True)

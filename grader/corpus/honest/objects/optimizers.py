"""Handout §4: six first-order optimizers built on one template base class.

``_TemplateOptimizer`` owns everything the six have in common: checking
hyperparameters (against a per-class table of rules), the closure, the loop
over groups and parameters, skipping parameters without a gradient and
creating per-parameter state. Each concrete optimizer only says which rules
apply, what a fresh state looks like and how one parameter is updated.

Updates are done one parameter at a time with in-place torch ops; per-step
scalars (bias corrections, decayed learning rates) are Python floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None


# --------------------------------------------------------------------------- #
# Hyperparameter rules
# --------------------------------------------------------------------------- #


def _plain_number(name: str, value: object) -> float:
    """Accept Python ints and floats only (no bools, tensors or strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a Python int or float, got {type(value).__name__}")
    return float(value)


@dataclass(frozen=True)
class _Interval:
    """A range a scalar hyperparameter must fall in.

    Attributes:
        low: Lower end.
        high: Upper end.
        open_low: Whether ``low`` itself is excluded.
        open_high: Whether ``high`` itself is excluded.
    """

    low: float = 0.0
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False

    def contains(self, x: float) -> bool:
        """Membership test; NaN never belongs."""
        above = x > self.low if self.open_low else x >= self.low
        below = x < self.high if self.open_high else x <= self.high
        return above and below

    def describe(self) -> str:
        left = "(" if self.open_low else "["
        right = ")" if self.open_high else "]"
        return f"{left}{self.low}, {self.high}{right}"

    def check(self, name: str, value: object) -> None:
        """Raise unless ``value`` is a plain number inside the interval.

        Args:
            name: Hyperparameter name, quoted in errors.
            value: The candidate.
        """
        number = _plain_number(name, value)
        if not self.contains(number):
            raise ValueError(f"{name}={value!r} is outside {self.describe()}")


@dataclass(frozen=True)
class _PairOf:
    """Rule for a two-element hyperparameter such as Adam's ``betas``.

    Attributes:
        each: Rule every element must satisfy.
    """

    each: _Interval

    def check(self, name: str, value: object) -> None:
        """Raise unless ``value`` is a tuple/list of two valid numbers.

        Args:
            name: Hyperparameter name, quoted in errors.
            value: The candidate.
        """
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be a pair of numbers, got {type(value).__name__}")
        if len(value) != 2:
            raise ValueError(f"{name} must hold exactly 2 values, got {len(value)}")
        for position, item in enumerate(value):
            self.each.check(f"{name}[{position}]", item)


_NON_NEGATIVE = _Interval()
_POSITIVE = _Interval(open_low=True)
_UNIT_HALF_OPEN = _Interval(0.0, 1.0, open_high=True)
_UNIT_OPEN = _Interval(0.0, 1.0, open_low=True, open_high=True)
_UNIT_CLOSED = _Interval(0.0, 1.0)


# --------------------------------------------------------------------------- #
# The template
# --------------------------------------------------------------------------- #


class _TemplateOptimizer(Optimizer):
    """Shared skeleton: validate, loop, skip, create state, then call a hook.

    Subclasses set ``_rules`` (hyperparameter name -> rule) and implement
    :meth:`_update`; stateful ones also implement :meth:`_fresh_state`.

    Args:
        params: Tensors or param-group dicts (any iterable, read once).
        defaults: Hyperparameters that every group inherits unless it
            overrides them.
    """

    _rules: ClassVar[dict[str, _Interval | _PairOf]] = {}
    _stateful: ClassVar[bool] = True
    _eager_state: ClassVar[bool] = False

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)
        if self._eager_state:
            for group in self.param_groups:
                for param in group["params"]:
                    self._ensure_state(param, group)

    # -- validation ---------------------------------------------------------

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        for name, rule in self._rules.items():
            if name in group:
                rule.check(name, group[name])

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Register a group, then make sure its hyperparameters are valid.

        Args:
            param_group: Dict with ``params`` and optional overrides.
        """
        super().add_param_group(param_group)
        self._check_hyperparameters(self.param_groups[-1])

    # -- state ----------------------------------------------------------------

    def _ensure_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[param]
        if not state:
            state.update(self._fresh_state(param, group))
        return state

    def _fresh_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        """Initial state of one parameter (override in stateful subclasses).

        Args:
            param: The parameter.
            group: Its group's hyperparameters.

        Returns:
            A dict of state entries; empty by default.
        """
        return {}

    # -- the template method ----------------------------------------------------

    def step(self, closure: Closure = None) -> Any:
        """Apply one update to every parameter that has a gradient.

        Args:
            closure: Optional callable that recomputes and returns the loss.

        Returns:
            The closure's result, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                self._check_hyperparameters(group)
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    state = self._ensure_state(param, group) if self._stateful else {}
                    self._update(param, grad, state, group)
        return loss

    def _update(self, param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Hook: change ``param`` in place (never ``grad``).

        Args:
            param: The tensor to update.
            grad: Its gradient, read only.
            state: Its state dict (already initialised).
            group: Its group's hyperparameters.
        """
        raise NotImplementedError


def _with_l2(param: Tensor, grad: Tensor, weight_decay: float) -> Tensor:
    """Gradient plus the L2 term, as a new tensor when the term is non-zero."""
    if weight_decay == 0:
        return grad
    return grad.add(param, alpha=weight_decay)


@dataclass(frozen=True)
class _AdamScalars:
    """Per-step scalars of Adam, computed in Python floats.

    Attributes:
        step_size: lr / (1 - beta1^t).
        denom_scale: sqrt(1 - beta2^t).
    """

    step_size: float
    denom_scale: float

    @classmethod
    def at(cls, lr: float, betas: Sequence[float], t: int) -> _AdamScalars:
        beta1, beta2 = betas
        return cls(step_size=lr / (1.0 - beta1**t), denom_scale=math.sqrt(1.0 - beta2**t))


class _AdamCore:
    """The moment updates and parameter step that Adam and AdamW share."""

    @staticmethod
    def zero_moments(param: Tensor) -> dict[str, Any]:
        return {
            "step": 0,
            "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
        }

    @staticmethod
    def advance(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        state["step"] += 1
        first, second = state["exp_avg"], state["exp_avg_sq"]
        first.lerp_(grad, 1.0 - beta1)
        second.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        scalars = _AdamScalars.at(group["lr"], group["betas"], state["step"])
        denom = second.sqrt().div_(scalars.denom_scale).add_(group["eps"])
        param.addcdiv_(first, denom, value=-scalars.step_size)


# --------------------------------------------------------------------------- #
# The six optimizers
# --------------------------------------------------------------------------- #


class SGD(_TemplateOptimizer):
    """Plain gradient descent with optional L2 decay; keeps no state.

    Args:
        params: Parameters or groups.
        lr: Step size.
        weight_decay: L2 coefficient added to the gradient.
    """

    _rules = {"lr": _NON_NEGATIVE, "weight_decay": _NON_NEGATIVE}
    _stateful = False

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def _update(self, param, grad, state, group):
        direction = _with_l2(param, grad, group["weight_decay"])
        param.add_(direction, alpha=-group["lr"])


class SGDMomentum(_TemplateOptimizer):
    """Gradient descent with a (possibly damped) momentum buffer.

    Args:
        params: Parameters or groups.
        lr: Step size.
        momentum: Decay of the buffer, in (0, 1).
        dampening: Fraction of each new gradient held back, in [0, 1].
        weight_decay: L2 coefficient.
    """

    _rules = {
        "lr": _NON_NEGATIVE,
        "momentum": _UNIT_OPEN,
        "dampening": _UNIT_CLOSED,
        "weight_decay": _NON_NEGATIVE,
    }

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            params, {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay}
        )

    def _update(self, param, grad, state, group):
        direction = _with_l2(param, grad, group["weight_decay"])
        buffer = state.get("momentum_buffer")
        if buffer is None:
            # First step: the buffer is (a copy of) the gradient, undamped.
            buffer = direction.detach().clone()
            state["momentum_buffer"] = buffer
        else:
            buffer.mul_(group["momentum"]).add_(direction, alpha=1.0 - group["dampening"])
        param.add_(buffer, alpha=-group["lr"])


class AdaGrad(_TemplateOptimizer):
    """Per-coordinate steps scaled by the root of all past squared gradients.

    Args:
        params: Parameters or groups.
        lr: Base step size.
        lr_decay: Step-size decay per step.
        weight_decay: L2 coefficient.
        initial_accumulator_value: Starting value of the running sum.
        eps: Added to the root for stability.
    """

    _rules = {
        "lr": _NON_NEGATIVE,
        "lr_decay": _NON_NEGATIVE,
        "weight_decay": _NON_NEGATIVE,
        "initial_accumulator_value": _NON_NEGATIVE,
        "eps": _POSITIVE,
    }
    _eager_state = True

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        super().__init__(
            params,
            {
                "lr": lr,
                "lr_decay": lr_decay,
                "weight_decay": weight_decay,
                "initial_accumulator_value": initial_accumulator_value,
                "eps": eps,
            },
        )

    def _fresh_state(self, param, group):
        start = group["initial_accumulator_value"]
        return {"step": 0, "sum": torch.full_like(param, start, memory_format=torch.preserve_format)}

    def _update(self, param, grad, state, group):
        state["step"] += 1
        direction = _with_l2(param, grad, group["weight_decay"])
        current_lr = group["lr"] / (1.0 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"]
        total.addcmul_(direction, direction, value=1.0)
        denom = total.sqrt().add_(group["eps"])
        param.addcdiv_(direction, denom, value=-current_lr)


class RMSProp(_TemplateOptimizer):
    """Steps scaled by the root of a decaying average of squared gradients.

    Args:
        params: Parameters or groups.
        lr: Step size.
        alpha: Decay of the running average, in [0, 1).
        eps: Added to the root for stability.
        weight_decay: L2 coefficient.
    """

    _rules = {"lr": _NON_NEGATIVE, "alpha": _UNIT_HALF_OPEN, "eps": _POSITIVE, "weight_decay": _NON_NEGATIVE}

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay})

    def _fresh_state(self, param, group):
        return {"square_avg": torch.zeros_like(param, memory_format=torch.preserve_format)}

    def _update(self, param, grad, state, group):
        direction = _with_l2(param, grad, group["weight_decay"])
        alpha = group["alpha"]
        average = state["square_avg"]
        average.mul_(alpha).addcmul_(direction, direction, value=1.0 - alpha)
        denom = average.sqrt().add_(group["eps"])
        param.addcdiv_(direction, denom, value=-group["lr"])


_ADAM_RULES: dict[str, _Interval | _PairOf] = {
    "lr": _NON_NEGATIVE,
    "betas": _PairOf(_UNIT_HALF_OPEN),
    "eps": _POSITIVE,
    "weight_decay": _NON_NEGATIVE,
}


class Adam(_TemplateOptimizer):
    """Adam with bias-corrected moments; weight decay is L2 (through the moments).

    Args:
        params: Parameters or groups.
        lr: Step size.
        betas: Decay rates of the first and second moments.
        eps: Added to the corrected root for stability.
        weight_decay: L2 coefficient.
    """

    _rules = _ADAM_RULES

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _fresh_state(self, param, group):
        return _AdamCore.zero_moments(param)

    def _update(self, param, grad, state, group):
        direction = _with_l2(param, grad, group["weight_decay"])
        _AdamCore.advance(param, direction, state, group)


class AdamW(_TemplateOptimizer):
    """Adam with decoupled weight decay: the weights shrink before each step.

    Args:
        params: Parameters or groups.
        lr: Step size.
        betas: Decay rates of the first and second moments.
        eps: Added to the corrected root for stability.
        weight_decay: Decoupled shrink factor per unit of lr.
    """

    _rules = _ADAM_RULES

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _fresh_state(self, param, group):
        return _AdamCore.zero_moments(param)

    def _update(self, param, grad, state, group):
        param.mul_(1.0 - group["lr"] * group["weight_decay"])
        _AdamCore.advance(param, grad, state, group)

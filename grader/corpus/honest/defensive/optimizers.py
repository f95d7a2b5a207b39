"""Handout §4: SGD, SGD with momentum, AdaGrad, RMSProp, Adam and AdamW, written by hand.

Every class validates its hyperparameters (in the constructor, in each added
param group and again at every step, since schedules edit groups in place),
skips parameters without a gradient, never writes ``p.grad`` and keeps all of
its per-parameter state in ``self.state[p]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None
_Rule = Callable[[str, object], None]

_DEFAULT_SGD_LR = 1e-3
_DEFAULT_MOMENTUM = 0.9
_DEFAULT_ADAGRAD_LR = 1e-2
_DEFAULT_ADAGRAD_EPS = 1e-10
_DEFAULT_RMSPROP_LR = 1e-2
_DEFAULT_RMSPROP_ALPHA = 0.99
_DEFAULT_RMSPROP_EPS = 1e-8
_DEFAULT_ADAM_LR = 1e-3
_DEFAULT_ADAM_BETAS = (0.9, 0.999)
_DEFAULT_ADAM_EPS = 1e-8
_DEFAULT_ADAMW_WEIGHT_DECAY = 1e-2

_STEP_KEY = "step"


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"hyperparameter '{name}' must be a Python int or float, received {type(value).__name__}")
    as_float = float(value)
    if math.isnan(as_float) or math.isinf(as_float):
        raise ValueError(f"hyperparameter '{name}' must be finite, received {value}")
    return as_float


def _require_non_negative(name: str, value: object) -> None:
    number = _require_number(name, value)
    if number < 0:
        raise ValueError(f"hyperparameter '{name}' must be >= 0, received {value}")


def _require_positive(name: str, value: object) -> None:
    number = _require_number(name, value)
    if number <= 0:
        raise ValueError(f"hyperparameter '{name}' must be > 0, received {value}")


def _require_half_open_unit(name: str, value: object) -> None:
    number = _require_number(name, value)
    if not 0.0 <= number < 1.0:
        raise ValueError(f"hyperparameter '{name}' must lie in [0, 1), received {value}")


def _require_open_unit(name: str, value: object) -> None:
    number = _require_number(name, value)
    if not 0.0 < number < 1.0:
        raise ValueError(f"hyperparameter '{name}' must lie in (0, 1), received {value}")


def _require_closed_unit(name: str, value: object) -> None:
    number = _require_number(name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"hyperparameter '{name}' must lie in [0, 1], received {value}")


def _require_betas(name: str, value: object) -> None:
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"hyperparameter '{name}' must be a pair of numbers, received {type(value).__name__}")
    if len(value) != 2:
        raise ValueError(f"hyperparameter '{name}' must hold exactly 2 numbers, received {len(value)}")
    for position, beta in enumerate(value):
        _require_half_open_unit(f"{name}[{position}]", beta)


# --------------------------------------------------------------------------- #
# private tensor helpers
# --------------------------------------------------------------------------- #
def _with_l2(grad: Tensor, param: Tensor, weight_decay: float) -> Tensor:
    """The gradient plus the L2 term, as a new tensor (``grad`` itself is never modified)."""
    if weight_decay == 0:
        return grad
    return grad.add(param, alpha=weight_decay)


def _zeros_like(param: Tensor) -> Tensor:
    return torch.zeros_like(param, memory_format=torch.preserve_format)


def _next_step(state: dict[str, Any]) -> int:
    count = int(state.get(_STEP_KEY, 0)) + 1
    state[_STEP_KEY] = count
    return count


# --------------------------------------------------------------------------- #
# shared base
# --------------------------------------------------------------------------- #
class _CheckedOptimizer(Optimizer):
    """Validation, closure handling and the per-parameter loop shared by every optimizer here."""

    _RULES: ClassVar[dict[str, _Rule]] = {}

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        self._validate_group(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if isinstance(param_group, Mapping):
            merged = {**self.defaults, **{key: val for key, val in param_group.items() if key != "params"}}
            self._validate_group(merged)
        super().add_param_group(param_group)

    def _validate_group(self, group: Mapping[str, Any]) -> None:
        for key, rule in self._RULES.items():
            if key not in group:
                raise ValueError(f"hyperparameter '{key}' is missing from a param group")
            rule(key, group[key])

    @staticmethod
    def _evaluate_closure(closure: Closure) -> Any:
        if closure is None:
            return None
        if not callable(closure):
            raise TypeError(f"argument 'closure' must be callable or None, received {type(closure).__name__}")
        with torch.enable_grad():
            return closure()

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._evaluate_closure(closure)
        for group in self.param_groups:
            self._validate_group(group)
            for param in group["params"]:
                if param.grad is None:
                    continue
                self._update_parameter(param, param.grad, group, self.state[param])
        return loss

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define its update")


# --------------------------------------------------------------------------- #
# public optimizers
# --------------------------------------------------------------------------- #
class SGD(_CheckedOptimizer):
    """Plain gradient descent with optional L2 weight decay; keeps no state."""

    _RULES: ClassVar[dict[str, _Rule]] = {"lr": _require_non_negative, "weight_decay": _require_non_negative}

    def __init__(self, params: Params, lr: float = _DEFAULT_SGD_LR, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        direction = _with_l2(grad, param, group["weight_decay"])
        param.add_(direction, alpha=-group["lr"])


class SGDMomentum(_CheckedOptimizer):
    """Heavy-ball SGD: the buffer starts as a copy of the first gradient."""

    _RULES: ClassVar[dict[str, _Rule]] = {
        "lr": _require_non_negative,
        "momentum": _require_open_unit,
        "dampening": _require_closed_unit,
        "weight_decay": _require_non_negative,
    }

    def __init__(
        self, params: Params, lr: float = _DEFAULT_SGD_LR, momentum: float = _DEFAULT_MOMENTUM, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        direction = _with_l2(grad, param, group["weight_decay"])
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = direction.detach().clone(memory_format=torch.preserve_format)
            state["momentum_buffer"] = buffer
        else:
            buffer.mul_(group["momentum"]).add_(direction, alpha=1.0 - group["dampening"])
        param.add_(buffer, alpha=-group["lr"])


class AdaGrad(_CheckedOptimizer):
    """Per-coordinate steps scaled by the root of the running sum of squared gradients."""

    _RULES: ClassVar[dict[str, _Rule]] = {
        "lr": _require_non_negative,
        "lr_decay": _require_non_negative,
        "weight_decay": _require_non_negative,
        "initial_accumulator_value": _require_non_negative,
        "eps": _require_positive,
    }

    def __init__(
        self, params: Params, lr: float = _DEFAULT_ADAGRAD_LR, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = _DEFAULT_ADAGRAD_EPS,
    ) -> None:
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "eps": eps,
        }
        super().__init__(params, defaults)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        if "sum" not in state:
            state["sum"] = torch.full_like(
                param, float(group["initial_accumulator_value"]), memory_format=torch.preserve_format
            )
        count = _next_step(state)
        direction = _with_l2(grad, param, group["weight_decay"])
        decayed_lr = group["lr"] / (1.0 + (count - 1) * group["lr_decay"])

        squares = state["sum"]
        squares.addcmul_(direction, direction, value=1.0)
        denominator = squares.sqrt().add_(group["eps"])
        param.addcdiv_(direction, denominator, value=-decayed_lr)


class RMSProp(_CheckedOptimizer):
    """Steps scaled by the root of an exponential average of squared gradients."""

    _RULES: ClassVar[dict[str, _Rule]] = {
        "lr": _require_non_negative,
        "alpha": _require_half_open_unit,
        "eps": _require_positive,
        "weight_decay": _require_non_negative,
    }

    def __init__(
        self, params: Params, lr: float = _DEFAULT_RMSPROP_LR, alpha: float = _DEFAULT_RMSPROP_ALPHA,
        eps: float = _DEFAULT_RMSPROP_EPS, weight_decay: float = 0.0,
    ) -> None:
        defaults = {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        if "square_avg" not in state:
            state["square_avg"] = _zeros_like(param)
        direction = _with_l2(grad, param, group["weight_decay"])
        alpha = group["alpha"]

        average = state["square_avg"]
        average.mul_(alpha).addcmul_(direction, direction, value=1.0 - alpha)
        denominator = average.sqrt().add_(group["eps"])
        param.addcdiv_(direction, denominator, value=-group["lr"])


def _adam_moment_update(
    param: Tensor, direction: Tensor, group: Mapping[str, Any], state: dict[str, Any]
) -> None:
    """Bias-corrected Adam step on ``param`` from an already-decayed ``direction``."""
    if "exp_avg" not in state:
        state["exp_avg"] = _zeros_like(param)
        state["exp_avg_sq"] = _zeros_like(param)
    count = _next_step(state)
    beta1, beta2 = float(group["betas"][0]), float(group["betas"][1])

    first = state["exp_avg"]
    second = state["exp_avg_sq"]
    first.mul_(beta1).add_(direction, alpha=1.0 - beta1)
    second.mul_(beta2).addcmul_(direction, direction, value=1.0 - beta2)

    first_correction = 1.0 - beta1**count
    second_correction = 1.0 - beta2**count
    denominator = (second / second_correction).sqrt_().add_(group["eps"])
    param.addcdiv_(first, denominator, value=-group["lr"] / first_correction)


_ADAM_RULES: dict[str, _Rule] = {
    "lr": _require_non_negative,
    "betas": _require_betas,
    "eps": _require_positive,
    "weight_decay": _require_non_negative,
}


class Adam(_CheckedOptimizer):
    """Adam with L2 weight decay folded into the gradient."""

    _RULES: ClassVar[dict[str, _Rule]] = _ADAM_RULES

    def __init__(
        self, params: Params, lr: float = _DEFAULT_ADAM_LR, betas: tuple[float, float] = _DEFAULT_ADAM_BETAS,
        eps: float = _DEFAULT_ADAM_EPS, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        direction = _with_l2(grad, param, group["weight_decay"])
        _adam_moment_update(param, direction, group, state)


class AdamW(_CheckedOptimizer):
    """Adam with decoupled weight decay: shrink the weights, then take Adam's step."""

    _RULES: ClassVar[dict[str, _Rule]] = _ADAM_RULES

    def __init__(
        self, params: Params, lr: float = _DEFAULT_ADAM_LR, betas: tuple[float, float] = _DEFAULT_ADAM_BETAS,
        eps: float = _DEFAULT_ADAM_EPS, weight_decay: float = _DEFAULT_ADAMW_WEIGHT_DECAY,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

    def _update_parameter(self, param: Tensor, grad: Tensor, group: Mapping[str, Any], state: dict[str, Any]) -> None:
        shrink = 1.0 - group["lr"] * group["weight_decay"]
        if shrink != 1.0:
            param.mul_(shrink)
        _adam_moment_update(param, grad, group, state)

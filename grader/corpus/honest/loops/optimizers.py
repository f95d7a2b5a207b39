"""Handout §4: six optimizers written by hand on top of ``torch.optim.Optimizer``.

My plan: one small base class does the shared work (checking hyperparameters,
looping over groups and parameters, skipping params without gradients, the
closure). Each optimizer then only writes how ONE parameter is updated.
I update one parameter at a time with plain in-place tensor operations.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None


# ----------------------------------------------------------------------------
# Checking hyperparameters
# ----------------------------------------------------------------------------


def _read_number(value, name: str) -> float:
    """A hyperparameter must be a plain real number: not a bool, tensor or string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number (int or float), got {type(value).__name__}")
    return float(value)


def _check_at_least_zero(value, name: str) -> None:
    """The value must be >= 0."""
    number = _read_number(value, name)
    if not (number >= 0.0):
        raise ValueError(f"Invalid {name}: {value!r} (must be >= 0)")


def _check_above_zero(value, name: str) -> None:
    """The value must be > 0."""
    number = _read_number(value, name)
    if not (number > 0.0):
        raise ValueError(f"Invalid {name}: {value!r} (must be > 0)")


def _check_zero_to_below_one(value, name: str) -> None:
    """The value must be in [0, 1)."""
    number = _read_number(value, name)
    if not (0.0 <= number < 1.0):
        raise ValueError(f"Invalid {name}: {value!r} (must be in [0, 1))")


def _check_open_zero_one(value, name: str) -> None:
    """The value must be in (0, 1)."""
    number = _read_number(value, name)
    if not (0.0 < number < 1.0):
        raise ValueError(f"Invalid {name}: {value!r} (must be in (0, 1))")


def _check_closed_zero_one(value, name: str) -> None:
    """The value must be in [0, 1]."""
    number = _read_number(value, name)
    if not (0.0 <= number <= 1.0):
        raise ValueError(f"Invalid {name}: {value!r} (must be in [0, 1])")


def _check_betas(value, name: str) -> None:
    """betas must be a tuple or list of two numbers, each in [0, 1)."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be a pair of numbers, got {type(value).__name__}")
    if len(value) != 2:
        raise ValueError(f"Invalid {name}: {value!r} (must hold exactly two numbers)")
    for position in range(2):
        _check_zero_to_below_one(value[position], f"{name}[{position}]")


# ----------------------------------------------------------------------------
# Shared base class
# ----------------------------------------------------------------------------


class _OneParameterAtATimeOptimizer(Optimizer):
    """Base class: checks hyperparameters and calls ``_update_parameter`` for each param."""

    # Each subclass lists (hyperparameter name, checking function).
    HYPERPARAMETER_CHECKS: list = []

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        # Step 1: check the constructor's own values first, so errors name them.
        self._check_hyperparameters(defaults)
        # Step 2: let torch's Optimizer build the param groups (it calls add_param_group).
        super().__init__(params, defaults)

    def _check_hyperparameters(self, values: dict[str, Any]) -> None:
        """Run every check of this optimizer on a dict of hyperparameters."""
        for hyperparameter_name, check_function in self.HYPERPARAMETER_CHECKS:
            if hyperparameter_name in values:
                check_function(values[hyperparameter_name], hyperparameter_name)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Check a group's hyperparameters (its own or the defaults) before adding it."""
        # Step 1: fill in the values the group does not set from the defaults.
        values_to_check = {}
        for hyperparameter_name, _ in self.HYPERPARAMETER_CHECKS:
            if isinstance(param_group, dict) and hyperparameter_name in param_group:
                values_to_check[hyperparameter_name] = param_group[hyperparameter_name]
            elif hyperparameter_name in self.defaults:
                values_to_check[hyperparameter_name] = self.defaults[hyperparameter_name]
        # Step 2: check them, then let torch add the group.
        self._check_hyperparameters(values_to_check)
        super().add_param_group(param_group)

    def _update_parameter(self, parameter: Tensor, gradient: Tensor, state: dict, group: dict) -> None:
        """Update one parameter in place (written by each subclass)."""
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        """One optimization step over every parameter that has a gradient."""
        # Step 1: evaluate the closure (with gradients switched on) if there is one.
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Step 2: go through every group and every parameter in it.
        for group in self.param_groups:
            for parameter in group["params"]:
                # A parameter without a gradient is left completely alone.
                if parameter.grad is None:
                    continue
                state_of_parameter = self.state[parameter]
                self._update_parameter(parameter, parameter.grad, state_of_parameter, group)
        return loss


def _gradient_with_l2(parameter: Tensor, gradient: Tensor, weight_decay: float) -> Tensor:
    """g + weight_decay * theta, as a NEW tensor (p.grad itself is never changed)."""
    if weight_decay != 0:
        return gradient.add(parameter, alpha=weight_decay)
    return gradient


# ----------------------------------------------------------------------------
# The six optimizers
# ----------------------------------------------------------------------------


class SGD(_OneParameterAtATimeOptimizer):
    """Plain SGD (same results as torch.optim.SGD with weight_decay)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("weight_decay", _check_at_least_zero),
    ]

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # Add the L2 term to the gradient (in a new tensor).
        direction = _gradient_with_l2(parameter, gradient, group["weight_decay"])
        # theta <- theta - lr * g
        parameter.add_(direction, alpha=-group["lr"])

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)


class SGDMomentum(_OneParameterAtATimeOptimizer):
    """SGD with a momentum buffer (same results as torch.optim.SGD with momentum)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("momentum", _check_open_zero_one),
        ("dampening", _check_closed_zero_one),
        ("weight_decay", _check_at_least_zero),
    ]

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            params, {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay}
        )

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # Step 1: add the L2 term.
        direction = _gradient_with_l2(parameter, gradient, group["weight_decay"])
        # Step 2: the first step starts the buffer at a COPY of the gradient (undamped).
        if "momentum_buffer" not in state or state["momentum_buffer"] is None:
            state["momentum_buffer"] = direction.detach().clone()
        else:
            # Later steps: b <- momentum * b + (1 - dampening) * g
            momentum_buffer = state["momentum_buffer"]
            momentum_buffer.mul_(group["momentum"])
            momentum_buffer.add_(direction, alpha=1.0 - group["dampening"])
        # Step 3: theta <- theta - lr * b
        parameter.add_(state["momentum_buffer"], alpha=-group["lr"])

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)


class AdaGrad(_OneParameterAtATimeOptimizer):
    """AdaGrad: divide by the root of the running SUM of squared gradients (as torch.optim.Adagrad)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("lr_decay", _check_at_least_zero),
        ("weight_decay", _check_at_least_zero),
        ("initial_accumulator_value", _check_at_least_zero),
        ("eps", _check_above_zero),
    ]

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

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # Step 1: make the state the first time this parameter is updated.
        if "sum" not in state:
            state["sum"] = torch.full_like(
                parameter, float(group["initial_accumulator_value"]), memory_format=torch.preserve_format
            )
            state["step"] = 0
        # Step 2: count this step (a Python int, so no host sync is needed).
        state["step"] = int(state["step"]) + 1
        step_number = state["step"]
        # Step 3: add the L2 term and accumulate the squared gradient.
        direction = _gradient_with_l2(parameter, gradient, group["weight_decay"])
        sum_of_squares = state["sum"]
        sum_of_squares.addcmul_(direction, direction, value=1.0)
        # Step 4: learning rate decayed with the step count, computed as a Python float.
        current_learning_rate = group["lr"] / (1.0 + (step_number - 1) * group["lr_decay"])
        # Step 5: theta <- theta - lr_t * g / (sqrt(G) + eps)
        denominator = sum_of_squares.sqrt().add_(group["eps"])
        parameter.addcdiv_(direction, denominator, value=-current_learning_rate)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)


class RMSProp(_OneParameterAtATimeOptimizer):
    """RMSProp: divide by the root of a decaying AVERAGE of squared gradients (as torch.optim.RMSprop)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("alpha", _check_zero_to_below_one),
        ("eps", _check_above_zero),
        ("weight_decay", _check_at_least_zero),
    ]

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay})

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # Step 1: make the state the first time.
        if "square_avg" not in state:
            state["square_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            state["step"] = 0
        state["step"] = int(state["step"]) + 1
        # Step 2: add the L2 term.
        direction = _gradient_with_l2(parameter, gradient, group["weight_decay"])
        # Step 3: v <- alpha * v + (1 - alpha) * g^2
        square_average = state["square_avg"]
        square_average.mul_(group["alpha"])
        square_average.addcmul_(direction, direction, value=1.0 - group["alpha"])
        # Step 4: theta <- theta - lr * g / (sqrt(v) + eps)
        denominator = square_average.sqrt().add_(group["eps"])
        parameter.addcdiv_(direction, denominator, value=-group["lr"])

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)


def _adam_moment_update(parameter, direction, state, group) -> None:
    """The part shared by Adam and AdamW: update m and v, then take the bias-corrected step."""
    # Step 1: make the state the first time.
    if "exp_avg" not in state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
    # Step 2: count the step (Python int: the bias corrections stay Python floats).
    state["step"] = int(state["step"]) + 1
    step_number = state["step"]
    beta1, beta2 = group["betas"]
    # Step 3: m <- beta1 * m + (1 - beta1) * g
    first_moment = state["exp_avg"]
    first_moment.mul_(beta1)
    first_moment.add_(direction, alpha=1.0 - beta1)
    # Step 4: v <- beta2 * v + (1 - beta2) * g^2
    second_moment = state["exp_avg_sq"]
    second_moment.mul_(beta2)
    second_moment.addcmul_(direction, direction, value=1.0 - beta2)
    # Step 5: bias corrections c1 = 1 - beta1^t and c2 = 1 - beta2^t.
    bias_correction_first = 1.0 - beta1**step_number
    bias_correction_second = 1.0 - beta2**step_number
    # Step 6: theta <- theta - lr * (m / c1) / (sqrt(v / c2) + eps), with eps OUTSIDE the root.
    denominator = second_moment.sqrt().div_(math.sqrt(bias_correction_second)).add_(group["eps"])
    step_size = group["lr"] / bias_correction_first
    parameter.addcdiv_(first_moment, denominator, value=-step_size)


class Adam(_OneParameterAtATimeOptimizer):
    """Adam with L2 weight decay added to the gradient (as torch.optim.Adam)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("betas", _check_betas),
        ("eps", _check_above_zero),
        ("weight_decay", _check_at_least_zero),
    ]

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # The L2 term goes through the moments.
        direction = _gradient_with_l2(parameter, gradient, group["weight_decay"])
        _adam_moment_update(parameter, direction, state, group)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)


class AdamW(_OneParameterAtATimeOptimizer):
    """Adam with decoupled weight decay (as torch.optim.AdamW)."""

    HYPERPARAMETER_CHECKS = [
        ("lr", _check_at_least_zero),
        ("betas", _check_betas),
        ("eps", _check_above_zero),
        ("weight_decay", _check_at_least_zero),
    ]

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _update_parameter(self, parameter, gradient, state, group) -> None:
        # Step 1: shrink the weights directly: theta <- theta * (1 - lr * lambda).
        parameter.mul_(1.0 - group["lr"] * group["weight_decay"])
        # Step 2: Adam's update on the raw gradient (no L2 term).
        _adam_moment_update(parameter, gradient, state, group)

    def step(self, closure: Closure = None) -> Any:
        return super().step(closure)

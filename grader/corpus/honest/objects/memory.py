"""Handout §1.3: a byte budget for training (weights, grads, optimizer state, activations).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from .precision import bytes_per_element


@dataclass(frozen=True)
class MemoryBreakdown:
    """Training memory split by kind, in bytes.

    Attributes:
        parameters: Bytes of the weights.
        gradients: Bytes of their gradients.
        optimizer_state: Bytes of the optimizer's per-parameter buffers.
        activations: Bytes saved for the backward pass.
        total: Sum of the four above.
    """

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


# How many parameter-shaped buffers each torch.optim optimizer keeps.
_STATE_TENSORS: dict[str, int] = {
    "sgd": 0,
    "sgd_momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


def _state_multiplier(optimizer_name: object) -> int:
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    if optimizer_name not in _STATE_TENSORS:
        known = ", ".join(sorted(_STATE_TENSORS))
        raise ValueError(f"optimizer_name {optimizer_name!r} is unknown; expected one of {known}")
    return _STATE_TENSORS[optimizer_name]


def _exact_amount(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, numbers.Rational):
        exact = Fraction(int(value.numerator), int(value.denominator))
    else:
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be finite, got {value!r}")
        exact = Fraction(as_float)
    if exact < 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return exact


def count_parameters(model: nn.Module) -> int:
    """Count the scalars a model trains.

    Args:
        model: Any module; parameters shared between submodules count once.

    Returns:
        Total number of parameter elements.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return sum(int(p.numel()) for p in model.parameters())


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Count the optimizer's per-parameter state values.

    Args:
        optimizer_name: One of "sgd", "sgd_momentum", "adagrad", "rmsprop",
            "adam", "adamw".
        num_params: How many parameters the optimizer updates.

    Returns:
        Number of state floats (step counters excluded).
    """
    factor = _state_multiplier(optimizer_name)
    return factor * _count(num_params, "num_params")


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Add up the bytes held while training.

    Args:
        num_params: Number of parameters.
        num_activations: Number of activation values kept for backward.
        optimizer_name: Optimizer key as in :func:`optimizer_state_floats`.
        param_dtype: Dtype of weights, gradients and optimizer state.
        activation_dtype: Dtype of the saved activations.

    Returns:
        A :class:`MemoryBreakdown` in bytes.
    """
    n_params = _count(num_params, "num_params")
    n_acts = _count(num_activations, "num_activations")
    state_floats = optimizer_state_floats(optimizer_name, n_params)
    for label, dt in (("param_dtype", param_dtype), ("activation_dtype", activation_dtype)):
        if not isinstance(dt, torch.dtype):
            raise TypeError(f"{label} must be a torch.dtype, got {type(dt).__name__}")
    param_width = bytes_per_element(param_dtype)
    act_width = bytes_per_element(activation_dtype)
    parts = {
        "parameters": n_params * param_width,
        "gradients": n_params * param_width,
        "optimizer_state": state_floats * param_width,
        "activations": n_acts * act_width,
    }
    return MemoryBreakdown(**parts, total=sum(parts.values()))


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """Largest parameter count that fits in a memory budget.

    Args:
        memory_bytes: Available memory, taken at its exact value.
        bytes_per_parameter: Cost of one parameter, exact and positive.

    Returns:
        ``floor(memory_bytes / bytes_per_parameter)`` computed without rounding.
    """
    budget = _exact_amount(memory_bytes, "memory_bytes")
    cost = _exact_amount(bytes_per_parameter, "bytes_per_parameter")
    if cost == 0:
        raise ValueError("bytes_per_parameter must be positive")
    return math.floor(budget / cost)

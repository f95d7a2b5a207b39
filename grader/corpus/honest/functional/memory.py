"""Training memory: parameters, gradients, optimizer state, activations."""

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
    """Bytes per kind of training memory, plus their total."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


# per-parameter state tensors torch.optim keeps with default flags
_STATE_FLOATS = {"sgd": 0, "sgd_momentum": 1, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _finite_real(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        exact = Fraction(int(value))
    elif math.isfinite(float(value)):
        exact = Fraction(float(value))
    else:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if exact < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return exact


def _dtype_width(dtype: object, name: str) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")
    try:
        return bytes_per_element(dtype)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def count_parameters(model: nn.Module) -> int:
    """Distinct scalar parameters of a module."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    # parameters() already yields a shared tensor once
    return sum(map(lambda p: int(p.numel()), model.parameters()))


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Per-parameter state floats an optimizer keeps."""
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    count = _count(num_params, "num_params")
    if optimizer_name not in _STATE_FLOATS:
        raise ValueError(f"optimizer_name {optimizer_name!r} is unknown; use one of {sorted(_STATE_FLOATS)}")
    return _STATE_FLOATS[optimizer_name] * count


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes of each part of training memory."""
    params = _count(num_params, "num_params")
    acts = _count(num_activations, "num_activations")
    state = optimizer_state_floats(optimizer_name, params)
    width = _dtype_width(param_dtype, "param_dtype")
    parts = (params * width, params * width, state * width, acts * _dtype_width(activation_dtype, "activation_dtype"))
    return MemoryBreakdown(*parts, total=sum(parts))


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """Largest parameter count that fits, from the exact quotient."""
    budget = _finite_real(memory_bytes, "memory_bytes")
    each = _finite_real(bytes_per_parameter, "bytes_per_parameter")
    if each == 0:
        raise ValueError("bytes_per_parameter must be > 0")
    return int(math.floor(budget / each))

"""Handout §1.3: bytes of parameters, gradients, optimizer state and activations."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from .precision import bytes_per_element

# Per-parameter state tensors that torch.optim keeps (default flags, step counters excluded).
_STATE_FLOATS_PER_PARAMETER: dict[str, int] = {
    "sgd": 0,
    "sgd_momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Training memory in bytes, split by kind; ``total`` adds them up."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_module(name: str, value: object) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"argument '{name}' has to be an nn.Module, received {type(value).__name__}")
    return value


def _require_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"argument '{name}' has to be an int, received {type(value).__name__}")
    if value < 0:
        raise ValueError(f"argument '{name}' has to be non-negative, received {value}")
    return value


def _require_optimizer_name(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"argument '{name}' has to be a str, received {type(value).__name__}")
    if value not in _STATE_FLOATS_PER_PARAMETER:
        known = ", ".join(sorted(_STATE_FLOATS_PER_PARAMETER))
        raise ValueError(f"argument '{name}': unknown optimizer {value!r} (known: {known})")
    return value


def _require_dtype(name: str, value: object) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"argument '{name}' has to be a torch.dtype, received {type(value).__name__}")
    return value


def _element_size(name: str, dtype: object) -> int:
    checked = _require_dtype(name, dtype)
    try:
        return bytes_per_element(checked)
    except ValueError as error:
        raise ValueError(f"argument '{name}': {error}") from None


def _require_exact_real(name: str, value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"argument '{name}' has to be a real number, received {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"argument '{name}' has to be finite, received {as_float}")
    return Fraction(as_float)


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def count_parameters(model: nn.Module) -> int:
    """Scalar parameters of ``model``; shared tensors are counted once."""
    module = _require_module("model", model)
    unique: dict[int, nn.Parameter] = {}
    for parameter in module.parameters():
        unique.setdefault(id(parameter), parameter)
    return sum(int(parameter.numel()) for parameter in unique.values())


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Per-parameter optimizer state, in floats, for ``num_params`` parameters."""
    key = _require_optimizer_name("optimizer_name", optimizer_name)
    count = _require_count("num_params", num_params)
    return _STATE_FLOATS_PER_PARAMETER[key] * count


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes for parameters, gradients, optimizer state and saved activations."""
    params = _require_count("num_params", num_params)
    activations = _require_count("num_activations", num_activations)
    key = _require_optimizer_name("optimizer_name", optimizer_name)
    param_size = _element_size("param_dtype", param_dtype)
    activation_size = _element_size("activation_dtype", activation_dtype)

    parameter_bytes = params * param_size
    gradient_bytes = params * param_size
    state_bytes = optimizer_state_floats(key, params) * param_size
    activation_bytes = activations * activation_size
    return MemoryBreakdown(
        parameters=parameter_bytes,
        gradients=gradient_bytes,
        optimizer_state=state_bytes,
        activations=activation_bytes,
        total=parameter_bytes + gradient_bytes + state_bytes + activation_bytes,
    )


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """Largest n with n * bytes_per_parameter <= memory_bytes, using exact arithmetic."""
    budget = _require_exact_real("memory_bytes", memory_bytes)
    per_parameter = _require_exact_real("bytes_per_parameter", bytes_per_parameter)
    if budget < 0:
        raise ValueError(f"argument 'memory_bytes' has to be non-negative, received {memory_bytes}")
    if per_parameter <= 0:
        raise ValueError(f"argument 'bytes_per_parameter' has to be positive, received {bytes_per_parameter}")
    return int(math.floor(budget / per_parameter))

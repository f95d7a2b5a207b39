"""Handout §1.3: parameters, gradients, optimizer state and activations in bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from ._validate import require_dtype, require_int
from .precision import bytes_per_element

__all__ = [
    "MemoryBreakdown",
    "count_parameters",
    "max_trainable_parameters",
    "optimizer_state_floats",
    "training_memory",
]

# Per-parameter state tensors each optimizer keeps (torch.optim's defaults):
# momentum buffer; Adagrad's sum of squares; RMSprop's square average; Adam's
# two moments. Step counters are per-tensor scalars, not per-parameter state.
_STATE_PER_PARAM = {
    "sgd": 0,
    "sgd_momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of each kind of training memory; ``total`` is their sum."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (a parameter shared by two layers counts once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters())


def _state_count(optimizer_name: str) -> int:
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    try:
        return _STATE_PER_PARAM[optimizer_name.lower()]
    except KeyError:
        raise ValueError(
            f"optimizer_name {optimizer_name!r} is not one of {', '.join(_STATE_PER_PARAM)}"
        ) from None


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Floats of per-parameter state ``optimizer_name`` keeps for ``num_params`` parameters."""
    return _state_count(optimizer_name) * require_int("num_params", num_params)


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes held while training: parameters, their gradients and the optimizer's
    state (all in ``param_dtype``, as torch.optim keeps state like its parameter),
    and ``num_activations`` saved activations in ``activation_dtype``."""
    n = require_int("num_params", num_params)
    acts = require_int("num_activations", num_activations)
    pbytes = bytes_per_element(require_dtype("param_dtype", param_dtype))
    abytes = bytes_per_element(require_dtype("activation_dtype", activation_dtype))
    params, grads = n * pbytes, n * pbytes
    state = optimizer_state_floats(optimizer_name, n) * pbytes
    activations = acts * abytes
    return MemoryBreakdown(params, grads, state, activations, params + grads + state + activations)


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """The most parameters that fit in ``memory_bytes`` at ``bytes_per_parameter``
    each: the largest int n with n * bytes_per_parameter <= memory_bytes, the
    arguments taken as the exact values they hold (floats included), i.e. the
    floor of the exact quotient. ``max_trainable_parameters(1, 0.1)`` is 9: the
    float 0.1 is 0.1000000000000000055..., so 10 of them exceed 1 byte."""
    for name, v in (("memory_bytes", memory_bytes), ("bytes_per_parameter", bytes_per_parameter)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}")
        if not v >= 0 or v == float("inf"):
            raise ValueError(f"{name} must be finite and >= 0, got {v}")
    if bytes_per_parameter <= 0:
        raise ValueError(f"bytes_per_parameter must be > 0, got {bytes_per_parameter}")
    # Fractions hold a float's exact binary value: no rounding before the floor
    # (math.floor(m / per) rounds the quotient first and gets 1 / 0.1 wrong).
    return math.floor(Fraction(memory_bytes) / Fraction(bytes_per_parameter))

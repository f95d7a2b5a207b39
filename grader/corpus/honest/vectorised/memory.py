"""Handout §1.3: parameters, gradients, optimizer state and activations in bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real

import torch
from torch import nn

from .precision import _SIZES, _dtype


@dataclass(frozen=True)
class MemoryBreakdown:
    """Training memory in bytes, by kind."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


_STATE = {"sgd": 0, "sgd_momentum": 1, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}


def _count(n, name):
    """Validate a non-negative int."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def count_parameters(model: nn.Module) -> int:
    """Unique scalar parameters of a module."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters())


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Per-parameter state floats of an optimizer."""
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    n = _count(num_params, "num_params")
    if optimizer_name not in _STATE:
        raise ValueError(f"optimizer_name {optimizer_name!r} not one of {sorted(_STATE)}")
    return _STATE[optimizer_name] * n


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes of parameters, gradients, optimizer state and activations."""
    n, a = _count(num_params, "num_params"), _count(num_activations, "num_activations")
    pb, ab = _dtype(param_dtype, _SIZES, "param_dtype"), _dtype(activation_dtype, _SIZES, "activation_dtype")
    parts = (n * pb, n * pb, optimizer_state_floats(optimizer_name, n) * pb, a * ab)
    return MemoryBreakdown(*parts, sum(parts))


def _real(x, name):
    """Exact value of a finite non-negative real."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    if not isinstance(x, int) and not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return Fraction(x) if isinstance(x, (int, float, Fraction)) else Fraction(float(x))


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """Largest parameter count that fits, from the exact quotient."""
    m, p = _real(memory_bytes, "memory_bytes"), _real(bytes_per_parameter, "bytes_per_parameter")
    if p == 0:
        raise ValueError("bytes_per_parameter must be > 0")
    return math.floor(m / p)

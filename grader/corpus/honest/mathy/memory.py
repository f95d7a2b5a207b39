"""§1.3  Training memory, per parameter and in total.

    M = N*p + N*p + k*N*p + A*a
      (weights, gradients, k optimizer floats, activations)

with N parameters of p bytes, A saved activations of a bytes, and k the
optimizer's state floats per parameter.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from .precision import bytes_per_element

# optimizer -> k, its state floats per parameter
K: dict[str, int] = {"sgd": 0, "sgd_momentum": 1, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of each term of M; total = their sum."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


def natural(n: object, name: str) -> int:
    """n in N, or TypeError / ValueError naming it."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return int(n)


def nonnegative_real(x: object, name: str) -> Fraction:
    """x in [0, inf) as its exact rational value."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    if isinstance(x, numbers.Integral):
        q = Fraction(int(x))
    elif math.isfinite(float(x)):
        q = Fraction(float(x))
    else:
        raise ValueError(f"{name} must be finite, got {x}")
    if q < 0:
        raise ValueError(f"{name} must be >= 0, got {x}")
    return q


def bytes_of(dtype: object, name: str) -> int:
    """bytes_per_element, its errors naming the argument."""
    try:
        return bytes_per_element(dtype)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


def k_of(optimizer_name: object) -> int:
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    if optimizer_name not in K:
        raise ValueError(f"optimizer_name={optimizer_name!r} is not one of {sorted(K)}")
    return K[optimizer_name]


def count_parameters(model: nn.Module) -> int:
    """N = sum over distinct parameters of their numel."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return sum(int(w.numel()) for w in model.parameters())


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """k * N"""
    k = k_of(optimizer_name)
    return k * natural(num_params, "num_params")


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """(N p, N p, k N p, A a) and their sum."""
    N, A = natural(num_params, "num_params"), natural(num_activations, "num_activations")
    k = k_of(optimizer_name)
    p, a = bytes_of(param_dtype, "param_dtype"), bytes_of(activation_dtype, "activation_dtype")
    terms = (N * p, N * p, k * N * p, A * a)
    return MemoryBreakdown(*terms, total=sum(terms))


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """n* = max { n in N : n * c <= M } = floor(M / c), in exact rationals."""
    M = nonnegative_real(memory_bytes, "memory_bytes")
    c = nonnegative_real(bytes_per_parameter, "bytes_per_parameter")
    if c == 0:
        raise ValueError("bytes_per_parameter must be > 0")
    return math.floor(M / c)

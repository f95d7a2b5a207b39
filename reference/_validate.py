"""Argument checks shared by the reference modules: clear errors naming the argument."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch


def require_int(name: str, value: Any, *, minimum: int | None = 0) -> int:
    """``value`` as an int, rejecting bools, floats and anything below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def require_number(name: str, value: Any, *, positive: bool = False, finite: bool = True) -> float:
    """``value`` as a float (ints accepted, bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if finite and not abs(v) < float("inf"):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    return v


def require_shape(name: str, shape: Any) -> tuple[int, ...]:
    """A shape: a sequence of non-negative ints."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {type(shape).__name__}")
    return tuple(require_int(f"{name}[{i}]", s) for i, s in enumerate(shape))


def require_dtype(name: str, dtype: Any) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    return dtype

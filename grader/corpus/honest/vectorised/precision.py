"""Handout §1.1: bytes per element and floating-point formats."""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """Bit layout and derived limits of a binary float format."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


_SIZES = {d: d.itemsize for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}
_LAYOUT = {  # (bits, e, m, finite-only)
    torch.float64: (64, 11, 52, False), torch.float32: (32, 8, 23, False), torch.float16: (16, 5, 10, False),
    torch.bfloat16: (16, 8, 7, False), torch.float8_e4m3fn: (8, 4, 3, True), torch.float8_e5m2: (8, 5, 2, False)}


def _dtype(dtype, table, name="dtype"):
    """Validate a dtype against a table."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in table:
        raise ValueError(f"{name} {dtype} is not supported")
    return table[dtype]


def bytes_per_element(dtype: torch.dtype) -> int:
    """Element size in bytes."""
    return _dtype(dtype, _SIZES)


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    shape = tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, int) for d in shape):
        raise TypeError(f"shape must hold ints, got {shape!r}")
    if any(d < 0 for d in shape):
        raise ValueError(f"shape has a negative dimension: {shape!r}")
    return math.prod(shape) * bytes_per_element(dtype)


def _limits(dtype):
    """Exact (max, smallest normal, smallest subnormal, max ulp) of a float dtype."""
    _, e, m, fn = _dtype(dtype, _LAYOUT)
    b = 2 ** (e - 1) - 1
    top = 2**e - 1 - b if fn else 2**e - 2 - b
    mx = (2 - Fraction(2) ** (1 - m if fn else -m)) * Fraction(2) ** top
    return mx, Fraction(2) ** (1 - b), Fraction(2) ** (1 - b - m), Fraction(2) ** (top - m)


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Limits of a float format derived from its bit layout."""
    bits, e, m, _ = _dtype(dtype, _LAYOUT)
    mx, tiny, _, _ = _limits(dtype)
    return FloatFormat(bits, e, m, float(mx), float(tiny), math.ldexp(1.0, -m))


def _exact(value):
    """The exact rational a finite real holds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if not isinstance(value, int) and not math.isfinite(value):
        raise ValueError(f"value must be finite, got {value!r}")
    return abs(Fraction(value) if isinstance(value, (int, float, Fraction)) else Fraction(float(value)))


def underflows(value: float, dtype: torch.dtype) -> bool:
    """Nonzero value that rounds to zero in dtype."""
    v, (_, _, sub, _) = _exact(value), _limits(dtype)
    return bool(0 < v <= sub / 2)


def overflows(value: float, dtype: torch.dtype) -> bool:
    """Value that rounds past dtype's largest finite number."""
    v, (mx, _, _, ulp) = _exact(value), _limits(dtype)
    lim = mx + ulp / 2
    return bool(v > lim if _LAYOUT[dtype][3] else v >= lim)

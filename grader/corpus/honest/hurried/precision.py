"""Handout §1.1: bytes per element and float formats."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# dtype -> (bits, exponent bits, mantissa bits, ieee-style?)
_FLOATS = {
    torch.float64: (64, 11, 52, True),
    torch.float32: (32, 8, 23, True),
    torch.float16: (16, 5, 10, True),
    torch.bfloat16: (16, 8, 7, True),
    torch.float8_e4m3fn: (8, 4, 3, False),
    torch.float8_e5m2: (8, 5, 2, True),
}

_SIZES = {
    torch.float64: 8, torch.float32: 4, torch.float16: 2, torch.bfloat16: 2,
    torch.float8_e4m3fn: 1, torch.float8_e5m2: 1,
    torch.int64: 8, torch.int32: 4, torch.int16: 2, torch.int8: 1,
    torch.uint8: 1, torch.bool: 1,
}


def bytes_per_element(dtype: torch.dtype) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _SIZES:
        raise ValueError(f"dtype {dtype} is not supported")
    return _SIZES[dtype]


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape must be a tuple of ints, got {type(shape).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    n = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"shape entries must be ints, got {d!r}")
        if d < 0:
            raise ValueError(f"shape has a negative dimension: {d}")
        n *= d
    if dtype not in _SIZES:
        raise ValueError(f"dtype {dtype} is not supported")
    return n * _SIZES[dtype]


def float_format(dtype: torch.dtype) -> FloatFormat:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _FLOATS:
        raise ValueError(f"dtype {dtype} is not a float format of the handout")
    bits, e, m, ieee = _FLOATS[dtype]
    b = 2 ** (e - 1) - 1
    if ieee:
        top = 2**e - 2 - b
        mx = math.ldexp(2.0 - 2.0**-m, top)
    else:
        # e4m3fn: all-ones exponent is normal, only mantissa all-ones there is NaN
        top = 2**e - 1 - b
        mx = math.ldexp(2.0 - 2.0 ** (1 - m), top)
    return FloatFormat(bits, e, m, mx, math.ldexp(1.0, 1 - b), math.ldexp(1.0, -m))


def underflows(value: float, dtype: torch.dtype) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _FLOATS:
        raise ValueError(f"dtype {dtype} is not a float format of the handout")
    if not isinstance(value, numbers.Rational):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"value must be finite, got {value}")
    x = abs(Fraction(value))
    if x == 0:
        return False
    _, e, m, _ = _FLOATS[dtype]
    b = 2 ** (e - 1) - 1
    # half of the smallest subnormal 2^(1-b-m); the tie goes to 0
    return x <= Fraction(2) ** (-b - m)


def overflows(value: float, dtype: torch.dtype) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _FLOATS:
        raise ValueError(f"dtype {dtype} is not a float format of the handout")
    if not isinstance(value, numbers.Rational):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"value must be finite, got {value}")
    x = abs(Fraction(value))
    _, e, m, ieee = _FLOATS[dtype]
    b = 2 ** (e - 1) - 1
    if ieee:
        top = 2**e - 2 - b
        mx = (2 - Fraction(2) ** -m) * Fraction(2) ** top
        return x >= mx + Fraction(2) ** (top - m) / 2
    top = 2**e - 1 - b
    mx = (2 - Fraction(2) ** (1 - m)) * Fraction(2) ** top
    return x > mx + Fraction(2) ** (top - m) / 2

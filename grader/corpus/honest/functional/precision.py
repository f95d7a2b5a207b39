"""Byte counts and binary float formats, derived from bit layouts."""

from __future__ import annotations

import math
import numbers
import operator
from fractions import Fraction
from functools import reduce
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """Layout and limits of a binary float format."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# dtype -> storage width in bytes
_WIDTHS = {
    torch.float64: 8, torch.float32: 4, torch.float16: 2, torch.bfloat16: 2,
    torch.float8_e4m3fn: 1, torch.float8_e5m2: 1,
    torch.int64: 8, torch.int32: 4, torch.int16: 2, torch.int8: 1,
    torch.uint8: 1, torch.bool: 1,
}

# dtype -> (total bits, exponent bits, mantissa bits, ieee-style inf/nan encoding)
_LAYOUTS = {
    torch.float64: (64, 11, 52, True),
    torch.float32: (32, 8, 23, True),
    torch.float16: (16, 5, 10, True),
    torch.bfloat16: (16, 8, 7, True),
    torch.float8_e4m3fn: (8, 4, 3, False),
    torch.float8_e5m2: (8, 5, 2, True),
}


def _need_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")
    return dtype


def _need_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def _layout(dtype: object) -> tuple[int, int, int, bool]:
    found = _LAYOUTS.get(_need_dtype(dtype))
    if found is None:
        raise ValueError(f"dtype {dtype} is not one of the float formats covered")
    return found


def _bias(exponent_bits: int) -> int:
    return 2 ** (exponent_bits - 1) - 1


def _top_exponent(dtype: torch.dtype) -> int:
    _, e, _, ieee = _layout(dtype)
    # IEEE reserves the all-ones exponent; e4m3fn keeps it for normals
    return 2**e - 2 - _bias(e) if ieee else 2**e - 1 - _bias(e)


def _exact_max(dtype: torch.dtype) -> Fraction:
    _, _, m, ieee = _layout(dtype)
    # e4m3fn: the all-ones mantissa of the top exponent is NaN, so drop one more ulp
    top_mant = 2 - Fraction(1, 2**m) if ieee else 2 - Fraction(2, 2**m)
    return top_mant * Fraction(2) ** _top_exponent(dtype)


def _exact_value(value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"value must be finite, got {value!r}")
    return Fraction(as_float)


def bytes_per_element(dtype: torch.dtype) -> int:
    """Storage bytes of one element of dtype."""
    width = _WIDTHS.get(_need_dtype(dtype))
    if width is None:
        raise ValueError(f"dtype {dtype} is not covered")
    return width


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor with this shape and dtype."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    dims = tuple(map(lambda d: _need_int(d, "shape"), shape))
    if any(map(lambda d: d < 0, dims)):
        raise ValueError(f"shape has a negative dimension: {dims}")
    width = bytes_per_element(dtype)
    return reduce(operator.mul, dims, 1) * width


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Limits of a float dtype computed from its bit layout."""
    bits, e, m, _ = _layout(dtype)
    return FloatFormat(
        bits=bits,
        exponent_bits=e,
        mantissa_bits=m,
        max=float(_exact_max(dtype)),
        smallest_normal=math.ldexp(1.0, 1 - _bias(e)),
        eps=math.ldexp(1.0, -m),
    )


def underflows(value: float, dtype: torch.dtype) -> bool:
    """True when a nonzero value rounds to zero in dtype."""
    exact = abs(_exact_value(value))
    _, e, m, _ = _layout(dtype)
    # half the smallest subnormal; the tie rounds to the even neighbour, zero
    threshold = Fraction(2) ** (-_bias(e) - m)
    return bool(exact != 0 and exact <= threshold)


def overflows(value: float, dtype: torch.dtype) -> bool:
    """True when value rounds past dtype's largest finite number."""
    exact = abs(_exact_value(value))
    _, e, m, ieee = _layout(dtype)
    top = _exact_max(dtype)
    half_ulp = Fraction(2) ** (_top_exponent(dtype) - m - 1)
    # IEEE ties go to inf; e4m3fn's tie goes back to its even max
    beyond = operator.ge if ieee else operator.gt
    return bool(beyond(exact, top + half_ulp))

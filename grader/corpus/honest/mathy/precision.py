"""§1.1  Bytes per element, and the float formats F(e, m) derived from their bit layout.

Notation: a format has 1 sign bit, e exponent bits and m mantissa bits, with
bias b = 2^(e-1) - 1.  For an IEEE format

    max      = (2 - 2^-m) * 2^(2^e - 2 - b)
    x_min    = 2^(1 - b)              (smallest normal)
    x_sub    = 2^(1 - b - m)          (smallest subnormal)
    eps      = 2^-m

e4m3fn ("finite") spends the all-ones exponent on normals too, so its top
exponent is 2^e - 1 - b and its largest mantissa is 2 - 2^(1-m).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """F = (bits, e, m, max, x_min, eps) of a binary float format."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# dtype -> bits per element
BITS: dict[torch.dtype, int] = {
    torch.float64: 64, torch.float32: 32, torch.float16: 16, torch.bfloat16: 16,
    torch.float8_e4m3fn: 8, torch.float8_e5m2: 8,
    torch.int64: 64, torch.int32: 32, torch.int16: 16, torch.int8: 8,
    torch.uint8: 8, torch.bool: 8,
}

# dtype -> (e, m)
EM: dict[torch.dtype, tuple[int, int]] = {
    torch.float64: (11, 52), torch.float32: (8, 23), torch.float16: (5, 10),
    torch.bfloat16: (8, 7), torch.float8_e4m3fn: (4, 3), torch.float8_e5m2: (5, 2),
}

FINITE = {torch.float8_e4m3fn}  # formats without infinities


def is_int(n: object) -> bool:
    """n in Z, a bool excluded."""
    return isinstance(n, numbers.Integral) and not isinstance(n, bool)


def is_real(x: object) -> bool:
    """x in R, a bool excluded."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def exact(x: numbers.Real) -> Fraction:
    """The rational number a finite real x holds."""
    return Fraction(int(x)) if is_int(x) else Fraction(float(x))


def check_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")
    return dtype


def check_float_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    if check_dtype(dtype, name) not in EM:
        raise ValueError(f"{name}={dtype} is not a float format of the handout's table")
    return dtype


def check_finite_value(value: object) -> Fraction:
    if not is_real(value):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if not is_int(value) and not math.isfinite(float(value)):
        raise ValueError(f"value must be finite, got {value}")
    return exact(value)


def bias(e: int) -> int:
    """b = 2^(e-1) - 1"""
    return 2 ** (e - 1) - 1


def bytes_per_element(dtype: torch.dtype) -> int:
    """bytes = bits / 8"""
    if check_dtype(dtype) not in BITS:
        raise ValueError(f"dtype={dtype} is not covered")
    return BITS[dtype] // 8


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """bytes = (prod_i shape_i) * bytes_per_element(dtype)"""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list, torch.Size)):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    if not all(is_int(n) for n in shape):
        raise TypeError(f"shape must hold ints, got {shape!r}")
    if any(n < 0 for n in shape):
        raise ValueError(f"shape has a negative dimension: {shape!r}")
    return math.prod(int(n) for n in shape) * bytes_per_element(dtype)


def top(e: int, m: int, finite: bool) -> Fraction:
    """Largest finite value.

    IEEE:    (2 - 2^-m)     * 2^(2^e - 2 - b)
    finite:  (2 - 2^(1-m))  * 2^(2^e - 1 - b)   (only S.1111.111 is NaN)
    """
    b = bias(e)
    return (2 - Fraction(2) ** (1 - m)) * Fraction(2) ** (2**e - 1 - b) if finite \
        else (2 - Fraction(2) ** -m) * Fraction(2) ** (2**e - 2 - b)


def float_format(dtype: torch.dtype) -> FloatFormat:
    """(bits, e, m, max, 2^(1-b), 2^-m)"""
    e, m = EM[check_float_dtype(dtype)]
    return FloatFormat(
        bits=1 + e + m,
        exponent_bits=e,
        mantissa_bits=m,
        max=float(top(e, m, dtype in FINITE)),
        smallest_normal=math.ldexp(1.0, 1 - bias(e)),
        eps=math.ldexp(1.0, -m),
    )


def underflows(value: float, dtype: torch.dtype) -> bool:
    """x != 0 and |x| <= x_sub / 2 = 2^(-b-m)   (the tie rounds to the even 0)."""
    x = check_finite_value(value)
    e, m = EM[check_float_dtype(dtype)]
    return x != 0 and abs(x) <= Fraction(2) ** (-bias(e) - m)


def overflows(value: float, dtype: torch.dtype) -> bool:
    """IEEE:   |x| >= max + ulp/2   (the tie goes to the even neighbour, inf);
    finite: |x| >  max + ulp/2   (the tie rounds down to max = 448),
    with ulp = 2^(E - m) the spacing at max, E its exponent."""
    x = check_finite_value(value)
    e, m = EM[check_float_dtype(dtype)]
    finite = dtype in FINITE
    E = 2**e - (1 if finite else 2) - bias(e)
    t = top(e, m, finite) + Fraction(2) ** (E - m - 1)
    return abs(x) > t if finite else abs(x) >= t

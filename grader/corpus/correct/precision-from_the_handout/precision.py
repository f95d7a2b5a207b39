"""Written from the handout alone: formats from Fraction and math.ldexp formulas, underflow and overflow as exact rational comparisons against the rounding thresholds.

Handout §1.1: bytes per element and floating-point formats.

Fill in every function below. Derive the float formats from their bit layout
(sign, exponent, mantissa): ``torch.finfo`` is what the tests compare you with,
so using it here teaches you nothing and is not allowed.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """A binary floating-point format: 1 sign bit + ``exponent_bits`` + ``mantissa_bits``.

    ``max`` is the largest finite value, ``smallest_normal`` the smallest
    positive normal value, ``eps`` the gap between 1.0 and the next value.
    """

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# bits per element of every dtype we know about
_BITS = [
    (torch.float64, 64),
    (torch.float32, 32),
    (torch.float16, 16),
    (torch.bfloat16, 16),
    (torch.float8_e4m3fn, 8),
    (torch.float8_e5m2, 8),
    (torch.int64, 64),
    (torch.int32, 32),
    (torch.int16, 16),
    (torch.int8, 8),
    (torch.uint8, 8),
    (torch.bool, 8),
]

# (exponent bits, mantissa bits, has infinities)
_LAYOUT = [
    (torch.float64, 11, 52, True),
    (torch.float32, 8, 23, True),
    (torch.float16, 5, 10, True),
    (torch.bfloat16, 8, 7, True),
    (torch.float8_e4m3fn, 4, 3, False),
    (torch.float8_e5m2, 5, 2, True),
]


def _need_dtype(dtype, name="dtype"):
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")


def _layout(dtype):
    _need_dtype(dtype)
    for d, e, m, ieee in _LAYOUT:
        if d == dtype:
            return e, m, ieee
    raise ValueError(f"dtype {dtype} is not one of the float formats of the handout")


def bytes_per_element(dtype: torch.dtype) -> int:
    """Bytes one element of ``dtype`` occupies in memory.

    Covers float64/32/16, bfloat16, float8_e4m3fn, float8_e5m2, int64/32/16/8,
    uint8 and bool.

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.
        ValueError: ``dtype`` is not one of the above.
    """
    _need_dtype(dtype)
    for d, nbits in _BITS:
        if d == dtype:
            return nbits // 8
    raise ValueError(f"dtype {dtype} is not supported")


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes held by a contiguous tensor of ``shape`` and ``dtype`` (4x8 fp32: 128).

    Raises:
        TypeError: ``shape`` is not a sequence of ints, or ``dtype`` not a dtype.
        ValueError: a dimension is negative, or the dtype is not covered.
    """
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__") or not hasattr(shape, "__getitem__"):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    count = 1
    for i in range(len(shape)):
        d = shape[i]
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise TypeError(f"shape[{i}] must be an int, got {type(d).__name__}")
        if d < 0:
            raise ValueError(f"shape[{i}] is negative ({d})")
        count = count * int(d)
    per = bytes_per_element(dtype)
    return count * per


def float_format(dtype: torch.dtype) -> FloatFormat:
    """The format of the floating ``dtype``, derived from its bit layout, for
    every float format of the handout's table: float64, float32, float16,
    bfloat16, float8_e4m3fn and float8_e5m2.

    float8_e4m3fn has no infinities: its all-ones exponent holds normal numbers
    and only the all-ones pattern is NaN, so its max is 448 (e5m2's is 57344).

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.
        ValueError: ``dtype`` is not a floating-point format of the handout.
    """
    e, m, ieee = _layout(dtype)
    bias = (1 << (e - 1)) - 1
    if ieee:
        top_exp = (1 << e) - 2 - bias  # all-ones exponent is reserved
        top_mant = Fraction(2) - Fraction(1, 1 << m)  # 1.111...1
    else:
        top_exp = (1 << e) - 1 - bias  # all-ones exponent is usable
        top_mant = Fraction(2) - Fraction(2, 1 << m)  # 1.11..10 (1.11..11 is NaN)
    biggest = float(top_mant * Fraction(2) ** top_exp)
    tiny = math.ldexp(1.0, 1 - bias)
    eps = math.ldexp(1.0, -m)
    return FloatFormat(
        bits=1 + e + m,
        exponent_bits=e,
        mantissa_bits=m,
        max=biggest,
        smallest_normal=tiny,
        eps=eps,
    )


def _exact(value) -> Fraction:
    """Exact rational value of a finite real number, with the handout's errors."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, numbers.Rational):
        return Fraction(value.numerator, value.denominator)
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"value must be finite, got {value!r}")
    return Fraction(f)


def underflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite, non-zero ``value`` becomes 0 when cast to ``dtype``
    (round to nearest, ties to even). 1e-8 underflows in float16, not in bfloat16.
    Values below the smallest normal become subnormals first: only those that
    round below the smallest subnormal become 0.

    Raises:
        TypeError: ``value`` is not a real number, or ``dtype`` not a dtype.
        ValueError: ``value`` is not finite, or ``dtype`` is not a float format.
    """
    x = _exact(value)
    e, m, _ = _layout(dtype)
    if x == 0:
        return False  # nothing to lose: zero is represented exactly
    bias = (1 << (e - 1)) - 1
    smallest_sub = Fraction(2) ** (1 - bias - m)
    # the tie at half the smallest subnormal goes to the even neighbour, 0
    return abs(x) * 2 <= smallest_sub


def overflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite ``value`` rounds beyond ``dtype``'s largest finite value
    when cast (to inf for IEEE formats; e4m3fn, which has no inf, cannot
    represent it). 70000.0 overflows in float16, not in bfloat16.

    Raises:
        TypeError: ``value`` is not a real number, or ``dtype`` not a dtype.
        ValueError: ``value`` is not finite, or ``dtype`` is not a float format.
    """
    x = abs(_exact(value))
    e, m, ieee = _layout(dtype)
    bias = (1 << (e - 1)) - 1
    if ieee:
        top_exp = (1 << e) - 2 - bias
        biggest = (Fraction(2) - Fraction(1, 1 << m)) * Fraction(2) ** top_exp
    else:
        top_exp = (1 << e) - 1 - bias
        biggest = (Fraction(2) - Fraction(2, 1 << m)) * Fraction(2) ** top_exp
    half_ulp = Fraction(2) ** (top_exp - m) / 2
    limit = biggest + half_ulp
    if ieee:
        # max has an odd mantissa (all ones): the tie rounds up to inf
        return x >= limit
    # e4m3fn: max's mantissa 110 is even, so the tie rounds down to max
    return x > limit

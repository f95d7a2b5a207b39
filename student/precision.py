"""Handout §1.1: bytes per element and floating-point formats.

Fill in every function below. Derive the float formats from their bit layout
(sign, exponent, mantissa): ``torch.finfo`` is what the tests compare you with,
so using it here teaches you nothing and is not allowed.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

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


def bytes_per_element(dtype: torch.dtype) -> int:
    """Bytes one element of ``dtype`` occupies in memory.

    Covers float64/32/16, bfloat16, float8_e4m3fn, float8_e5m2, int64/32/16/8,
    uint8 and bool.

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.
        ValueError: ``dtype`` is not one of the above.
    """
    raise NotImplementedError("bytes_per_element: see handout §1.1")


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes held by a contiguous tensor of ``shape`` and ``dtype`` (4x8 fp32: 128).

    Raises:
        TypeError: ``shape`` is not a sequence of ints, or ``dtype`` not a dtype.
        ValueError: a dimension is negative, or the dtype is not covered.
    """
    raise NotImplementedError("tensor_bytes: see handout §1.1")


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
    raise NotImplementedError("float_format: see handout §1.1")


def underflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite ``value`` is not zero and becomes 0 when cast to
    ``dtype`` (round to nearest, ties to even). 1e-8 underflows in float16, not
    in bfloat16; ``0.0`` (and ``-0.0``) does not underflow: it is zero already.
    Values below the smallest normal become subnormals first: only those that
    round below the smallest subnormal become 0. ``value`` (a Python float is a
    float64) is taken as the exact number it holds and rounded once, straight
    to ``dtype``, for every format of the handout's table, float64 included
    (torch's own casts from float64 may round twice, through float32: see the
    handout).

    Raises:
        TypeError: ``value`` is not a real number, or ``dtype`` not a dtype.
        ValueError: ``value`` is not finite, or ``dtype`` is not a float format.
    """
    raise NotImplementedError("underflows: see handout §1.1")


def overflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite ``value`` rounds beyond ``dtype``'s largest finite value
    when cast (to inf for IEEE formats; e4m3fn, which has no inf, cannot
    represent it). 70000.0 overflows in float16, not in bfloat16. ``value`` (a
    Python float is a float64) is taken as the exact number it holds and rounded
    once, straight to ``dtype``, for every format of the handout's table,
    float64 included.

    Raises:
        TypeError: ``value`` is not a real number, or ``dtype`` not a dtype.
        ValueError: ``value`` is not finite, or ``dtype`` is not a float format.
    """
    raise NotImplementedError("overflows: see handout §1.1")

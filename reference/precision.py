"""Handout §1.1: bytes per element and floating-point formats, from the bit layout."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ._validate import require_dtype, require_number, require_shape

__all__ = ["FloatFormat", "bytes_per_element", "float_format", "overflows", "tensor_bytes", "underflows"]


class FloatFormat(NamedTuple):
    """A binary floating-point format: sign bit + ``exponent_bits`` + ``mantissa_bits``."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# (total bits, exponent bits, mantissa bits, has infinities) for each float
# format; integer and bool types only have a width.
_FLOAT_LAYOUT: dict[torch.dtype, tuple[int, int, int, bool]] = {
    torch.float64: (64, 11, 52, True),
    torch.float32: (32, 8, 23, True),
    torch.float16: (16, 5, 10, True),
    torch.bfloat16: (16, 8, 7, True),
    # OCP FP8: e4m3fn ("fn": finite, one NaN pattern) gives its top exponent to
    # normal numbers; only S.1111.111 is NaN, so the largest value is 1.75 * 2^8.
    torch.float8_e4m3fn: (8, 4, 3, False),
    torch.float8_e5m2: (8, 5, 2, True),
}
_INT_BITS: dict[torch.dtype, int] = {
    torch.int64: 64, torch.int32: 32, torch.int16: 16, torch.int8: 8, torch.uint8: 8,
    # bool is stored in a whole byte
    torch.bool: 8,
}


def bytes_per_element(dtype: torch.dtype) -> int:
    """Bytes one element of ``dtype`` occupies in memory."""
    dtype = require_dtype("dtype", dtype)
    if dtype in _FLOAT_LAYOUT:
        return _FLOAT_LAYOUT[dtype][0] // 8
    if dtype in _INT_BITS:
        return _INT_BITS[dtype] // 8
    raise ValueError(f"dtype {dtype} is not covered by this handout")


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes held by a contiguous tensor of ``shape`` and ``dtype``."""
    return math.prod(require_shape("shape", shape)) * bytes_per_element(dtype)


def _layout(dtype: torch.dtype) -> tuple[int, int, int, bool]:
    dtype = require_dtype("dtype", dtype)
    if dtype not in _FLOAT_LAYOUT:
        raise ValueError(f"dtype {dtype} is not a floating-point format")
    return _FLOAT_LAYOUT[dtype]


def float_format(dtype: torch.dtype) -> FloatFormat:
    """The format of a floating ``dtype`` (float64, float32, float16, bfloat16,
    float8_e4m3fn, float8_e5m2), derived from its bit layout."""
    bits, e, m, has_inf = _layout(dtype)
    bias = 2 ** (e - 1) - 1
    if has_inf:  # IEEE: the all-ones exponent is reserved for inf/NaN
        max_value = (2 - 2.0**-m) * 2.0 ** (2**e - 2 - bias)
    else:  # all-ones exponent is normal; all-ones mantissa there is NaN
        max_value = (2 - 2.0 ** (1 - m)) * 2.0 ** (2**e - 1 - bias)
    return FloatFormat(bits, e, m, max_value, 2.0 ** (1 - bias), 2.0**-m)


def underflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite ``value`` is not zero and becomes zero when cast to
    ``dtype`` (``0.0`` and ``-0.0`` do not underflow: they are zero already).

    Round-to-nearest-even sends everything up to half the smallest subnormal
    (the tie included, since zero is even) to zero. ``value`` (a float64) is
    taken exactly and rounded once, straight to ``dtype`` (float64 included).
    """
    v = abs(require_number("value", value))
    _, e, m, _ = _layout(dtype)
    smallest_subnormal = 2.0 ** (2 - 2 ** (e - 1) - m)
    return 0 < v <= smallest_subnormal / 2


def overflows(value: float, dtype: torch.dtype) -> bool:
    """Whether the finite ``value`` rounds to something beyond ``dtype``'s range
    (inf for IEEE formats; NaN or saturation for e4m3fn, which has no inf).
    ``value`` (a float64) is taken exactly and rounded once, straight to
    ``dtype`` (float64 included)."""
    v = abs(require_number("value", value))
    fmt = float_format(dtype)
    # frexp gives max's binary exponent exactly (log2 would round up for float64).
    half_ulp = math.ldexp(0.5, math.frexp(fmt.max)[1] - 1 - fmt.mantissa_bits)
    has_inf = _FLOAT_LAYOUT[dtype][3]
    # At the tie, round-to-nearest-even picks the even neighbour: for IEEE
    # formats max's mantissa is all ones (odd), so the tie goes up to inf; for
    # e4m3fn max's mantissa ends in 0 (even), so the tie stays at max.
    return v >= fmt.max + half_ulp if has_inf else v > fmt.max + half_ulp

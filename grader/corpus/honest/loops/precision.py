"""Handout §1.1: how many bytes an element takes, and the float formats.

I work out every float format from its bit layout instead of asking torch.finfo.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """Description of a binary float format (sign bit + exponent bits + mantissa bits)."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# Size in bits of every dtype that I support.
BITS_OF_EACH_DTYPE = {
    torch.float64: 64,
    torch.float32: 32,
    torch.float16: 16,
    torch.bfloat16: 16,
    torch.float8_e4m3fn: 8,
    torch.float8_e5m2: 8,
    torch.int64: 64,
    torch.int32: 32,
    torch.int16: 16,
    torch.int8: 8,
    torch.uint8: 8,
    torch.bool: 8,
}

# Bit layout of every float format in the handout's table:
# (total bits, exponent bits, mantissa bits, has infinities like IEEE?)
FLOAT_LAYOUTS = {
    torch.float64: (64, 11, 52, True),
    torch.float32: (32, 8, 23, True),
    torch.float16: (16, 5, 10, True),
    torch.bfloat16: (16, 8, 7, True),
    torch.float8_e4m3fn: (8, 4, 3, False),
    torch.float8_e5m2: (8, 5, 2, True),
}


def _check_is_dtype(dtype, argument_name: str = "dtype") -> None:
    """Raise TypeError if the argument is not a torch.dtype."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{argument_name} must be a torch.dtype, got {type(dtype).__name__}")


def bytes_per_element(dtype: torch.dtype) -> int:
    """Number of bytes that one element of this dtype uses."""
    # Step 1: make sure we were given a dtype at all.
    _check_is_dtype(dtype)
    # Step 2: look the dtype up in my table of sizes.
    if dtype not in BITS_OF_EACH_DTYPE:
        raise ValueError(f"dtype {dtype} is not supported")
    number_of_bits = BITS_OF_EACH_DTYPE[dtype]
    # Step 3: eight bits make one byte.
    return number_of_bits // 8


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor with this shape and dtype."""
    # Step 1: the shape must be a list/tuple of ints.
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__") or not hasattr(shape, "__len__"):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    _check_is_dtype(dtype)
    # Step 2: multiply the sizes of all dimensions together, checking each one.
    number_of_elements = 1
    for dimension_size in shape:
        if isinstance(dimension_size, bool) or not isinstance(dimension_size, numbers.Integral):
            raise TypeError(f"shape must hold ints, got {dimension_size!r}")
        if dimension_size < 0:
            raise ValueError(f"shape has a negative dimension: {dimension_size}")
        number_of_elements = number_of_elements * int(dimension_size)
    # Step 3: elements times bytes per element.
    return number_of_elements * bytes_per_element(dtype)


def _layout_of_float_dtype(dtype) -> tuple[int, int, int, bool]:
    """Return the bit layout of a float dtype, or raise if it is not one of the table."""
    _check_is_dtype(dtype)
    if dtype not in FLOAT_LAYOUTS:
        raise ValueError(f"dtype {dtype} is not one of the float formats of the handout")
    return FLOAT_LAYOUTS[dtype]


def _exact_limits(dtype) -> dict:
    """Exact (Fraction) values of max, smallest normal, smallest subnormal and the ulp at max."""
    total_bits, exponent_bits, mantissa_bits, has_infinities = _layout_of_float_dtype(dtype)
    two = Fraction(2)
    # The exponent bias is 2^(e-1) - 1.
    bias = 2 ** (exponent_bits - 1) - 1
    # The largest biased exponent that holds normal numbers.
    if has_infinities:
        # All-ones exponent is reserved for inf and NaN.
        largest_biased_exponent = 2**exponent_bits - 2
        # Every mantissa bit can be one.
        largest_mantissa_value = 2 - two ** (-mantissa_bits)
    else:
        # e4m3fn: the all-ones exponent holds numbers, only all-ones mantissa there is NaN.
        largest_biased_exponent = 2**exponent_bits - 1
        largest_mantissa_value = 2 - two ** (1 - mantissa_bits)
    largest_real_exponent = largest_biased_exponent - bias
    max_value = largest_mantissa_value * two**largest_real_exponent
    # Distance between neighbours at the top of the range.
    ulp_at_max = two ** (largest_real_exponent - mantissa_bits)
    # Smallest normal is 2^(1 - bias), smallest subnormal 2^(1 - bias - m).
    smallest_normal = two ** (1 - bias)
    smallest_subnormal = two ** (1 - bias - mantissa_bits)
    return {
        "bits": total_bits,
        "exponent_bits": exponent_bits,
        "mantissa_bits": mantissa_bits,
        "has_infinities": has_infinities,
        "max": max_value,
        "ulp_at_max": ulp_at_max,
        "smallest_normal": smallest_normal,
        "smallest_subnormal": smallest_subnormal,
        "eps": two ** (-mantissa_bits),
    }


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Describe a float dtype (bits, max, smallest normal, eps) from its bit layout."""
    # Step 1: compute the exact limits.
    limits = _exact_limits(dtype)
    # Step 2: turn the exact fractions into Python floats (all are exact in float64).
    return FloatFormat(
        bits=limits["bits"],
        exponent_bits=limits["exponent_bits"],
        mantissa_bits=limits["mantissa_bits"],
        max=float(limits["max"]),
        smallest_normal=float(limits["smallest_normal"]),
        eps=float(limits["eps"]),
    )


def _exact_value_of(value) -> Fraction:
    """Turn a finite real number into the exact Fraction it holds (with type checks)."""
    # A bool is not a number for this assignment.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    # Integers are always finite and exact.
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    # Other reals: go through a Python float, then check it is finite.
    value_as_float = float(value)
    if not math.isfinite(value_as_float):
        raise ValueError(f"value must be finite, got {value!r}")
    return Fraction(value_as_float)


def underflows(value: float, dtype: torch.dtype) -> bool:
    """True when a non-zero value rounds to zero in this dtype."""
    # Step 1: read the exact value and the limits of the format.
    exact_value = _exact_value_of(value)
    limits = _exact_limits(dtype)
    # Step 2: zero is already zero, nothing is lost.
    if exact_value == 0:
        return False
    # Step 3: at or below half the smallest subnormal it rounds to 0 (the tie goes to even, 0).
    half_of_smallest_subnormal = limits["smallest_subnormal"] / 2
    return abs(exact_value) <= half_of_smallest_subnormal


def overflows(value: float, dtype: torch.dtype) -> bool:
    """True when the value rounds past the largest finite number of this dtype."""
    # Step 1: read the exact value and the limits of the format.
    exact_value = _exact_value_of(value)
    limits = _exact_limits(dtype)
    # Step 2: the halfway point between max and the next (missing) value.
    halfway_above_max = limits["max"] + limits["ulp_at_max"] / 2
    # Step 3: IEEE formats round the tie to inf (even), e4m3fn rounds the tie down to 448.
    if limits["has_infinities"]:
        return abs(exact_value) >= halfway_above_max
    return abs(exact_value) > halfway_above_max

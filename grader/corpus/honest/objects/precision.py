"""Handout §1.1: how many bytes a tensor takes, and what each float format can hold.

The float formats are described by a small layout object per dtype; every
derived quantity (largest value, smallest normal, epsilon, rounding
thresholds) is computed from the bit counts, exactly, with ``Fraction``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """Summary of a binary float format.

    Attributes:
        bits: Total width, sign bit included.
        exponent_bits: Width of the biased exponent field.
        mantissa_bits: Width of the stored fraction field.
        max: Largest finite value.
        smallest_normal: Smallest positive value with an implicit leading one.
        eps: Distance from 1.0 to the next representable value.
    """

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# Storage size in bytes of every dtype this module knows about.
_BYTE_WIDTH: dict[torch.dtype, int] = {
    torch.float64: 8,
    torch.float32: 4,
    torch.float16: 2,
    torch.bfloat16: 2,
    torch.float8_e4m3fn: 1,
    torch.float8_e5m2: 1,
    torch.int64: 8,
    torch.int32: 4,
    torch.int16: 2,
    torch.int8: 1,
    torch.uint8: 1,
    torch.bool: 1,
}


@dataclass(frozen=True)
class _Layout:
    """Bit layout of one float format, with exact derived thresholds.

    Attributes:
        exponent: Number of exponent bits.
        mantissa: Number of fraction bits.
        finite_only: True for OCP "fn" formats, whose all-ones exponent still
            encodes normal numbers (only the all-ones pattern is NaN).
    """

    exponent: int
    mantissa: int
    finite_only: bool = False

    @property
    def bits(self) -> int:
        """Total width including the sign bit."""
        return 1 + self.exponent + self.mantissa

    @property
    def bias(self) -> int:
        """Exponent bias, 2^(e-1) - 1."""
        return (1 << (self.exponent - 1)) - 1

    @property
    def top_exponent(self) -> int:
        """Unbiased exponent of the largest finite value."""
        all_ones = (1 << self.exponent) - 1
        usable = all_ones if self.finite_only else all_ones - 1
        return usable - self.bias

    def largest(self) -> Fraction:
        """Largest finite value as an exact fraction.

        Returns:
            For IEEE formats (2 - 2^-m) * 2^emax; for "fn" formats the top
            mantissa pattern is NaN, so one ulp less: (2 - 2^(1-m)) * 2^emax.
        """
        lost = 2 if self.finite_only else 1
        significand = 2 - Fraction(lost, 1 << self.mantissa)
        return significand * Fraction(2) ** self.top_exponent

    def ulp_at_top(self) -> Fraction:
        """Spacing of values in the binade that holds the largest value."""
        return Fraction(2) ** (self.top_exponent - self.mantissa)

    def overflow_threshold(self) -> Fraction:
        """Smallest magnitude that no longer rounds to a finite value.

        Returns:
            The midpoint above ``largest()``: in IEEE formats the tie itself
            rounds to infinity (the even neighbour), so the threshold is
            inclusive; in "fn" formats the tie rounds back to the largest
            value and the comparison is made strict by the caller.
        """
        return self.largest() + self.ulp_at_top() / 2

    def underflow_threshold(self) -> Fraction:
        """Half the smallest subnormal: at or below this, a value rounds to 0."""
        return Fraction(2) ** (-self.bias - self.mantissa)

    def describe(self) -> FloatFormat:
        """Package the layout as a public :class:`FloatFormat`."""
        return FloatFormat(
            bits=self.bits,
            exponent_bits=self.exponent,
            mantissa_bits=self.mantissa,
            max=float(self.largest()),
            smallest_normal=math.ldexp(1.0, 1 - self.bias),
            eps=math.ldexp(1.0, -self.mantissa),
        )


_LAYOUTS: dict[torch.dtype, _Layout] = {
    torch.float64: _Layout(11, 52),
    torch.float32: _Layout(8, 23),
    torch.float16: _Layout(5, 10),
    torch.bfloat16: _Layout(8, 7),
    torch.float8_e4m3fn: _Layout(4, 3, finite_only=True),
    torch.float8_e5m2: _Layout(5, 2),
}


def _require_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}")
    return dtype


def _layout_of(dtype: object) -> _Layout:
    dt = _require_dtype(dtype)
    try:
        return _LAYOUTS[dt]
    except KeyError:
        raise ValueError(f"dtype {dt} is not one of the supported float formats") from None


def _exact_value(value: object) -> Fraction:
    """Turn a finite real number into the exact fraction it stands for."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"value must be finite, got {value!r}")
    return Fraction(as_float)


def bytes_per_element(dtype: torch.dtype) -> int:
    """Look up the storage width of one element.

    Args:
        dtype: A torch dtype from the handout's list.

    Returns:
        The width in bytes, as an int.
    """
    dt = _require_dtype(dtype)
    if dt not in _BYTE_WIDTH:
        raise ValueError(f"dtype {dt} is not supported")
    return _BYTE_WIDTH[dt]


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Memory footprint of a dense tensor.

    Args:
        shape: Sizes of each dimension (non-negative ints).
        dtype: Element type.

    Returns:
        Element count times element width, in bytes.
    """
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError("shape must be a sequence of ints")
    sizes = list(shape)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"shape entries must be ints, got {size!r}")
        if size < 0:
            raise ValueError(f"shape entries must be non-negative, got {size}")
    width = bytes_per_element(dtype)
    return math.prod(sizes) * width


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Derive the limits of a float format from its bit counts.

    Args:
        dtype: One of the six float dtypes of the handout's table.

    Returns:
        A :class:`FloatFormat` with bit counts, max, smallest normal and eps.
    """
    return _layout_of(dtype).describe()


def underflows(value: float, dtype: torch.dtype) -> bool:
    """Decide whether a non-zero number is flushed to zero by a single cast.

    Args:
        value: A finite real number, taken at its exact value.
        dtype: Target float format.

    Returns:
        True when the value is non-zero but rounds (nearest, ties to even)
        to zero in ``dtype``.
    """
    layout = _layout_of(dtype)
    exact = _exact_value(value)
    if exact == 0:
        return False
    return abs(exact) <= layout.underflow_threshold()


def overflows(value: float, dtype: torch.dtype) -> bool:
    """Decide whether a single cast pushes a number past the largest finite value.

    Args:
        value: A finite real number, taken at its exact value.
        dtype: Target float format.

    Returns:
        True when rounding to ``dtype`` cannot give a finite value.
    """
    layout = _layout_of(dtype)
    magnitude = abs(_exact_value(value))
    limit = layout.overflow_threshold()
    if layout.finite_only:
        return magnitude > limit
    return magnitude >= limit

"""Handout §1.1: element sizes and binary float formats, derived from bit layouts."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import NamedTuple

import torch


class FloatFormat(NamedTuple):
    """Layout and limits of a binary float: 1 sign bit, exponent bits, mantissa bits."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float


# Storage size, in bytes, of one element of every dtype this module knows about.
_ELEMENT_SIZES: dict[torch.dtype, int] = {
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


class _Layout(NamedTuple):
    """Bit layout of a float dtype; ``finite_only`` marks the OCP 'fn' formats."""

    bits: int
    exponent_bits: int
    mantissa_bits: int
    finite_only: bool


_FLOAT_LAYOUTS: dict[torch.dtype, _Layout] = {
    torch.float64: _Layout(64, 11, 52, False),
    torch.float32: _Layout(32, 8, 23, False),
    torch.float16: _Layout(16, 5, 10, False),
    torch.bfloat16: _Layout(16, 8, 7, False),
    torch.float8_e4m3fn: _Layout(8, 4, 3, True),
    torch.float8_e5m2: _Layout(8, 5, 2, False),
}


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_dtype(name: str, value: object) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"argument '{name}' must be a torch.dtype, received {type(value).__name__}")
    return value


def _require_known_dtype(name: str, value: object) -> torch.dtype:
    dtype = _require_dtype(name, value)
    if dtype not in _ELEMENT_SIZES:
        raise ValueError(f"argument '{name}': dtype {dtype} is not supported here")
    return dtype


def _require_float_layout(name: str, value: object) -> _Layout:
    dtype = _require_dtype(name, value)
    layout = _FLOAT_LAYOUTS.get(dtype)
    if layout is None:
        raise ValueError(f"argument '{name}': {dtype} is not one of the handout's float formats")
    return layout


def _require_dimension(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"argument '{name}' must hold ints only, found {type(value).__name__}")
    if value < 0:
        raise ValueError(f"argument '{name}' must not hold a negative size, found {value}")
    return value


def _require_shape(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, torch.Size)):
        raise TypeError(f"argument '{name}' must be a tuple or list of ints, received {type(value).__name__}")
    return tuple(_require_dimension(name, dim) for dim in value)


def _require_exact_finite_real(name: str, value: object) -> Fraction:
    """Turn a real number into the exact rational it holds (rejecting bools and non-finite values)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"argument '{name}' must be a real number, received {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, Fraction):
        return value
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"argument '{name}' must be finite, received {as_float}")
    return Fraction(as_float)


# --------------------------------------------------------------------------- #
# private arithmetic on layouts (exact, as fractions)
# --------------------------------------------------------------------------- #
def _bias(layout: _Layout) -> int:
    return 2 ** (layout.exponent_bits - 1) - 1


def _largest_exponent(layout: _Layout) -> int:
    """Unbiased exponent of the largest finite value."""
    top_field = 2**layout.exponent_bits - 1
    if not layout.finite_only:
        top_field -= 1  # the all-ones field is reserved for inf/NaN
    return top_field - _bias(layout)


def _largest_significand(layout: _Layout) -> Fraction:
    """Significand (1.xxx) of the largest finite value."""
    if layout.finite_only:
        # all-ones mantissa together with the all-ones exponent is NaN
        return 2 - Fraction(2, 2**layout.mantissa_bits)
    return 2 - Fraction(1, 2**layout.mantissa_bits)


def _exact_max(layout: _Layout) -> Fraction:
    return _largest_significand(layout) * Fraction(2) ** _largest_exponent(layout)


def _exact_smallest_normal(layout: _Layout) -> Fraction:
    return Fraction(2) ** (1 - _bias(layout))


def _exact_smallest_subnormal(layout: _Layout) -> Fraction:
    return _exact_smallest_normal(layout) / 2**layout.mantissa_bits


def _exact_overflow_threshold(layout: _Layout) -> tuple[Fraction, bool]:
    """Return (threshold, inclusive): values beyond it (or at it, when inclusive) overflow."""
    half_ulp_at_max = Fraction(2) ** (_largest_exponent(layout) - layout.mantissa_bits) / 2
    threshold = _exact_max(layout) + half_ulp_at_max
    # IEEE: the tie goes to the even neighbour, which is infinity.
    # finite-only: the tie goes back to max (its mantissa is even).
    return threshold, not layout.finite_only


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def bytes_per_element(dtype: torch.dtype) -> int:
    """Size in bytes of a single element of ``dtype``."""
    checked = _require_known_dtype("dtype", dtype)
    return _ELEMENT_SIZES[checked]


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor with this shape and dtype."""
    dims = _require_shape("shape", shape)
    element_size = bytes_per_element(dtype)
    return math.prod(dims) * element_size


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Limits of a float dtype, computed from its sign/exponent/mantissa layout."""
    layout = _require_float_layout("dtype", dtype)
    return FloatFormat(
        bits=layout.bits,
        exponent_bits=layout.exponent_bits,
        mantissa_bits=layout.mantissa_bits,
        max=float(_exact_max(layout)),
        smallest_normal=float(_exact_smallest_normal(layout)),
        eps=float(Fraction(1, 2**layout.mantissa_bits)),
    )


def underflows(value: float, dtype: torch.dtype) -> bool:
    """True when a non-zero ``value`` rounds (once, to nearest even) to zero in ``dtype``."""
    exact = _require_exact_finite_real("value", value)
    layout = _require_float_layout("dtype", dtype)
    if exact == 0:
        return False
    return abs(exact) <= _exact_smallest_subnormal(layout) / 2


def overflows(value: float, dtype: torch.dtype) -> bool:
    """True when ``value`` rounds (once, to nearest even) past the largest finite ``dtype`` value."""
    exact = _require_exact_finite_real("value", value)
    layout = _require_float_layout("dtype", dtype)
    threshold, inclusive = _exact_overflow_threshold(layout)
    magnitude = abs(exact)
    if inclusive:
        return magnitude >= threshold
    return magnitude > threshold

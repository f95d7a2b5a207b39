"""Strides, storage positions, contiguity and shared storage."""

from __future__ import annotations

import itertools
import numbers
import operator
from collections.abc import Sequence

import torch
from jaxtyping import Shaped
from torch import Tensor


def _ints(values: object, name: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, torch.Size)):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Integral)]
    if bad:
        raise TypeError(f"{name} must hold ints only, got {bad[0]!r}")
    return tuple(map(int, values))


def _non_negative(values: tuple[int, ...], name: str) -> tuple[int, ...]:
    if any(map(lambda v: v < 0, values)):
        raise ValueError(f"{name} has a negative entry: {values}")
    return values


def _same_length(left: tuple[int, ...], right: tuple[int, ...], names: str) -> None:
    if len(left) != len(right):
        raise ValueError(f"{names} differ in length: {len(left)} vs {len(right)}")


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of a tensor of the given shape."""
    dims = _non_negative(_ints(shape, "shape"), "shape")
    # running products from the right, empty dims counted as size 1
    suffix = itertools.accumulate(reversed(tuple(map(lambda d: max(d, 1), dims))), operator.mul, initial=1)
    return tuple(reversed(tuple(suffix)[:-1]))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Storage position of an element given its index, strides and offset."""
    where = _non_negative(_ints(index, "index"), "index")
    steps = _non_negative(_ints(strides, "strides"), "strides")
    (offset,) = _non_negative(_ints((storage_offset,), "storage_offset"), "storage_offset")
    _same_length(where, steps, "index and strides")
    return offset + sum(map(operator.mul, where, steps))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether shape and strides form a gap-free row-major layout."""
    dims = _non_negative(_ints(shape, "shape"), "shape")
    steps = _non_negative(_ints(strides, "strides"), "strides")
    _same_length(dims, steps, "shape and strides")
    if 0 in dims:
        return True
    # size-1 dims never step, so only the others must match row-major strides
    kept = tuple(filter(lambda pair: pair[0] != 1, zip(dims, steps)))
    return tuple(map(operator.itemgetter(1), kept)) == contiguous_strides(tuple(map(operator.itemgetter(0), kept)))


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether two tensors view one underlying storage."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise TypeError("a and b must both be tensors")
    if a.device != b.device:
        return False
    base = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    return base(a) == base(b)

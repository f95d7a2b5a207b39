"""Handout §1.2: strides, contiguity and shared storage."""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

from jaxtyping import Shaped
from torch import Tensor


def _ints(xs, name, neg_ok=False):
    """Validate a sequence of non-negative ints."""
    if isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {type(xs).__name__}")
    if any(isinstance(x, bool) or not isinstance(x, Integral) for x in xs):
        raise TypeError(f"{name} must hold ints, got {xs!r}")
    if not neg_ok and any(x < 0 for x in xs):
        raise ValueError(f"{name} has a negative entry: {xs!r}")
    return tuple(map(int, xs))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of shape."""
    s = _ints(shape, "shape")
    return tuple(math.prod(max(d, 1) for d in s[i + 1:]) for i in range(len(s)))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Storage position of an element."""
    i, s = _ints(index, "index"), _ints(strides, "strides")
    if isinstance(storage_offset, bool) or not isinstance(storage_offset, Integral):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset must be >= 0, got {storage_offset}")
    if len(i) != len(s):
        raise ValueError(f"index and strides differ in length: {len(i)} vs {len(s)}")
    return int(storage_offset) + sum(a * b for a, b in zip(i, s))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the layout is row-major without gaps."""
    sh, st = _ints(shape, "shape"), _ints(strides, "strides")
    if len(sh) != len(st):
        raise ValueError(f"shape and strides differ in length: {len(sh)} vs {len(st)}")
    return 0 in sh or all(d == 1 or a == b for d, a, b in zip(sh, st, contiguous_strides(sh)))


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether two tensors view one storage."""
    for n, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{n} must be a tensor, got {type(t).__name__}")
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

"""§1.2  A tensor as a view (shape n, stride s, offset o) of a storage.

    element i lives at   o + sum_k i_k * s_k
    row-major strides    s_k = prod_{j > k} max(n_j, 1)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from jaxtyping import Shaped
from torch import Tensor


def is_int(n: object) -> bool:
    """n in Z, a bool excluded."""
    return isinstance(n, numbers.Integral) and not isinstance(n, bool)


def naturals(v: object, name: str) -> tuple[int, ...]:
    """v as a tuple in N^d, or TypeError / ValueError naming it."""
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {type(v).__name__}")
    if not all(is_int(a) for a in v):
        raise TypeError(f"{name} must hold ints, got {v!r}")
    if any(a < 0 for a in v):
        raise ValueError(f"{name} has a negative entry: {v!r}")
    return tuple(int(a) for a in v)


def same_length(n: tuple[int, ...], s: tuple[int, ...], names: str) -> None:
    if len(n) != len(s):
        raise ValueError(f"{names} have different lengths: {len(n)} and {len(s)}")


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """s_k = prod_{j > k} max(n_j, 1)"""
    n = naturals(shape, "shape")
    return tuple(math.prod(max(a, 1) for a in n[k + 1:]) for k in range(len(n)))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """o + <i, s>"""
    i, s = naturals(index, "index"), naturals(strides, "strides")
    if not is_int(storage_offset):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset must be >= 0, got {storage_offset}")
    same_length(i, s, "index and strides")
    return int(storage_offset) + sum(a * b for a, b in zip(i, s))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """prod n = 0, or s_k = prod_{j > k} n_j for every k with n_k != 1."""
    n, s = naturals(shape, "shape"), naturals(strides, "strides")
    same_length(n, s, "shape and strides")
    return 0 in n or all(s[k] == math.prod(n[k + 1:]) for k in range(len(n)) if n[k] != 1)


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """a ~ b  iff  same device and same storage base address."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

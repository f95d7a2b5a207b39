"""Handout §1.2: strides, contiguity and shared storage."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Shaped
from torch import Tensor

from ._validate import require_int, require_shape

__all__ = ["contiguous_strides", "is_contiguous", "same_storage", "storage_index"]


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (in elements) of a contiguous tensor of ``shape``.

    Like torch, a dimension of size 0 counts as size 1 when computing the
    strides of the dimensions before it.
    """
    shape = require_shape("shape", shape)
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Position in storage of the element at ``index``: offset + Σ index[i]·strides[i]."""
    index = require_shape("index", index)
    strides = require_shape("strides", strides)
    offset = require_int("storage_offset", storage_offset)
    if len(index) != len(strides):
        raise ValueError(f"index has {len(index)} dimensions but strides has {len(strides)}")
    return offset + sum(i * s for i, s in zip(index, strides, strict=True))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``shape``/``strides`` lay elements out row-major with no gaps.

    Strides of size-1 dimensions never matter (no step is taken along them),
    and a tensor with no elements is contiguous.
    """
    shape = require_shape("shape", shape)
    strides = require_shape("strides", strides)
    if len(shape) != len(strides):
        raise ValueError(f"shape has {len(shape)} dimensions but strides has {len(strides)}")
    if 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether ``a`` and ``b`` are views of one storage (whatever their offsets
    and their dtype)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    # data_ptr() is where each view *starts*; the storage's pointer is shared.
    return a.device == b.device and (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )

"""Handout §1.2: strides, contiguity and shared storage."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Shaped
from torch import Tensor


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"shape entries must be ints, got {d!r}")
        if d < 0:
            raise ValueError(f"shape has a negative dimension: {d}")
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    if isinstance(index, (str, bytes)) or not isinstance(index, Sequence):
        raise TypeError(f"index must be a sequence of ints, got {type(index).__name__}")
    if isinstance(strides, (str, bytes)) or not isinstance(strides, Sequence):
        raise TypeError(f"strides must be a sequence of ints, got {type(strides).__name__}")
    if isinstance(storage_offset, bool) or not isinstance(storage_offset, int):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    for i in index:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"index entries must be ints, got {i!r}")
        if i < 0:
            raise ValueError(f"index has a negative entry: {i}")
    for s in strides:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"strides entries must be ints, got {s!r}")
        if s < 0:
            raise ValueError(f"strides has a negative entry: {s}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset must be >= 0, got {storage_offset}")
    if len(index) != len(strides):
        raise ValueError(f"index and strides differ in length: {len(index)} vs {len(strides)}")
    res = storage_offset
    for i, s in zip(index, strides):
        res += i * s
    return res


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}")
    if isinstance(strides, (str, bytes)) or not isinstance(strides, Sequence):
        raise TypeError(f"strides must be a sequence of ints, got {type(strides).__name__}")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"shape entries must be ints, got {d!r}")
        if d < 0:
            raise ValueError(f"shape has a negative dimension: {d}")
    for s in strides:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"strides entries must be ints, got {s!r}")
        if s < 0:
            raise ValueError(f"strides has a negative entry: {s}")
    if len(shape) != len(strides):
        raise ValueError(f"shape and strides differ in length: {len(shape)} vs {len(strides)}")
    if 0 in shape:
        return True
    want = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d == 1:
            continue
        if s != want:
            return False
        want *= d
    return True


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"a must be a tensor, got {type(a).__name__}")
    if not isinstance(b, torch.Tensor):
        raise TypeError(f"b must be a tensor, got {type(b).__name__}")
    if a.device != b.device:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

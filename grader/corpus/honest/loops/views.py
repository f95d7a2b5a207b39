"""Handout §1.2: strides, contiguity and whether two tensors share a storage."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from jaxtyping import Shaped
from torch import Tensor


def _read_int_sequence(values, argument_name: str) -> list[int]:
    """Check that the argument is a sequence of non-negative ints and return it as a list."""
    # Step 1: it must be a sequence (but a string is not a sequence of ints).
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, torch.Size)):
        raise TypeError(f"{argument_name} must be a sequence of ints, got {type(values).__name__}")
    # Step 2: go through the entries one at a time.
    checked_values = []
    for entry in values:
        if isinstance(entry, bool) or not isinstance(entry, numbers.Integral):
            raise TypeError(f"{argument_name} must hold ints, got {entry!r}")
        if entry < 0:
            raise ValueError(f"{argument_name} has a negative entry: {entry}")
        checked_values.append(int(entry))
    return checked_values


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of a contiguous tensor; a size-0 dim counts as size 1."""
    # Step 1: validate the shape.
    dimension_sizes = _read_int_sequence(shape, "shape")
    number_of_dimensions = len(dimension_sizes)
    # Step 2: walk from the last dimension to the first, multiplying as we go.
    strides = [0] * number_of_dimensions
    elements_per_step = 1
    for dimension in range(number_of_dimensions - 1, -1, -1):
        strides[dimension] = elements_per_step
        elements_per_step = elements_per_step * max(dimension_sizes[dimension], 1)
    return tuple(strides)


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Where element ``index`` sits in the storage: offset + sum of index times stride."""
    # Step 1: validate the arguments.
    index_values = _read_int_sequence(index, "index")
    stride_values = _read_int_sequence(strides, "strides")
    if isinstance(storage_offset, bool) or not isinstance(storage_offset, numbers.Integral):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset must not be negative, got {storage_offset}")
    if len(index_values) != len(stride_values):
        raise ValueError(
            f"index and strides must have the same length, got {len(index_values)} and {len(stride_values)}"
        )
    # Step 2: add up the steps in every dimension.
    position = int(storage_offset)
    for dimension in range(len(index_values)):
        position = position + index_values[dimension] * stride_values[dimension]
    return position


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether shape and strides form a row-major layout without gaps."""
    # Step 1: validate the arguments.
    dimension_sizes = _read_int_sequence(shape, "shape")
    stride_values = _read_int_sequence(strides, "strides")
    if len(dimension_sizes) != len(stride_values):
        raise ValueError(
            f"shape and strides must have the same length, got {len(dimension_sizes)} and {len(stride_values)}"
        )
    # Step 2: a tensor with no elements is contiguous.
    for dimension_size in dimension_sizes:
        if dimension_size == 0:
            return True
    # Step 3: from the last dimension back, each stride must equal the elements after it.
    expected_stride = 1
    for dimension in range(len(dimension_sizes) - 1, -1, -1):
        # A size-1 dimension never steps, so its stride does not matter.
        if dimension_sizes[dimension] == 1:
            continue
        if stride_values[dimension] != expected_stride:
            return False
        expected_stride = expected_stride * dimension_sizes[dimension]
    return True


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether two tensors look at the same underlying storage."""
    # Step 1: both arguments must be tensors.
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"a must be a tensor, got {type(a).__name__}")
    if not isinstance(b, torch.Tensor):
        raise TypeError(f"b must be a tensor, got {type(b).__name__}")
    # Step 2: tensors on different devices cannot share memory.
    if a.device != b.device:
        return False
    # Step 3: compare where the storages start (not where the views start).
    start_of_storage_a = a.untyped_storage().data_ptr()
    start_of_storage_b = b.untyped_storage().data_ptr()
    return start_of_storage_a == start_of_storage_b

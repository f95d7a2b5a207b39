"""Handout §1.2: strides, contiguity and shared storage.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxtyping import Shaped
from torch import Tensor


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a contiguous tensor of ``shape``
    ((2, 3, 4) -> (12, 4, 1)). As in torch, a size-0 dimension counts as
    size 1 for the strides of the dimensions before it.

    Raises:
        TypeError: ``shape`` is not a sequence of ints.
        ValueError: a dimension is negative.
    """
    raise NotImplementedError("contiguous_strides: see handout §1.2")


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Position in storage of the element at ``index`` of a tensor with ``strides``
    starting at ``storage_offset`` (element (1, 2) of a contiguous 4x4 is at 6).

    Raises:
        TypeError: an argument is not (a sequence of) ints (a bool is not one).
        ValueError: a negative entry (of ``index``, ``strides`` or
            ``storage_offset``), or ``index`` and ``strides`` of different lengths.
    """
    raise NotImplementedError("storage_index: see handout §1.2")


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``shape`` and ``strides`` describe a row-major layout with no gaps.

    The stride of a size-1 dimension does not matter, and a tensor with no
    elements is contiguous (both as in ``Tensor.is_contiguous``).

    Raises:
        TypeError: an argument is not a sequence of ints.
        ValueError: a negative entry, or ``shape`` and ``strides`` of different lengths.
    """
    raise NotImplementedError("is_contiguous: see handout §1.2")


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether ``a`` and ``b`` are views of the same storage, e.g. ``x`` and
    ``x[1]``, for tensors of any dtype. (Comparing ``data_ptr()`` is wrong: it
    is where a view *starts*.) Tensors on different devices never share one.
    Two separate tensors whose storages hold no bytes at all have nothing to
    compare: either answer is accepted for them (an empty *view* of a tensor
    does share its storage).

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor.
    """
    raise NotImplementedError("same_storage: see handout §1.2")

"""Handout §1.2: the arithmetic of strides, offsets and storages.

A small ``_Layout`` object validates and holds a (shape, strides) pair; the
public functions are thin wrappers around its methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jaxtyping import Shaped
from torch import Tensor


def _int_tuple(values: object, name: str) -> tuple[int, ...]:
    """Check that ``values`` is a sequence of non-negative ints and freeze it.

    Args:
        values: Candidate sequence.
        name: Argument name, quoted in error messages.

    Returns:
        The entries as a tuple.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        # torch.Size is a tuple, so it passes; arbitrary iterables do not.
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    items = tuple(values)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"{name} must hold ints, found {item!r}")
        if item < 0:
            raise ValueError(f"{name} must not hold negative entries, found {item}")
    return items


@dataclass(frozen=True)
class _Layout:
    """A validated shape together with its strides.

    Attributes:
        shape: Size of each dimension.
        strides: Elements skipped per step along each dimension.
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def build(cls, shape: object, strides: object, stride_name: str = "strides") -> _Layout:
        """Validate both halves and check that their lengths agree.

        Args:
            shape: Sizes, or indices when used for addressing.
            strides: Stride per dimension.
            stride_name: Name to use for the second argument in errors.

        Returns:
            A frozen layout.
        """
        first = _int_tuple(shape, "shape")
        second = _int_tuple(strides, stride_name)
        if len(first) != len(second):
            raise ValueError(f"shape and {stride_name} differ in length: {len(first)} vs {len(second)}")
        return cls(first, second)

    @staticmethod
    def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
        """Strides of a packed row-major tensor; empty dims step like size 1."""
        out = [0] * len(shape)
        running = 1
        for dim in range(len(shape) - 1, -1, -1):
            out[dim] = running
            running *= max(shape[dim], 1)
        return tuple(out)

    def packed(self) -> bool:
        """Whether the layout is row-major without gaps (size-1 dims ignored)."""
        if 0 in self.shape:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Compute the strides a freshly allocated tensor would get.

    Args:
        shape: Non-negative sizes.

    Returns:
        One stride per dimension, innermost being 1.
    """
    return _Layout.row_major(_int_tuple(shape, "shape"))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Find where an element sits in the underlying storage.

    Args:
        index: Coordinates of the element.
        strides: Strides of the view.
        storage_offset: Position of the view's first element.

    Returns:
        ``storage_offset + sum(index[i] * strides[i])``.
    """
    coords = _int_tuple(index, "index")
    steps = _int_tuple(strides, "strides")
    if isinstance(storage_offset, bool) or not isinstance(storage_offset, int):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset must be non-negative, got {storage_offset}")
    if len(coords) != len(steps):
        raise ValueError(f"index and strides differ in length: {len(coords)} vs {len(steps)}")
    return storage_offset + sum(c * s for c, s in zip(coords, steps))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Tell whether a view is laid out like a fresh row-major tensor.

    Args:
        shape: Sizes of the view.
        strides: Strides of the view.

    Returns:
        True for a gap-free row-major layout.
    """
    return _Layout.build(shape, strides).packed()


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Tell whether two tensors are windows onto one storage.

    Args:
        a: First tensor.
        b: Second tensor.

    Returns:
        True when both live on the same device and their storages start at
        the same address.
    """
    for label, tensor in (("a", a), ("b", b)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{label} must be a torch.Tensor, got {type(tensor).__name__}")
    if a.device != b.device:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

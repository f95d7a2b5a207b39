"""Written from the handout alone: plain loops for strides and contiguity, same_storage by storage identity with a non-null pointer fallback.

Handout §1.2: strides, contiguity and shared storage."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from jaxtyping import Shaped
from torch import Tensor


def _ints(seq, name):
    """A list of plain ints from a sequence, or TypeError / ValueError naming ``name``."""
    if isinstance(seq, (str, bytes)) or not isinstance(seq, (Sequence, torch.Size)):
        raise TypeError(f"{name} must be a sequence of ints, got {type(seq).__name__}")
    out = []
    for pos, item in enumerate(seq):
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(f"{name}[{pos}] must be an int, got {type(item).__name__}")
        v = int(item)
        if v < 0:
            raise ValueError(f"{name}[{pos}] is negative ({v})")
        out.append(v)
    return out


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a contiguous tensor of ``shape``
    ((2, 3, 4) -> (12, 4, 1)). As in torch, a size-0 dimension counts as
    size 1 for the strides of the dimensions before it.

    Raises:
        TypeError: ``shape`` is not a sequence of ints.
        ValueError: a dimension is negative.
    """
    dims = _ints(shape, "shape")
    n = len(dims)
    strides = [0] * n
    step = 1
    i = n - 1
    while i >= 0:
        strides[i] = step
        step *= dims[i] if dims[i] > 0 else 1
        i -= 1
    return tuple(strides)


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Position in storage of the element at ``index`` of a tensor with ``strides``
    starting at ``storage_offset`` (element (1, 2) of a contiguous 4x4 is at 6).

    Raises:
        TypeError: an argument is not (a sequence of) ints.
        ValueError: a negative entry, or ``index`` and ``strides`` of different lengths.
    """
    idx = _ints(index, "index")
    st = _ints(strides, "strides")
    if isinstance(storage_offset, bool) or not isinstance(storage_offset, numbers.Integral):
        raise TypeError(f"storage_offset must be an int, got {type(storage_offset).__name__}")
    if storage_offset < 0:
        raise ValueError(f"storage_offset is negative ({storage_offset})")
    if len(idx) != len(st):
        raise ValueError(f"index has {len(idx)} entries but strides has {len(st)}")
    pos = int(storage_offset)
    for k in range(len(idx)):
        pos += idx[k] * st[k]
    return pos


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``shape`` and ``strides`` describe a row-major layout with no gaps.

    The stride of a size-1 dimension does not matter, and a tensor with no
    elements is contiguous (both as in ``Tensor.is_contiguous``).

    Raises:
        TypeError: an argument is not a sequence of ints.
        ValueError: a negative entry, or ``shape`` and ``strides`` of different lengths.
    """
    dims = _ints(shape, "shape")
    st = _ints(strides, "strides")
    if len(dims) != len(st):
        raise ValueError(f"shape has {len(dims)} entries but strides has {len(st)}")
    if 0 in dims:
        return True
    want = 1
    for d, s in zip(reversed(dims), reversed(st)):
        if d == 1:
            continue
        if s != want:
            return False
        want = want * d
    return True


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether ``a`` and ``b`` are views of the same storage, e.g. ``x`` and
    ``x[1]``. (Comparing ``data_ptr()`` is wrong: it is where a view *starts*.)

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if a.device != b.device:
        return False
    sa = a.untyped_storage()
    sb = b.untyped_storage()
    if sa._cdata == sb._cdata:
        return True
    # distinct storage objects over the same (non-null) memory
    pa, pb = sa.data_ptr(), sb.data_ptr()
    return pa != 0 and pa == pb

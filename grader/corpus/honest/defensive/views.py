"""Handout §1.2: row-major strides, storage positions, contiguity, shared storage."""

from __future__ import annotations

from collections.abc import Sequence

from jaxtyping import Shaped
from torch import Tensor

_SEQUENCE_TYPES: tuple[type, ...] = (tuple, list)


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"argument '{name}' expects an int, received {type(value).__name__}")
    if value < 0:
        raise ValueError(f"argument '{name}' expects a non-negative value, received {value}")
    return value


def _require_int_sequence(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"argument '{name}' expects a sequence of ints, received {type(value).__name__}")
    return tuple(_require_non_negative_int(name, entry) for entry in value)


def _require_same_length(first_name: str, first: Sequence[int], second_name: str, second: Sequence[int]) -> None:
    if len(first) != len(second):
        raise ValueError(
            f"arguments '{first_name}' and '{second_name}' disagree in length ({len(first)} vs {len(second)})"
        )


def _require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"argument '{name}' expects a torch.Tensor, received {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- #
# private steps
# --------------------------------------------------------------------------- #
def _has_no_elements(dims: Sequence[int]) -> bool:
    return any(size == 0 for size in dims)


def _storage_address(tensor: Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides; empty dimensions step like size-1 ones."""
    dims = _require_int_sequence("shape", shape)
    strides: list[int] = []
    running = 1
    for size in reversed(dims):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def storage_index(index: Sequence[int], strides: Sequence[int], storage_offset: int = 0) -> int:
    """Storage position of ``index``: offset plus the dot product of index and strides."""
    coords = _require_int_sequence("index", index)
    steps = _require_int_sequence("strides", strides)
    offset = _require_non_negative_int("storage_offset", storage_offset)
    _require_same_length("index", coords, "strides", steps)
    return offset + sum(coord * step for coord, step in zip(coords, steps))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the layout is gap-free row-major (size-1 strides ignored, empty is contiguous)."""
    dims = _require_int_sequence("shape", shape)
    steps = _require_int_sequence("strides", strides)
    _require_same_length("shape", dims, "strides", steps)
    if _has_no_elements(dims):
        return True
    expected = 1
    for size, step in zip(reversed(dims), reversed(steps)):
        if size == 1:
            continue
        if step != expected:
            return False
        expected *= size
    return True


def same_storage(a: Shaped[Tensor, ...], b: Shaped[Tensor, ...]) -> bool:
    """Whether two tensors view one underlying storage (same device, same storage base)."""
    left = _require_tensor("a", a)
    right = _require_tensor("b", b)
    if left.device != right.device:
        return False
    return _storage_address(left) == _storage_address(right)

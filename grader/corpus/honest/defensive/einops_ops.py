"""Handout §2: named-dimension tensor operations with einops, shape-checked by jaxtyping."""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

_PAIRWISE_PATTERN = "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2"
_LINEAR_PATTERN = "... d_in, d_out d_in -> ... d_out"
_SPLIT_PATTERN = "... (heads d_head) -> ... heads d_head"
_MERGE_PATTERN = "... heads d_head -> ... (heads d_head)"
_REDUCE_LAST_PATTERN = "... hidden -> ..."


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"argument '{name}' needs to be an int, received {type(value).__name__}")
    if value < 1:
        raise ValueError(f"argument '{name}' needs to be at least 1, received {value}")
    return value


def _require_divides(name: str, divisor: int, total: int) -> None:
    if total % divisor != 0:
        raise ValueError(f"argument '{name}'={divisor} does not evenly divide the last dimension of size {total}")


def _require_matching_dtypes(first_name: str, first: Tensor, second_name: str, second: Tensor) -> None:
    if first.dtype != second.dtype:
        raise TypeError(
            f"arguments '{first_name}' and '{second_name}' need one dtype, received {first.dtype} and {second.dtype}"
        )


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
@jaxtyped(typechecker=beartype)
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Batched dot products of every row of ``x`` with every row of ``y``."""
    _require_matching_dtypes("x", x, "y", y)
    return einsum(x, y, _PAIRWISE_PATTERN)


@jaxtyped(typechecker=beartype)
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """``x`` multiplied by the transpose of an nn.Linear-style weight ``w``."""
    _require_matching_dtypes("x", x, "w", w)
    return einsum(x, w, _LINEAR_PATTERN)


@jaxtyped(typechecker=beartype)
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dimension into ``heads`` contiguous chunks (head index outer)."""
    head_count = _require_positive_int("heads", heads)
    _require_divides("heads", head_count, x.shape[-1])
    return rearrange(x, _SPLIT_PATTERN, heads=head_count)


@jaxtyped(typechecker=beartype)
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """Undo :func:`split_heads`: concatenate the heads back along the last dimension."""
    return rearrange(x, _MERGE_PATTERN)


@jaxtyped(typechecker=beartype)
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum away the last dimension."""
    return reduce(x, _REDUCE_LAST_PATTERN, "sum")


@jaxtyped(typechecker=beartype)
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Average away the last dimension."""
    return reduce(x, _REDUCE_LAST_PATTERN, "mean")

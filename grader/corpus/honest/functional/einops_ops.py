"""Named-dimension tensor operations with einops, shape-checked by jaxtyping."""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

# every public function below checks its shapes at call time
_checked = jaxtyped(typechecker=beartype)


def _heads_count(heads: object, hidden: int) -> int:
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")
    if hidden % heads:
        raise ValueError(f"heads={heads} does not divide the hidden size {hidden}")
    return heads


@_checked
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Batched dot products of every x row with every y row."""
    return einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")


@_checked
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """x times the transpose of an nn.Linear-style weight."""
    return einsum(x, w, "... d_in, d_out d_in -> ... d_out")


@_checked
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dimension into contiguous per-head slices."""
    count = _heads_count(heads, x.shape[-1])
    return rearrange(x, "... (heads d_head) -> ... heads d_head", heads=count)


@_checked
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """Concatenate the heads back into one last dimension."""
    return rearrange(x, "... heads d_head -> ... (heads d_head)")


@_checked
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum out the last dimension."""
    return reduce(x, "... hidden -> ...", "sum")


@_checked
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Average out the last dimension."""
    return reduce(x, "... hidden -> ...", "mean")

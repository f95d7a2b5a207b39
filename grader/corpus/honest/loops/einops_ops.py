"""Handout §2: small tensor operations written with einops and checked with jaxtyping.

Each function is decorated with ``@jaxtyped(typechecker=beartype)`` so that a tensor
with the wrong shape raises a TypeError before anything is computed.
"""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor


@jaxtyped(typechecker=beartype)
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Dot product of each row of x with each row of y, for every batch entry."""
    # The hidden dimension is missing on the right, so einsum sums it away.
    scores = einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")
    return scores


@jaxtyped(typechecker=beartype)
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """Multiply x by the transpose of w (w laid out like nn.Linear.weight)."""
    # Sum over d_in, keep all the leading dimensions of x.
    output = einsum(x, w, "... d_in, d_out d_in -> ... d_out")
    return output


@jaxtyped(typechecker=beartype)
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Cut the last dimension into ``heads`` contiguous chunks (heads is the outer one)."""
    # Step 1: heads must be a real int (a bool is not) and at least one.
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1:
        raise ValueError(f"heads must be at least 1, got {heads}")
    # Step 2: heads must divide the hidden size evenly.
    hidden_size = x.shape[-1]
    if hidden_size % heads != 0:
        raise ValueError(f"heads={heads} does not divide the hidden size {hidden_size}")
    # Step 3: heads is the outer factor, so head h owns a contiguous slice.
    split = rearrange(x, "... (heads d_head) -> ... heads d_head", heads=heads)
    return split


@jaxtyped(typechecker=beartype)
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """Undo split_heads: glue the heads back into one last dimension."""
    merged = rearrange(x, "... heads d_head -> ... (heads d_head)")
    return merged


@jaxtyped(typechecker=beartype)
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Add up the last dimension."""
    total = reduce(x, "... hidden -> ...", "sum")
    return total


@jaxtyped(typechecker=beartype)
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Average over the last dimension."""
    average = reduce(x, "... hidden -> ...", "mean")
    return average

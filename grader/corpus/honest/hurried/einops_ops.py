"""Handout §2: einops ops with jaxtyping-checked shapes."""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor


@jaxtyped(typechecker=beartype)
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    return einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")


@jaxtyped(typechecker=beartype)
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    return einsum(x, w, "... d_in, d_out d_in -> ... d_out")


@jaxtyped(typechecker=beartype)
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")
    n = x.shape[-1]
    if n % heads != 0:
        raise ValueError(f"heads={heads} does not divide hidden={n}")
    return rearrange(x, "... (heads d_head) -> ... heads d_head", heads=heads)


@jaxtyped(typechecker=beartype)
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    return rearrange(x, "... heads d_head -> ... (heads d_head)")


@jaxtyped(typechecker=beartype)
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    return reduce(x, "... hidden -> ...", "sum")


@jaxtyped(typechecker=beartype)
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    return reduce(x, "... hidden -> ...", "mean")

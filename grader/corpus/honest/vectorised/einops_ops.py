"""Handout §2: tensor operations with einops, shapes checked by jaxtyping."""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

_typed = jaxtyped(typechecker=beartype)


@_typed
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Batched dot products of every row pair."""
    return einsum(x, y, "b i h, b j h -> b i j")


@_typed
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """x @ w.T over any leading dims."""
    return einsum(x, w, "... i, o i -> ... o")


@_typed
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dim into (heads, d_head), heads outer."""
    if isinstance(heads, bool):
        raise TypeError("heads must be an int, got bool")
    if heads < 1 or x.shape[-1] % heads:
        raise ValueError(f"heads={heads} must be >= 1 and divide hidden={x.shape[-1]}")
    return rearrange(x, "... (h d) -> ... h d", h=heads)


@_typed
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """Inverse of split_heads."""
    return rearrange(x, "... h d -> ... (h d)")


@_typed
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum over the last dim."""
    return reduce(x, "... h -> ...", "sum")


@_typed
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Mean over the last dim."""
    return reduce(x, "... h -> ...", "mean")

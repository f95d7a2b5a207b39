"""§2  Named-dimension tensor algebra (einops), shapes checked by jaxtyping.

    S[b,i,j] = sum_h X[b,i,h] Y[b,j,h]
    Z[...,o] = sum_i X[...,i] W[o,i]
    split:  X[..., h*d + i] -> Z[..., h, i]      merge: the inverse
    sum:    sum_h X[..., h]                        mean: (1/H) sum_h X[..., h]
"""

from __future__ import annotations

import numbers

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

checked = jaxtyped(typechecker=beartype)


@checked
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """S[b,i,j] = sum_h x[b,i,h] y[b,j,h];  2*B*S1*S2*H FLOPs."""
    return einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")


@checked
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """z[..., o] = sum_i x[..., i] w[o, i]   (z = x w^T)"""
    return einsum(x, w, "... d_in, d_out d_in -> ... d_out")


@checked
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """z[..., h, i] = x[..., h*d + i],  d = H / heads  (heads | H required)."""
    if not isinstance(heads, numbers.Integral) or isinstance(heads, bool):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1 or x.shape[-1] % heads:
        raise ValueError(f"heads={heads} must be >= 1 and divide hidden={x.shape[-1]}")
    return rearrange(x, "... (heads d_head) -> ... heads d_head", heads=int(heads))


@checked
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """z[..., h*d + i] = x[..., h, i]"""
    return rearrange(x, "... heads d_head -> ... (heads d_head)")


@checked
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """sum_h x[..., h]"""
    return reduce(x, "... hidden -> ...", "sum")


@checked
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """(1/H) sum_h x[..., h]"""
    return reduce(x, "... hidden -> ...", "mean")

"""A correct §2 that is deliberately slow: Python loops over the batch (one
einsum per batch element or row, then a stack) and over the hidden dimension
(sums built up column by column in float64, rounded once into the input's
dtype).

Measured (one thread, CPU time per call on the tests' sizes): 1 to 5 times the
reference's (jaxtyping's checks dominate small calls). It must get full marks
(selftest/test_correct_corpus.py).

What follows is the reference's description of the contract:

Every function is wrapped in ``@jaxtyped(typechecker=beartype)``: at each call
jaxtyping binds the named dimensions of the annotations (``batch``, ``d_in``,
``*batch``...) across all arguments and the return value, and raises its
``TypeCheckError`` (a ``TypeError``) when a tensor's shape or dtype disagrees.
Checks that annotations cannot express (``heads`` must divide the last
dimension) raise ``ValueError`` naming the argument. Results have the inputs'
dtype and are computed in it: float64 inputs give float64-accurate results.
"""

from __future__ import annotations

import torch
from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

from ._validate import require_int

__all__ = ["apply_linear", "mean_hidden", "merge_heads", "pairwise_scores", "split_heads", "sum_hidden"]


@jaxtyped(typechecker=beartype)
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Dot product of every row of ``x`` with every row of ``y``, per batch."""
    rows = [einsum(x[b], y[b], "seq1 hidden, seq2 hidden -> seq1 seq2") for b in range(x.shape[0])]
    if not rows:
        return x.new_zeros((0, x.shape[1], y.shape[1]))
    return torch.stack(rows)


@jaxtyped(typechecker=beartype)
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """``x`` times ``w`` transposed (``nn.Linear``'s weight layout), any leading dimensions."""
    flat = x.reshape(-1, x.shape[-1])
    rows = [einsum(flat[i], w, "d_in, d_out d_in -> d_out") for i in range(flat.shape[0])]
    out = torch.stack(rows) if rows else x.new_zeros((0, w.shape[0]))
    return out.reshape(*x.shape[:-1], w.shape[0])


@jaxtyped(typechecker=beartype)
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dimension into ``heads`` groups: element ``h * d_head + i``
    of the last dimension becomes element ``[h, i]`` (heads outer, d_head inner)."""
    heads = require_int("heads", heads, minimum=1)
    if x.shape[-1] % heads:
        raise ValueError(f"heads={heads} does not divide the last dimension of x, {x.shape[-1]}")
    return rearrange(x, "... (heads d_head) -> ... heads d_head", heads=heads)


@jaxtyped(typechecker=beartype)
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """The inverse of :func:`split_heads`: ``[..., h, i]`` goes to ``[..., h * d_head + i]``."""
    return rearrange(x, "... heads d_head -> ... (heads d_head)")


@jaxtyped(typechecker=beartype)
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum over the last dimension."""
    total = reduce(x[..., :0].to(torch.float64), "... hidden -> ...", "sum")  # zeros of the right shape
    for i in range(x.shape[-1]):
        total = total + x[..., i].to(torch.float64)
    return total.to(x.dtype)


@jaxtyped(typechecker=beartype)
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Mean over the last dimension."""
    if x.shape[-1] == 0:
        return reduce(x, "... hidden -> ...", "mean")  # nan, as torch's mean of nothing
    total = reduce(x[..., :0].to(torch.float64), "... hidden -> ...", "sum")
    for i in range(x.shape[-1]):
        total = total + x[..., i].to(torch.float64)
    return (total / x.shape[-1]).to(x.dtype)

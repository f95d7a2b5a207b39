"""Handout §2: named-dimension tensor operations (einops), checked by jaxtyping.

Every function is wrapped with ``@jaxtyped(typechecker=beartype)``, so a shape
that contradicts the annotations is rejected with a ``TypeError`` before any
work is done. The einops patterns live in one lookup table.
"""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, reduce
from jaxtyping import Float, jaxtyped
from torch import Tensor

# Named einops patterns, one per operation of this module.
_PATTERNS: dict[str, str] = {
    "scores": "batch left hidden, batch right hidden -> batch left right",
    "linear": "... d_in, d_out d_in -> ... d_out",
    "split": "... (heads d_head) -> ... heads d_head",
    "merge": "... heads d_head -> ... (heads d_head)",
    "collapse": "... hidden -> ...",
}

_checked = jaxtyped(typechecker=beartype)


@_checked
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Batched dot products between every row of one set and every row of another.

    Args:
        x: Queries, shaped (batch, seq1, hidden).
        y: Keys, shaped (batch, seq2, hidden).

    Returns:
        Score matrix of shape (batch, seq1, seq2) in the inputs' dtype.
    """
    return einsum(x, y, _PATTERNS["scores"])


@_checked
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """Project the last axis of ``x`` with a weight stored as (d_out, d_in).

    Args:
        x: Input with any leading axes.
        w: Weight matrix, laid out like ``nn.Linear.weight``.

    Returns:
        The projection, with the last axis of size d_out.
    """
    return einsum(x, w, _PATTERNS["linear"])


@_checked
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Cut the last axis into ``heads`` consecutive chunks.

    Args:
        x: Tensor whose last axis has size heads * d_head.
        heads: Number of chunks; must divide the last axis.

    Returns:
        Tensor with the last axis replaced by (heads, d_head), head-major.
    """
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1:
        raise ValueError(f"heads must be at least 1, got {heads}")
    width = x.shape[-1]
    if width % heads != 0:
        raise ValueError(f"heads={heads} does not divide the hidden size {width}")
    return rearrange(x, _PATTERNS["split"], heads=heads)


@_checked
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """Glue the last two axes back together, undoing :func:`split_heads`.

    Args:
        x: Tensor shaped (..., heads, d_head).

    Returns:
        Tensor shaped (..., heads * d_head).
    """
    return rearrange(x, _PATTERNS["merge"])


@_checked
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Add up the entries of the last axis.

    Args:
        x: Tensor with at least one axis.

    Returns:
        The sums, with the last axis removed.
    """
    return reduce(x, _PATTERNS["collapse"], "sum")


@_checked
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Average the entries of the last axis.

    Args:
        x: Tensor with at least one axis.

    Returns:
        The means, with the last axis removed.
    """
    return reduce(x, _PATTERNS["collapse"], "mean")

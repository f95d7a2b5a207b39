"""Handout §2: tensor operations with einops, shapes annotated with jaxtyping.

Write each function with einops (``einsum``, ``rearrange``, ``reduce``), not
with ``@``, ``permute``, ``view``/``reshape`` or ``.sum``. The annotations say
which dimensions must agree: ``*batch`` is any number of leading dimensions
(einops spells it ``...``), the same ones wherever it appears in one
signature. To have them checked at every call, decorate each function with
``@jaxtyped(typechecker=beartype)`` (``from jaxtyping import jaxtyped``,
``from beartype import beartype``): a mismatch then raises jaxtyping's
``TypeCheckError``, which is a ``TypeError``.

Inputs are floating-point tensors, contiguous or not. Results have the
inputs' dtype and are computed in it: float64 inputs give float64-accurate
results (computing in float32 and casting back keeps only float32's
precision). A tensor whose shape disagrees with the annotations must raise
``TypeError`` or ``ValueError``: torch's and einops' own errors
(``RuntimeError``) do not count.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor


def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Dot product of every row of ``x`` with every row of ``y``, batch by batch:
    ``out[b, i, j] = sum_h x[b, i, h] * y[b, j, h]`` (``einops.einsum``).

    Raises:
        TypeError or ValueError: the batch or hidden sizes of ``x`` and ``y``
            differ, or either is not 3-dimensional.
    """
    raise NotImplementedError("pairwise_scores: see handout §2")


def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """``x`` times ``w`` transposed, for any leading dimensions of ``x``:
    ``out[..., o] = sum_i x[..., i] * w[o, i]`` (``w`` is laid out like
    ``nn.Linear.weight``; use ``einops.einsum``).

    Raises:
        TypeError or ValueError: ``x``'s last dimension is not ``w``'s second,
            ``w`` is not 2-dimensional, or ``x`` has no dimensions.
    """
    raise NotImplementedError("apply_linear: see handout §2")


def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dimension into ``heads`` groups of ``d_head = hidden // heads``:
    element ``h * d_head + i`` of the last dimension becomes ``out[..., h, i]``
    (``einops.rearrange``).

    Raises:
        TypeError: ``heads`` is not an int.
        ValueError: ``heads < 1``, or ``heads`` does not divide ``hidden``.
        TypeError or ValueError: ``x`` has no dimensions.
    """
    raise NotImplementedError("split_heads: see handout §2")


def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """The inverse of :func:`split_heads`: ``out[..., h * d_head + i] = x[..., h, i]``
    (``einops.rearrange``).

    Raises:
        TypeError or ValueError: ``x`` has fewer than 2 dimensions.
    """
    raise NotImplementedError("merge_heads: see handout §2")


def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum over the last dimension (``einops.reduce``).

    Raises:
        TypeError or ValueError: ``x`` has no dimensions.
    """
    raise NotImplementedError("sum_hidden: see handout §2")


def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Mean over the last dimension (``einops.reduce``).

    Raises:
        TypeError or ValueError: ``x`` has no dimensions.
    """
    raise NotImplementedError("mean_hidden: see handout §2")

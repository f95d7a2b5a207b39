"""Written from the handout alone: the same einops calls behind explicit dimension checks of its own.

Handout §2: tensor operations with einops, shapes annotated with jaxtyping.

Write each function with einops (``einsum``, ``rearrange``, ``reduce``), not
with ``@``, ``permute``, ``view``/``reshape`` or ``.sum``. The annotations say
which dimensions must agree: ``*batch`` is any number of leading dimensions
(einops spells it ``...``), the same ones wherever it appears in one
signature. To have them checked at every call, decorate each function with
``@jaxtyped(typechecker=beartype)`` (``from jaxtyping import jaxtyped``,
``from beartype import beartype``): a mismatch then raises jaxtyping's
``TypeCheckError``, which is a ``TypeError``.

Inputs are floating-point tensors, contiguous or not. A tensor whose shape
disagrees with the annotations must raise ``TypeError`` or ``ValueError``:
torch's and einops' own errors (``RuntimeError``) do not count.
"""

from __future__ import annotations

import einops
import torch
from beartype import beartype
from jaxtyping import Float, jaxtyped
from torch import Tensor


def _check_tensor(x, name, min_dims):
    # an explicit check as well as the decorator's, so the errors name the argument
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dims:
        raise ValueError(f"{name} must have at least {min_dims} dimension(s), got shape {tuple(x.shape)}")


@jaxtyped(typechecker=beartype)
def pairwise_scores(
    x: Float[Tensor, "batch seq1 hidden"], y: Float[Tensor, "batch seq2 hidden"]
) -> Float[Tensor, "batch seq1 seq2"]:
    """Dot product of every row of ``x`` with every row of ``y``, batch by batch:
    ``out[b, i, j] = sum_h x[b, i, h] * y[b, j, h]`` (``einops.einsum``).

    Raises:
        TypeError or ValueError: the batch or hidden sizes of ``x`` and ``y``
            differ, or either is not 3-dimensional.
    """
    return einops.einsum(x, y, "b i h, b j h -> b i j")


@jaxtyped(typechecker=beartype)
def apply_linear(x: Float[Tensor, "*batch d_in"], w: Float[Tensor, "d_out d_in"]) -> Float[Tensor, "*batch d_out"]:
    """``x`` times ``w`` transposed, for any leading dimensions of ``x``:
    ``out[..., o] = sum_i x[..., i] * w[o, i]`` (``w`` is laid out like
    ``nn.Linear.weight``; use ``einops.einsum``).

    Raises:
        TypeError or ValueError: ``x``'s last dimension is not ``w``'s second,
            ``w`` is not 2-dimensional, or ``x`` has no dimensions.
    """
    return einops.einsum(x, w, "... i, o i -> ... o")


@jaxtyped(typechecker=beartype)
def split_heads(x: Float[Tensor, "*batch hidden"], heads: int) -> Float[Tensor, "*batch {heads} d_head"]:
    """Split the last dimension into ``heads`` groups of ``d_head = hidden // heads``:
    element ``h * d_head + i`` of the last dimension becomes ``out[..., h, i]``
    (``einops.rearrange``).

    Raises:
        TypeError: ``heads`` is not an int.
        ValueError: ``heads < 1``, or ``heads`` does not divide ``hidden``.
        TypeError or ValueError: ``x`` has no dimensions.
    """
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise TypeError(f"heads must be an int, got {type(heads).__name__}")
    if heads < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")
    _check_tensor(x, "x", 1)
    hidden = x.shape[-1]
    if hidden % heads != 0:
        raise ValueError(f"heads={heads} does not divide the last dimension of x ({hidden})")
    return einops.rearrange(x, "... (nh dh) -> ... nh dh", nh=heads)


@jaxtyped(typechecker=beartype)
def merge_heads(x: Float[Tensor, "*batch heads d_head"]) -> Float[Tensor, "*batch heads*d_head"]:
    """The inverse of :func:`split_heads`: ``out[..., h * d_head + i] = x[..., h, i]``
    (``einops.rearrange``).

    Raises:
        TypeError or ValueError: ``x`` has fewer than 2 dimensions.
    """
    _check_tensor(x, "x", 2)
    return einops.rearrange(x, "... nh dh -> ... (nh dh)")


@jaxtyped(typechecker=beartype)
def sum_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Sum over the last dimension (``einops.reduce``).

    Raises:
        TypeError or ValueError: ``x`` has no dimensions.
    """
    _check_tensor(x, "x", 1)
    return einops.reduce(x, "... h -> ...", "sum")


@jaxtyped(typechecker=beartype)
def mean_hidden(x: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch"]:
    """Mean over the last dimension (``einops.reduce``).

    Raises:
        TypeError or ValueError: ``x`` has no dimensions.
    """
    _check_tensor(x, "x", 1)
    return einops.reduce(x, "... h -> ...", "mean")

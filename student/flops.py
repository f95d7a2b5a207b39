"""Handout §3.1: FLOPs of matmuls, linear layers and MLPs; training cost and MFU.

A FLOP here is one floating-point operation (a multiply or an add), as
``torch.utils.flop_counter.FlopCounterMode`` counts them: the tests compare
your formulas with it. Counts of whole layers are exact ints.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward and one backward pass; ``total`` is their sum."""

    forward: int
    backward: int
    total: int


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of multiplying an (m, k) matrix by a (k, n) matrix.

    Raises:
        TypeError: an argument is not an int.
        ValueError: an argument is negative.
    """
    raise NotImplementedError("matmul_flops: see handout §3.1")


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """FLOPs of a bias-free linear layer's forward pass, ``x @ W`` with x of
    shape (batch, d_in) and W of shape (d_in, d_out).

    Raises:
        TypeError: an argument is not an int.
        ValueError: an argument is negative.
    """
    raise NotImplementedError("linear_forward_flops: see handout §3.1")


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """FLOPs of that layer's backward pass: the gradient of W always, the
    gradient of x only when ``input_requires_grad`` (autograd skips it otherwise).

    Raises:
        TypeError: a size is not an int, or ``input_requires_grad`` not a bool.
        ValueError: a size is negative.
    """
    raise NotImplementedError("linear_backward_flops: see handout §3.1")


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """Forward and backward FLOPs of a bias-free MLP with layer widths ``dims``
    (one linear layer ``dims[i] -> dims[i+1]`` per consecutive pair, any
    elementwise activation in between, which does not count) on ``batch`` rows.
    ``input_requires_grad`` says whether the MLP's input needs a gradient; the
    inputs of the later layers always do.

    Raises:
        TypeError: ``batch`` or a width is not an int, ``dims`` is not a
            sequence, or ``input_requires_grad`` is not a bool.
        ValueError: ``batch < 0``, a width < 1, or fewer than 2 widths.
    """
    raise NotImplementedError("mlp_flops: see handout §3.1")


def training_flops(num_params: float, num_tokens: float) -> float:
    """FLOPs of training ``num_params`` parameters on ``num_tokens`` tokens
    (forward and backward), the usual 6NT estimate.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: an argument is negative or not finite.
    """
    raise NotImplementedError("training_flops: see handout §3.1")


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Model FLOPs utilisation: ``model_flops`` done in ``seconds``, as a
    fraction of ``peak_flops_per_second``.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: ``model_flops < 0``, ``seconds <= 0`` or
            ``peak_flops_per_second <= 0``, or an argument is not finite.
    """
    raise NotImplementedError("mfu: see handout §3.1")


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Days of wall-clock time to train ``num_params`` parameters on
    ``num_tokens`` tokens with ``num_devices`` devices of the given peak
    FLOP/s, each running at utilisation ``mfu``. 70e9 parameters, 15e12 tokens,
    1024 H100s (989.5e12 FLOP/s dense bf16), MFU 0.5: about 144 days.

    Raises:
        TypeError: ``num_devices`` is not an int, or another argument not a real number.
        ValueError: ``num_devices < 1``, ``peak_flops_per_second <= 0``,
            ``mfu`` not in (0, 1], a negative count, or an argument is not finite.
    """
    raise NotImplementedError("training_days: see handout §3.1")

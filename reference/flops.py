"""Handout §3.1: FLOPs of matmuls, linear layers and MLPs; training cost and MFU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ._validate import require_int, require_number

__all__ = [
    "FlopCount",
    "linear_backward_flops",
    "linear_forward_flops",
    "matmul_flops",
    "mfu",
    "mlp_flops",
    "training_days",
    "training_flops",
]

SECONDS_PER_DAY = 24 * 60 * 60


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward and one backward pass; ``total`` is their sum."""

    forward: int
    backward: int
    total: int


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m, k) @ (k, n) product: one multiply and one add per term."""
    m, k, n = require_int("m", m), require_int("k", k), require_int("n", n)
    return 2 * m * k * n


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """FLOPs of ``x @ W`` for x of shape (batch, d_in) and W of shape (d_in, d_out)."""
    return matmul_flops(batch, d_in, d_out)


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """FLOPs of the backward pass of a bias-free linear layer.

    The weight's gradient ``x.T @ grad_out`` is one matmul of the forward's
    size; the input's gradient ``grad_out @ W.T`` is another, and autograd
    skips it when the input needs no gradient (a network's first layer).
    """
    if not isinstance(input_requires_grad, bool):
        raise TypeError(f"input_requires_grad must be a bool, got {type(input_requires_grad).__name__}")
    one = matmul_flops(batch, d_in, d_out)
    return 2 * one if input_requires_grad else one


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """Forward and backward FLOPs of a bias-free MLP with layer widths ``dims``
    (``dims[i] -> dims[i+1]`` for each layer) on ``batch`` rows. Elementwise
    activations are not counted (they cost O(batch·width), not O(batch·width²))."""
    batch = require_int("batch", batch)
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    widths = [require_int(f"dims[{i}]", d, minimum=1) for i, d in enumerate(dims)]
    if len(widths) < 2:
        raise ValueError(f"dims must hold at least 2 widths (one layer), got {list(dims)}")
    if not isinstance(input_requires_grad, bool):
        raise TypeError(f"input_requires_grad must be a bool, got {type(input_requires_grad).__name__}")
    forward = backward = 0
    for i, (d_in, d_out) in enumerate(pairwise(widths)):
        forward += linear_forward_flops(batch, d_in, d_out)
        # Every layer after the first gets its input from a layer with
        # parameters, so that input needs a gradient.
        backward += linear_backward_flops(batch, d_in, d_out, input_requires_grad or i > 0)
    return FlopCount(forward, backward, forward + backward)


def training_flops(num_params: float, num_tokens: float) -> float:
    """FLOPs to train ``num_params`` parameters on ``num_tokens`` tokens:
    2 per parameter per token forward, 4 backward, 6NT in all."""
    n = require_number("num_params", num_params)
    t = require_number("num_tokens", num_tokens)
    if n < 0 or t < 0:
        raise ValueError(f"num_params and num_tokens must be >= 0, got {n} and {t}")
    return 6.0 * n * t


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s (model FLOPs, not hardware
    FLOPs, so recomputation does not count) over the device's peak FLOP/s."""
    flops = require_number("model_flops", model_flops)
    if flops < 0:
        raise ValueError(f"model_flops must be >= 0, got {flops}")
    seconds = require_number("seconds", seconds, positive=True)
    peak = require_number("peak_flops_per_second", peak_flops_per_second, positive=True)
    return flops / seconds / peak


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days to train at ``mfu`` of ``num_devices`` devices' peak:
    6NT / (devices · peak · MFU) seconds, over 86400."""
    devices = require_int("num_devices", num_devices, minimum=1)
    peak = require_number("peak_flops_per_second", peak_flops_per_second, positive=True)
    utilisation = require_number("mfu", mfu, positive=True)
    if utilisation > 1:
        raise ValueError(f"mfu is a fraction of peak, at most 1, got {utilisation}")
    seconds = training_flops(num_params, num_tokens) / (devices * peak * utilisation)
    return seconds / SECONDS_PER_DAY

"""Handout §3.1: counting matmul FLOPs, the 6NT rule, MFU and training time.

Exact layer counts are ints; the large-scale estimates (6NT, MFU, days) are
floats. A tiny ``_Matmul`` value object does the per-layer bookkeeping.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

_SECONDS_PER_DAY = 86_400.0
# FLOPs per parameter per token: forward 2, backward 4.
_TRAINING_FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True)
class FlopCount:
    """Forward and backward FLOPs of one pass; ``total`` is their sum."""

    forward: int
    backward: int
    total: int


def _size(value: object, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return as_float


def _nonneg_real(value: object, name: str) -> float:
    as_float = _real(value, name)
    if as_float < 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return as_float


def _positive_real(value: object, name: str) -> float:
    as_float = _real(value, name)
    if as_float <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return as_float


@dataclass(frozen=True)
class _Matmul:
    """A product (rows, inner) @ (inner, cols) and the FLOPs around it.

    Attributes:
        rows: Rows of the left operand (the batch, for a layer).
        inner: Shared dimension.
        cols: Columns of the right operand.
    """

    rows: int
    inner: int
    cols: int

    @property
    def cost(self) -> int:
        """Multiply-adds times two."""
        return 2 * self.rows * self.inner * self.cols

    def backward_cost(self, needs_input_grad: bool) -> int:
        """Backward of ``x @ W``: weight grad always, input grad on request."""
        products = 2 if needs_input_grad else 1
        return products * self.cost


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of a matrix product.

    Args:
        m: Rows of the left matrix.
        k: Shared dimension.
        n: Columns of the right matrix.

    Returns:
        2 * m * k * n.
    """
    return _Matmul(_size(m, "m"), _size(k, "k"), _size(n, "n")).cost


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """FLOPs of ``x @ W`` for a bias-free layer.

    Args:
        batch: Number of input rows.
        d_in: Input width.
        d_out: Output width.

    Returns:
        The forward FLOPs.
    """
    return _Matmul(_size(batch, "batch"), _size(d_in, "d_in"), _size(d_out, "d_out")).cost


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """FLOPs of the same layer's backward pass.

    Args:
        batch: Number of input rows.
        d_in: Input width.
        d_out: Output width.
        input_requires_grad: Whether autograd also needs the input's gradient.

    Returns:
        2BDK for the weight gradient, plus 2BDK when the input needs one.
    """
    layer = _Matmul(_size(batch, "batch"), _size(d_in, "d_in"), _size(d_out, "d_out"))
    return layer.backward_cost(_flag(input_requires_grad, "input_requires_grad"))


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """FLOPs of a bias-free MLP, forward and backward.

    Args:
        batch: Number of input rows.
        dims: Layer widths, input first; one layer per consecutive pair.
        input_requires_grad: Whether the network's input needs a gradient.

    Returns:
        A :class:`FlopCount`.
    """
    rows = _size(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    widths = [_size(width, "dims", minimum=1) for width in dims]
    first_needs_grad = _flag(input_requires_grad, "input_requires_grad")
    if len(widths) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(widths)}")
    layers = [_Matmul(rows, a, b) for a, b in zip(widths, widths[1:])]
    forward = sum(layer.cost for layer in layers)
    backward = sum(
        layer.backward_cost(first_needs_grad if position == 0 else True)
        for position, layer in enumerate(layers)
    )
    return FlopCount(forward=forward, backward=backward, total=forward + backward)


def training_flops(num_params: float, num_tokens: float) -> float:
    """The 6NT estimate of training compute.

    Args:
        num_params: Parameter count N.
        num_tokens: Token count T.

    Returns:
        6 * N * T as a float.
    """
    params = _nonneg_real(num_params, "num_params")
    tokens = _nonneg_real(num_tokens, "num_tokens")
    return _TRAINING_FLOPS_PER_PARAM_TOKEN * params * tokens


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Share of the hardware's peak that a run achieved.

    Args:
        model_flops: FLOPs the model needed.
        seconds: Wall-clock time the run took.
        peak_flops_per_second: The device's peak rate.

    Returns:
        Achieved FLOP/s divided by peak FLOP/s.
    """
    work = _nonneg_real(model_flops, "model_flops")
    elapsed = _positive_real(seconds, "seconds")
    peak = _positive_real(peak_flops_per_second, "peak_flops_per_second")
    return work / elapsed / peak


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days to train a model on a cluster.

    Args:
        num_params: Parameter count.
        num_tokens: Training tokens.
        num_devices: Number of accelerators (at least 1).
        peak_flops_per_second: Peak rate of one accelerator.
        mfu: Utilisation each accelerator sustains, in (0, 1].

    Returns:
        Days, as a float.
    """
    work = training_flops(num_params, num_tokens)
    devices = _size(num_devices, "num_devices", minimum=1)
    peak = _positive_real(peak_flops_per_second, "peak_flops_per_second")
    utilisation = _real(mfu, "mfu")
    if not 0 < utilisation <= 1:
        raise ValueError(f"mfu must lie in (0, 1], got {mfu!r}")
    rate = devices * peak * utilisation
    return work / rate / _SECONDS_PER_DAY

"""Written from the handout alone: everything built up from matmul_flops, 6N as 2N + 4N, other operation orders in mfu and training_days.

Handout §3.1: FLOPs of matmuls, linear layers and MLPs; training cost and MFU.

A FLOP here is one floating-point operation (a multiply or an add), as
``torch.utils.flop_counter.FlopCounterMode`` counts them: the tests compare
your formulas with it. Counts of whole layers are exact ints.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

SECONDS_PER_DAY = 24 * 60 * 60


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward and one backward pass; ``total`` is their sum."""

    forward: int
    backward: int
    total: int


def _size(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return int(v)


def _real(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return f


def _flag(v, name):
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return v


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of multiplying an (m, k) matrix by a (k, n) matrix.

    Raises:
        TypeError: an argument is not an int.
        ValueError: an argument is negative.
    """
    m = _size(m, "m")
    k = _size(k, "k")
    n = _size(n, "n")
    # m*n outputs, each k multiplies and k adds
    return m * n * (k + k)


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """FLOPs of a bias-free linear layer's forward pass, ``x @ W`` with x of
    shape (batch, d_in) and W of shape (d_in, d_out).

    Raises:
        TypeError: an argument is not an int.
        ValueError: an argument is negative.
    """
    b = _size(batch, "batch")
    i = _size(d_in, "d_in")
    o = _size(d_out, "d_out")
    return matmul_flops(b, i, o)


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """FLOPs of that layer's backward pass: the gradient of W always, the
    gradient of x only when ``input_requires_grad`` (autograd skips it otherwise).

    Raises:
        TypeError: a size is not an int, or ``input_requires_grad`` not a bool.
        ValueError: a size is negative.
    """
    b = _size(batch, "batch")
    i = _size(d_in, "d_in")
    o = _size(d_out, "d_out")
    need_x = _flag(input_requires_grad, "input_requires_grad")
    grad_w = matmul_flops(i, b, o)  # x.T (d_in, batch) @ grad_y (batch, d_out)
    total = grad_w
    if need_x:
        total += matmul_flops(b, o, i)  # grad_y (batch, d_out) @ W.T (d_out, d_in)
    return total


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
    b = _size(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    widths = []
    for j, w in enumerate(dims):
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise TypeError(f"dims[{j}] must be an int, got {type(w).__name__}")
        if w < 1:
            raise ValueError(f"dims[{j}] must be >= 1, got {w}")
        widths.append(int(w))
    if len(widths) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(widths)}")
    first_needs = _flag(input_requires_grad, "input_requires_grad")
    fwd = 0
    bwd = 0
    for j in range(len(widths) - 1):
        fwd += linear_forward_flops(b, widths[j], widths[j + 1])
        bwd += linear_backward_flops(b, widths[j], widths[j + 1], first_needs if j == 0 else True)
    return FlopCount(forward=fwd, backward=bwd, total=fwd + bwd)


def training_flops(num_params: float, num_tokens: float) -> float:
    """FLOPs of training ``num_params`` parameters on ``num_tokens`` tokens
    (forward and backward), the usual 6NT estimate.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: an argument is negative or not finite.
    """
    n = _real(num_params, "num_params")
    t = _real(num_tokens, "num_tokens")
    if n < 0:
        raise ValueError(f"num_params must be >= 0, got {num_params!r}")
    if t < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens!r}")
    per_token = 2.0 * n + 4.0 * n  # forward + backward
    return per_token * t


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Model FLOPs utilisation: ``model_flops`` done in ``seconds``, as a
    fraction of ``peak_flops_per_second``.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: ``model_flops < 0``, ``seconds <= 0`` or
            ``peak_flops_per_second <= 0``, or an argument is not finite.
    """
    f = _real(model_flops, "model_flops")
    s = _real(seconds, "seconds")
    p = _real(peak_flops_per_second, "peak_flops_per_second")
    if f < 0:
        raise ValueError(f"model_flops must be >= 0, got {model_flops!r}")
    if s <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    if p <= 0:
        raise ValueError(f"peak_flops_per_second must be > 0, got {peak_flops_per_second!r}")
    achieved = f / s
    return achieved / p


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
            ``mfu`` not in (0, 1], or a negative count.
    """
    n = _real(num_params, "num_params")
    t = _real(num_tokens, "num_tokens")
    if isinstance(num_devices, bool) or not isinstance(num_devices, numbers.Integral):
        raise TypeError(f"num_devices must be an int, got {type(num_devices).__name__}")
    p = _real(peak_flops_per_second, "peak_flops_per_second")
    u = _real(mfu, "mfu")
    if n < 0:
        raise ValueError(f"num_params must be >= 0, got {num_params!r}")
    if t < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens!r}")
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if p <= 0:
        raise ValueError(f"peak_flops_per_second must be > 0, got {peak_flops_per_second!r}")
    if not (0 < u <= 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    work = training_flops(n, t)
    rate = int(num_devices) * p * u  # FLOP/s actually delivered
    seconds = work / rate
    return seconds / SECONDS_PER_DAY

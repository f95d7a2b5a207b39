"""Handout §3.1: FLOPs of matmuls, linear layers and MLPs; training cost and MFU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real


@dataclass(frozen=True)
class FlopCount:
    """Forward, backward and total FLOPs."""

    forward: int
    backward: int
    total: int


def _int(n, name, lo=0):
    """Validate an int >= lo."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < lo:
        raise ValueError(f"{name} must be >= {lo}, got {n}")
    return n


def _flag(b, name):
    """Validate a bool."""
    if not isinstance(b, bool):
        raise TypeError(f"{name} must be a bool, got {type(b).__name__}")
    return b


def _num(x, name, pos=False):
    """Validate a finite non-negative (or positive) real."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    if (not isinstance(x, int) and not math.isfinite(x)) or x < 0 or (pos and x == 0):
        raise ValueError(f"{name} must be finite and {'> 0' if pos else '>= 0'}, got {x!r}")
    return x


def matmul_flops(m: int, k: int, n: int) -> int:
    """2mkn."""
    return 2 * _int(m, "m") * _int(k, "k") * _int(n, "n")


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """One matmul."""
    return matmul_flops(_int(batch, "batch"), _int(d_in, "d_in"), _int(d_out, "d_out"))


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """Weight grad, plus input grad when needed."""
    f = linear_forward_flops(batch, d_in, d_out)
    return f * (1 + _flag(input_requires_grad, "input_requires_grad"))


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """FLOPs of a bias-free MLP."""
    _int(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    ds = [_int(d, "dims", 1) for d in dims]
    _flag(input_requires_grad, "input_requires_grad")
    if len(ds) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(ds)}")
    pairs = list(zip(ds, ds[1:]))
    fw = sum(linear_forward_flops(batch, a, b) for a, b in pairs)
    bw = sum(linear_backward_flops(batch, a, b, i > 0 or input_requires_grad) for i, (a, b) in enumerate(pairs))
    return FlopCount(fw, bw, fw + bw)


def training_flops(num_params: float, num_tokens: float) -> float:
    """6NT."""
    return float(6 * _num(num_params, "num_params") * _num(num_tokens, "num_tokens"))


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Achieved FLOP/s over peak."""
    f, s = _num(model_flops, "model_flops"), _num(seconds, "seconds", True)
    return float(f / s / _num(peak_flops_per_second, "peak_flops_per_second", True))


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days of a training run."""
    f = training_flops(num_params, num_tokens)
    n, p, u = _int(num_devices, "num_devices", 1), _num(peak_flops_per_second, "peak_flops_per_second", True), _num(mfu, "mfu", True)
    if u > 1:
        raise ValueError(f"mfu must be in (0, 1], got {u!r}")
    return float(f / (n * p * u) / 86400)

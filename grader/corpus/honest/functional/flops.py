"""FLOP formulas for matmuls, linear layers and MLPs; 6NT, MFU and wall time."""

from __future__ import annotations

import itertools
import math
import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class FlopCount:
    """Forward, backward and total FLOPs."""

    forward: int
    backward: int
    total: int


def _int(value: object, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return as_float


def _at_least(value: float, name: str, positive: bool) -> float:
    ok = value > 0 if positive else value >= 0
    if not ok:
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def matmul_flops(m: int, k: int, n: int) -> int:
    """2mkn: one multiply and one add per term of every dot product."""
    sizes = map(_int, (m, k, n), ("m", "k", "n"))
    return reduce(operator.mul, sizes, 2)


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """Forward FLOPs of x @ W."""
    return matmul_flops(_int(batch, "batch"), _int(d_in, "d_in"), _int(d_out, "d_out"))


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """Weight gradient always, input gradient only when needed."""
    forward = linear_forward_flops(batch, d_in, d_out)
    return forward * (2 if _flag(input_requires_grad, "input_requires_grad") else 1)


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """Forward and backward FLOPs of a bias-free MLP."""
    rows = _int(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    widths = tuple(map(lambda d: _int(d, "dims", low=1), dims))
    first_needs_grad = _flag(input_requires_grad, "input_requires_grad")
    if len(widths) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(widths)}")
    layers = tuple(itertools.pairwise(widths))
    # only the first layer's input may skip its gradient
    needs_grad = itertools.chain((first_needs_grad,), itertools.repeat(True))
    forward = sum(itertools.starmap(lambda a, b: linear_forward_flops(rows, a, b), layers))
    backward = sum(map(lambda ab, g: linear_backward_flops(rows, *ab, g), layers, needs_grad))
    return FlopCount(forward=forward, backward=backward, total=forward + backward)


def training_flops(num_params: float, num_tokens: float) -> float:
    """The 6NT estimate of training compute."""
    n = _at_least(_real(num_params, "num_params"), "num_params", positive=False)
    t = _at_least(_real(num_tokens, "num_tokens"), "num_tokens", positive=False)
    return float(6.0 * n * t)


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Achieved model FLOP/s as a fraction of peak."""
    work = _at_least(_real(model_flops, "model_flops"), "model_flops", positive=False)
    wall = _at_least(_real(seconds, "seconds"), "seconds", positive=True)
    peak = _at_least(_real(peak_flops_per_second, "peak_flops_per_second"), "peak_flops_per_second", positive=True)
    return float(work / wall / peak)


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days to train at a given utilisation."""
    devices = _int(num_devices, "num_devices", low=1)
    peak = _at_least(_real(peak_flops_per_second, "peak_flops_per_second"), "peak_flops_per_second", positive=True)
    util = _real(mfu, "mfu")
    if not 0 < util <= 1:
        raise ValueError(f"mfu must lie in (0, 1], got {mfu!r}")
    work = training_flops(num_params, num_tokens)
    return float(work / (devices * peak * util) / SECONDS_PER_DAY)

"""Handout §3.1: FLOP counts, training cost and MFU."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlopCount:
    forward: int
    backward: int
    total: int


def matmul_flops(m: int, k: int, n: int) -> int:
    for name, v in (("m", m), ("k", k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return 2 * m * k * n


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    for name, v in (("batch", batch), ("d_in", d_in), ("d_out", d_out)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return 2 * batch * d_in * d_out


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    for name, v in (("batch", batch), ("d_in", d_in), ("d_out", d_out)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if not isinstance(input_requires_grad, bool):
        raise TypeError(f"input_requires_grad must be a bool, got {type(input_requires_grad).__name__}")
    x = 2 * batch * d_in * d_out
    return 2 * x if input_requires_grad else x


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise TypeError(f"batch must be an int, got {type(batch).__name__}")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    if not isinstance(input_requires_grad, bool):
        raise TypeError(f"input_requires_grad must be a bool, got {type(input_requires_grad).__name__}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"dims entries must be ints, got {d!r}")
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    for d in dims:
        if d < 1:
            raise ValueError(f"dims entries must be >= 1, got {d}")
    if len(dims) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(dims)}")
    fwd = 0
    bwd = 0
    for i in range(len(dims) - 1):
        tmp = 2 * batch * dims[i] * dims[i + 1]
        fwd += tmp
        if i == 0 and not input_requires_grad:
            bwd += tmp
        else:
            bwd += 2 * tmp
    return FlopCount(fwd, bwd, fwd + bwd)


def training_flops(num_params: float, num_tokens: float) -> float:
    for name, v in (("num_params", num_params), ("num_tokens", num_tokens)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not isinstance(v, numbers.Integral) and not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return float(6 * float(num_params) * float(num_tokens))


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    for name, v in (("model_flops", model_flops), ("seconds", seconds), ("peak_flops_per_second", peak_flops_per_second)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not isinstance(v, numbers.Integral) and not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")
    if model_flops < 0:
        raise ValueError(f"model_flops must be >= 0, got {model_flops}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    if peak_flops_per_second <= 0:
        raise ValueError(f"peak_flops_per_second must be > 0, got {peak_flops_per_second}")
    return float(float(model_flops) / float(seconds) / float(peak_flops_per_second))


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    if isinstance(num_devices, bool) or not isinstance(num_devices, int):
        raise TypeError(f"num_devices must be an int, got {type(num_devices).__name__}")
    for name, v in (("num_params", num_params), ("num_tokens", num_tokens),
                    ("peak_flops_per_second", peak_flops_per_second), ("mfu", mfu)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not isinstance(v, numbers.Integral) and not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")
    if num_params < 0:
        raise ValueError(f"num_params must be >= 0, got {num_params}")
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if peak_flops_per_second <= 0:
        raise ValueError(f"peak_flops_per_second must be > 0, got {peak_flops_per_second}")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    total = 6 * float(num_params) * float(num_tokens)
    rate = num_devices * float(peak_flops_per_second) * float(mfu)
    return float(total / rate / 86400.0)

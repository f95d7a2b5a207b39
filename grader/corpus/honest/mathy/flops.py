"""§3.1  FLOPs, the 6NT rule and MFU.

    (m,k)@(k,n):        2 m k n
    linear forward:     2 B D K
    linear backward:    2 B D K  (dW)  +  2 B D K  (dX, only if X needs a gradient)
    training:           C = 6 N T
    MFU:                (C / t) / P
    days:               C / (n P u) / 86400
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class FlopCount:
    """FLOPs (forward, backward, forward + backward)."""

    forward: int
    backward: int
    total: int


def natural(n: object, name: str, least: int = 0) -> int:
    """n in Z with n >= least, or TypeError / ValueError naming it."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < least:
        raise ValueError(f"{name} must be >= {least}, got {n}")
    return int(n)


def real(x: object, name: str) -> float:
    """x in R finite, as a float, or TypeError / ValueError naming it."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    try:
        r = float(x)
    except OverflowError:
        raise ValueError(f"{name} is too large to be a finite float") from None
    if not math.isfinite(r):
        raise ValueError(f"{name} must be finite, got {x}")
    return r


def nonnegative(x: object, name: str) -> float:
    r = real(x, name)
    if r < 0:
        raise ValueError(f"{name} must be >= 0, got {x}")
    return r


def positive(x: object, name: str) -> float:
    r = real(x, name)
    if r <= 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return r


def flag(b: object, name: str) -> bool:
    if not isinstance(b, bool):
        raise TypeError(f"{name} must be a bool, got {type(b).__name__}")
    return b


def matmul_flops(m: int, k: int, n: int) -> int:
    """2 m k n"""
    return 2 * natural(m, "m") * natural(k, "k") * natural(n, "n")


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """2 B D K"""
    return matmul_flops(natural(batch, "batch"), natural(d_in, "d_in"), natural(d_out, "d_out"))


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """(1 + [dX needed]) * 2 B D K"""
    B, D, K = natural(batch, "batch"), natural(d_in, "d_in"), natural(d_out, "d_out")
    return (1 + flag(input_requires_grad, "input_requires_grad")) * 2 * B * D * K


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """F = sum_l 2 B d_l d_{l+1};  Bw = sum_l (1 + [l > 0 or dX_0 needed]) 2 B d_l d_{l+1}."""
    B = natural(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    d = [natural(w, "dims", least=1) for w in dims]
    if len(d) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(d)}")
    r0 = flag(input_requires_grad, "input_requires_grad")
    F = sum(linear_forward_flops(B, a, b) for a, b in zip(d, d[1:]))
    Bw = sum(linear_backward_flops(B, a, b, l > 0 or r0) for l, (a, b) in enumerate(zip(d, d[1:])))
    return FlopCount(forward=F, backward=Bw, total=F + Bw)


def training_flops(num_params: float, num_tokens: float) -> float:
    """C = 6 N T"""
    N, T = nonnegative(num_params, "num_params"), nonnegative(num_tokens, "num_tokens")
    return 6.0 * N * T


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """u = (C / t) / P"""
    C = nonnegative(model_flops, "model_flops")
    t, P = positive(seconds, "seconds"), positive(peak_flops_per_second, "peak_flops_per_second")
    return C / t / P


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """days = 6 N T / (n P u) / 86400"""
    N, T = nonnegative(num_params, "num_params"), nonnegative(num_tokens, "num_tokens")
    n = natural(num_devices, "num_devices", least=1)
    P = positive(peak_flops_per_second, "peak_flops_per_second")
    u = positive(mfu, "mfu")
    if u > 1:
        raise ValueError(f"mfu must lie in (0, 1], got {mfu}")
    return 6.0 * N * T / (n * P * u) / SECONDS_PER_DAY

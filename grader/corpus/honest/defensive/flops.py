"""Handout §3.1: FLOP counts of matmuls, linear layers and MLPs; 6NT, MFU and training time."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

# Multiply + add per term of a dot product.
_FLOPS_PER_MULTIPLY_ADD = 2
# Training cost per parameter per token: 2 forward + 4 backward.
_TRAINING_FLOPS_PER_PARAMETER_TOKEN = 6
_SECONDS_PER_DAY = 24 * 60 * 60


@dataclass(frozen=True)
class FlopCount:
    """Forward and backward FLOPs of one pass; ``total`` is their sum."""

    forward: int
    backward: int
    total: int


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{name}' should be an int, received {type(value).__name__}")
    if value < 0:
        raise ValueError(f"'{name}' should be non-negative, received {value}")
    return value


def _require_positive_int(name: str, value: object) -> int:
    checked = _require_non_negative_int(name, value)
    if checked < 1:
        raise ValueError(f"'{name}' should be at least 1, received {checked}")
    return checked


def _require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"'{name}' should be a bool, received {type(value).__name__}")
    return value


def _require_finite_real(name: str, value: object) -> int | float:
    """Return ints unchanged (exact) and everything else as a finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"'{name}' should be a real number, received {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return int(value)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"'{name}' should be finite, received {as_float}")
    return as_float


def _require_non_negative_real(name: str, value: object) -> int | float:
    checked = _require_finite_real(name, value)
    if checked < 0:
        raise ValueError(f"'{name}' should be non-negative, received {checked}")
    return checked


def _require_positive_real(name: str, value: object) -> int | float:
    checked = _require_finite_real(name, value)
    if checked <= 0:
        raise ValueError(f"'{name}' should be positive, received {checked}")
    return checked


def _require_widths(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"'{name}' should be a sequence of ints, received {type(value).__name__}")
    widths = tuple(_require_positive_int(name, width) for width in value)
    if len(widths) < 2:
        raise ValueError(f"'{name}' should list at least 2 widths, received {len(widths)}")
    return widths


# --------------------------------------------------------------------------- #
# private steps
# --------------------------------------------------------------------------- #
def _matmul(m: int, k: int, n: int) -> int:
    return _FLOPS_PER_MULTIPLY_ADD * m * k * n


def _linear_backward(batch: int, d_in: int, d_out: int, needs_input_grad: bool) -> int:
    weight_gradient = _matmul(d_in, batch, d_out)
    input_gradient = _matmul(batch, d_out, d_in) if needs_input_grad else 0
    return weight_gradient + input_gradient


def _six_n_t(num_params: int | float, num_tokens: int | float) -> float:
    return float(_TRAINING_FLOPS_PER_PARAMETER_TOKEN * num_params * num_tokens)


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def matmul_flops(m: int, k: int, n: int) -> int:
    """2mkn for an (m, k) @ (k, n) product."""
    rows = _require_non_negative_int("m", m)
    inner = _require_non_negative_int("k", k)
    cols = _require_non_negative_int("n", n)
    return _matmul(rows, inner, cols)


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """Forward FLOPs of a bias-free linear layer on ``batch`` rows."""
    rows = _require_non_negative_int("batch", batch)
    fan_in = _require_non_negative_int("d_in", d_in)
    fan_out = _require_non_negative_int("d_out", d_out)
    return _matmul(rows, fan_in, fan_out)


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """Backward FLOPs: the weight gradient, plus the input gradient only when needed."""
    rows = _require_non_negative_int("batch", batch)
    fan_in = _require_non_negative_int("d_in", d_in)
    fan_out = _require_non_negative_int("d_out", d_out)
    needs_input_grad = _require_bool("input_requires_grad", input_requires_grad)
    return _linear_backward(rows, fan_in, fan_out, needs_input_grad)


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """Forward/backward FLOPs of a bias-free MLP; only the first layer may skip its input gradient."""
    rows = _require_non_negative_int("batch", batch)
    widths = _require_widths("dims", dims)
    needs_first_input_grad = _require_bool("input_requires_grad", input_requires_grad)

    forward = 0
    backward = 0
    for layer_index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        needs_input_grad = needs_first_input_grad if layer_index == 0 else True
        forward += _matmul(rows, fan_in, fan_out)
        backward += _linear_backward(rows, fan_in, fan_out, needs_input_grad)
    return FlopCount(forward=forward, backward=backward, total=forward + backward)


def training_flops(num_params: float, num_tokens: float) -> float:
    """The 6NT estimate of training compute."""
    params = _require_non_negative_real("num_params", num_params)
    tokens = _require_non_negative_real("num_tokens", num_tokens)
    return _six_n_t(params, tokens)


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Achieved model FLOP/s as a fraction of the hardware peak."""
    work = _require_non_negative_real("model_flops", model_flops)
    elapsed = _require_positive_real("seconds", seconds)
    peak = _require_positive_real("peak_flops_per_second", peak_flops_per_second)
    return float(work / elapsed / peak)


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days for a 6NT run on ``num_devices`` devices at utilisation ``mfu``."""
    params = _require_non_negative_real("num_params", num_params)
    tokens = _require_non_negative_real("num_tokens", num_tokens)
    devices = _require_positive_int("num_devices", num_devices)
    peak = _require_positive_real("peak_flops_per_second", peak_flops_per_second)
    utilisation = _require_positive_real("mfu", mfu)
    if utilisation > 1:
        raise ValueError(f"'mfu' should lie in (0, 1], received {utilisation}")

    delivered_per_second = devices * peak * utilisation
    seconds = _six_n_t(params, tokens) / delivered_per_second
    return float(seconds / _SECONDS_PER_DAY)

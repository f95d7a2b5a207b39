"""Handout §3.1: counting FLOPs of matmuls, linear layers and MLPs, plus MFU and training time."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

SECONDS_PER_DAY = 24 * 60 * 60


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs, backward FLOPs and their sum."""

    forward: int
    backward: int
    total: int


def _check_size(value, argument_name: str) -> int:
    """A size must be a non-negative int (and not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argument_name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{argument_name} must not be negative, got {value}")
    return int(value)


def _check_flag(value, argument_name: str) -> bool:
    """A flag must be a real bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{argument_name} must be a bool, got {type(value).__name__}")
    return value


def _check_real(value, argument_name: str) -> float:
    """A real number that is finite (bools refused); returned as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument_name} must be a real number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        # Ints are always finite; very large ones may not fit in a float.
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{argument_name} is too large to be finite as a float") from None
    value_as_float = float(value)
    if not math.isfinite(value_as_float):
        raise ValueError(f"{argument_name} must be finite, got {value!r}")
    return value_as_float


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m, k) @ (k, n) product: m*n dot products of length k, 2 FLOPs per term."""
    rows = _check_size(m, "m")
    inner = _check_size(k, "k")
    columns = _check_size(n, "n")
    return 2 * rows * inner * columns


def linear_forward_flops(batch: int, d_in: int, d_out: int) -> int:
    """Forward FLOPs of x @ W with x (batch, d_in), W (d_in, d_out)."""
    batch_size = _check_size(batch, "batch")
    input_width = _check_size(d_in, "d_in")
    output_width = _check_size(d_out, "d_out")
    # One matmul: (batch, d_in) @ (d_in, d_out).
    return matmul_flops(batch_size, input_width, output_width)


def linear_backward_flops(batch: int, d_in: int, d_out: int, input_requires_grad: bool = True) -> int:
    """Backward FLOPs: the weight gradient always, the input gradient only when it is needed."""
    batch_size = _check_size(batch, "batch")
    input_width = _check_size(d_in, "d_in")
    output_width = _check_size(d_out, "d_out")
    needs_input_gradient = _check_flag(input_requires_grad, "input_requires_grad")
    # Weight gradient: x.T @ grad_y, a (d_in, batch) @ (batch, d_out) product.
    backward_total = matmul_flops(input_width, batch_size, output_width)
    # Input gradient: grad_y @ W.T, a (batch, d_out) @ (d_out, d_in) product.
    if needs_input_gradient:
        backward_total = backward_total + matmul_flops(batch_size, output_width, input_width)
    return backward_total


def mlp_flops(batch: int, dims: Sequence[int], input_requires_grad: bool = False) -> FlopCount:
    """Forward and backward FLOPs of a bias-free MLP with the given widths."""
    # Step 1: check the arguments.
    batch_size = _check_size(batch, "batch")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    layer_widths = []
    for width in dims:
        if isinstance(width, bool) or not isinstance(width, numbers.Integral):
            raise TypeError(f"dims must hold ints, got {width!r}")
        if width < 1:
            raise ValueError(f"every width in dims must be at least 1, got {width}")
        layer_widths.append(int(width))
    if len(layer_widths) < 2:
        raise ValueError(f"dims needs at least 2 widths, got {len(layer_widths)}")
    first_input_needs_gradient = _check_flag(input_requires_grad, "input_requires_grad")
    # Step 2: go through the layers one by one.
    forward_total = 0
    backward_total = 0
    for layer_number in range(len(layer_widths) - 1):
        input_width = layer_widths[layer_number]
        output_width = layer_widths[layer_number + 1]
        forward_total = forward_total + linear_forward_flops(batch_size, input_width, output_width)
        # Only the first layer's input may skip its gradient; later inputs always need one.
        if layer_number == 0:
            this_input_needs_gradient = first_input_needs_gradient
        else:
            this_input_needs_gradient = True
        backward_total = backward_total + linear_backward_flops(
            batch_size, input_width, output_width, this_input_needs_gradient
        )
    return FlopCount(forward=forward_total, backward=backward_total, total=forward_total + backward_total)


def training_flops(num_params: float, num_tokens: float) -> float:
    """The 6NT estimate: 2 FLOPs per parameter per token forward, 4 backward."""
    parameters = _check_real(num_params, "num_params")
    tokens = _check_real(num_tokens, "num_tokens")
    if parameters < 0:
        raise ValueError(f"num_params must not be negative, got {num_params!r}")
    if tokens < 0:
        raise ValueError(f"num_tokens must not be negative, got {num_tokens!r}")
    # When both are ints, multiply exactly first and round only once at the end.
    if isinstance(num_params, numbers.Integral) and isinstance(num_tokens, numbers.Integral):
        return float(6 * int(num_params) * int(num_tokens))
    return float(6.0 * parameters * tokens)


def mfu(model_flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Achieved FLOP/s divided by the hardware's peak FLOP/s."""
    flops_done = _check_real(model_flops, "model_flops")
    elapsed_seconds = _check_real(seconds, "seconds")
    peak_rate = _check_real(peak_flops_per_second, "peak_flops_per_second")
    if flops_done < 0:
        raise ValueError(f"model_flops must not be negative, got {model_flops!r}")
    if elapsed_seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    if peak_rate <= 0:
        raise ValueError(f"peak_flops_per_second must be positive, got {peak_flops_per_second!r}")
    achieved_rate = flops_done / elapsed_seconds
    return float(achieved_rate / peak_rate)


def training_days(
    num_params: float, num_tokens: float, num_devices: int, peak_flops_per_second: float, mfu: float
) -> float:
    """Wall-clock days to train with 6NT FLOPs on many devices at a given MFU."""
    # Step 1: check every argument.
    parameters = _check_real(num_params, "num_params")
    tokens = _check_real(num_tokens, "num_tokens")
    if isinstance(num_devices, bool) or not isinstance(num_devices, numbers.Integral):
        raise TypeError(f"num_devices must be an int, got {type(num_devices).__name__}")
    peak_rate = _check_real(peak_flops_per_second, "peak_flops_per_second")
    utilisation = _check_real(mfu, "mfu")
    if parameters < 0:
        raise ValueError(f"num_params must not be negative, got {num_params!r}")
    if tokens < 0:
        raise ValueError(f"num_tokens must not be negative, got {num_tokens!r}")
    if num_devices < 1:
        raise ValueError(f"num_devices must be at least 1, got {num_devices}")
    if peak_rate <= 0:
        raise ValueError(f"peak_flops_per_second must be positive, got {peak_flops_per_second!r}")
    if not (0 < utilisation <= 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    # Step 2: total FLOPs needed, and FLOP/s the whole cluster really delivers.
    total_flops_needed = training_flops(parameters, tokens)
    delivered_rate = int(num_devices) * peak_rate * utilisation
    # Step 3: seconds, then days.
    seconds_needed = total_flops_needed / delivered_rate
    return float(seconds_needed / SECONDS_PER_DAY)

"""Handout §1.3: training memory in bytes."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from .precision import bytes_per_element


@dataclass(frozen=True)
class MemoryBreakdown:
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


_STATE = {"sgd": 0, "sgd_momentum": 1, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}


def count_parameters(model: nn.Module) -> int:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    n = 0
    for p in model.parameters():
        n += p.numel()
    return int(n)


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    if isinstance(num_params, bool) or not isinstance(num_params, int):
        raise TypeError(f"num_params must be an int, got {type(num_params).__name__}")
    if optimizer_name not in _STATE:
        raise ValueError(f"unknown optimizer_name {optimizer_name!r}, expected one of {sorted(_STATE)}")
    if num_params < 0:
        raise ValueError(f"num_params must be >= 0, got {num_params}")
    return _STATE[optimizer_name] * num_params


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    if isinstance(num_params, bool) or not isinstance(num_params, int):
        raise TypeError(f"num_params must be an int, got {type(num_params).__name__}")
    if isinstance(num_activations, bool) or not isinstance(num_activations, int):
        raise TypeError(f"num_activations must be an int, got {type(num_activations).__name__}")
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    if not isinstance(param_dtype, torch.dtype):
        raise TypeError(f"param_dtype must be a torch.dtype, got {type(param_dtype).__name__}")
    if not isinstance(activation_dtype, torch.dtype):
        raise TypeError(f"activation_dtype must be a torch.dtype, got {type(activation_dtype).__name__}")
    if num_params < 0:
        raise ValueError(f"num_params must be >= 0, got {num_params}")
    if num_activations < 0:
        raise ValueError(f"num_activations must be >= 0, got {num_activations}")
    if optimizer_name not in _STATE:
        raise ValueError(f"unknown optimizer_name {optimizer_name!r}, expected one of {sorted(_STATE)}")
    try:
        pb = bytes_per_element(param_dtype)
    except ValueError:
        raise ValueError(f"param_dtype {param_dtype} is not supported") from None
    try:
        ab = bytes_per_element(activation_dtype)
    except ValueError:
        raise ValueError(f"activation_dtype {activation_dtype} is not supported") from None
    p = num_params * pb
    g = num_params * pb
    s = _STATE[optimizer_name] * num_params * pb
    a = num_activations * ab
    return MemoryBreakdown(p, g, s, a, p + g + s + a)


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, numbers.Real):
        raise TypeError(f"memory_bytes must be a number, got {type(memory_bytes).__name__}")
    if isinstance(bytes_per_parameter, bool) or not isinstance(bytes_per_parameter, numbers.Real):
        raise TypeError(f"bytes_per_parameter must be a number, got {type(bytes_per_parameter).__name__}")
    m = memory_bytes if isinstance(memory_bytes, numbers.Rational) else float(memory_bytes)
    per = bytes_per_parameter if isinstance(bytes_per_parameter, numbers.Rational) else float(bytes_per_parameter)
    if isinstance(m, float) and not math.isfinite(m):
        raise ValueError(f"memory_bytes must be finite, got {m}")
    if isinstance(per, float) and not math.isfinite(per):
        raise ValueError(f"bytes_per_parameter must be finite, got {per}")
    if m < 0:
        raise ValueError(f"memory_bytes must be >= 0, got {m}")
    if per <= 0:
        raise ValueError(f"bytes_per_parameter must be > 0, got {per}")
    return int(math.floor(Fraction(m) / Fraction(per)))

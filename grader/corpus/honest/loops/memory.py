"""Handout §1.3: bytes of parameters, gradients, optimizer state and activations."""

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
    """Training memory split by kind, in bytes, plus the total."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


# How many floats of state each optimizer keeps per parameter.
STATE_FLOATS_PER_PARAMETER = {
    "sgd": 0,
    "sgd_momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


def _check_count(value, argument_name: str) -> int:
    """Check that a count is a non-negative int (bools refused) and return it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argument_name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{argument_name} must not be negative, got {value}")
    return int(value)


def count_parameters(model: nn.Module) -> int:
    """Total number of scalar parameters (shared parameters counted once)."""
    # Step 1: check the argument.
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    # Step 2: parameters() already skips duplicates, so just add up their sizes.
    total_number_of_values = 0
    for parameter in model.parameters():
        total_number_of_values = total_number_of_values + parameter.numel()
    return total_number_of_values


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Floats of per-parameter state the named optimizer keeps."""
    # Step 1: check the name.
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    if optimizer_name not in STATE_FLOATS_PER_PARAMETER:
        known_names = ", ".join(STATE_FLOATS_PER_PARAMETER)
        raise ValueError(f"optimizer_name {optimizer_name!r} is unknown (known: {known_names})")
    # Step 2: check the count.
    number_of_parameters = _check_count(num_params, "num_params")
    # Step 3: floats per parameter times parameters.
    return STATE_FLOATS_PER_PARAMETER[optimizer_name] * number_of_parameters


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes of parameters, gradients, optimizer state and saved activations."""
    # Step 1: check every argument.
    number_of_parameters = _check_count(num_params, "num_params")
    number_of_activations = _check_count(num_activations, "num_activations")
    if not isinstance(param_dtype, torch.dtype):
        raise TypeError(f"param_dtype must be a torch.dtype, got {type(param_dtype).__name__}")
    if not isinstance(activation_dtype, torch.dtype):
        raise TypeError(f"activation_dtype must be a torch.dtype, got {type(activation_dtype).__name__}")
    state_floats = optimizer_state_floats(optimizer_name, number_of_parameters)
    # Step 2: bytes per element of both dtypes (re-raised with the argument's name).
    try:
        bytes_per_parameter_value = bytes_per_element(param_dtype)
    except ValueError as error:
        raise ValueError(f"param_dtype: {error}") from None
    try:
        bytes_per_activation_value = bytes_per_element(activation_dtype)
    except ValueError as error:
        raise ValueError(f"activation_dtype: {error}") from None
    # Step 3: parameters and gradients have the same size, the state is counted in floats.
    parameter_bytes = number_of_parameters * bytes_per_parameter_value
    gradient_bytes = number_of_parameters * bytes_per_parameter_value
    optimizer_state_bytes = state_floats * bytes_per_parameter_value
    activation_bytes = number_of_activations * bytes_per_activation_value
    # Step 4: add them all up.
    total_bytes = parameter_bytes + gradient_bytes + optimizer_state_bytes + activation_bytes
    return MemoryBreakdown(
        parameters=parameter_bytes,
        gradients=gradient_bytes,
        optimizer_state=optimizer_state_bytes,
        activations=activation_bytes,
        total=total_bytes,
    )


def _exact_number(value, argument_name: str) -> Fraction:
    """Turn an int or float argument into the exact Fraction it holds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument_name} must be a number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    value_as_float = float(value)
    if not math.isfinite(value_as_float):
        raise ValueError(f"{argument_name} must be finite, got {value!r}")
    return Fraction(value_as_float)


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """Largest whole number of parameters that fits in the memory (exact floor)."""
    # Step 1: read both arguments exactly.
    exact_memory = _exact_number(memory_bytes, "memory_bytes")
    exact_bytes_per_parameter = _exact_number(bytes_per_parameter, "bytes_per_parameter")
    # Step 2: check their ranges.
    if exact_memory < 0:
        raise ValueError(f"memory_bytes must not be negative, got {memory_bytes!r}")
    if exact_bytes_per_parameter <= 0:
        raise ValueError(f"bytes_per_parameter must be positive, got {bytes_per_parameter!r}")
    # Step 3: floor of the exact quotient, as a Python int.
    return int(math.floor(exact_memory / exact_bytes_per_parameter))

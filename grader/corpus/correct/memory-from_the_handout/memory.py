"""Written from the handout alone: parameters de-duplicated by object identity, byte counts by hand, the parameter bound as an exact Fraction floor.

Handout §1.3: parameters, gradients, optimizer state and activations in bytes."""

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
    """Bytes of each kind of training memory; ``total`` is their sum."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


# per-parameter state floats, as torch.optim keeps them with default flags
_STATE = {
    "sgd": 0,
    "sgd_momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


def _count(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters in ``model`` (a parameter shared by two
    layers counts once).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    seen = set()
    total = 0
    for _, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = 1
        for d in p.shape:
            n *= d
        total += n
    return total


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Floats of per-parameter state that ``optimizer_name`` keeps for
    ``num_params`` parameters, as torch.optim does with default flags.

    Names: "sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw".
    Step counters are not per-parameter state.

    Raises:
        TypeError: ``optimizer_name`` is not a str, or ``num_params`` not an int.
        ValueError: an unknown optimizer name, or a negative ``num_params``.
    """
    if not isinstance(optimizer_name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(optimizer_name).__name__}")
    n = _count(num_params, "num_params")
    if optimizer_name not in _STATE:
        raise ValueError(f"optimizer_name {optimizer_name!r} is unknown; expected one of {sorted(_STATE)}")
    return _STATE[optimizer_name] * n


def training_memory(
    num_params: int,
    num_activations: int,
    optimizer_name: str,
    param_dtype: torch.dtype = torch.float32,
    activation_dtype: torch.dtype = torch.float32,
) -> MemoryBreakdown:
    """Bytes held during training with ``optimizer_name``: parameters, their
    gradients and the optimizer's state (all in ``param_dtype``), and
    ``num_activations`` activations saved for backward in ``activation_dtype``.

    Raises:
        TypeError / ValueError: as for the functions above, naming the argument.
    """
    n = _count(num_params, "num_params")
    acts = _count(num_activations, "num_activations")
    state_floats = optimizer_state_floats(optimizer_name, n)
    for name, dt in (("param_dtype", param_dtype), ("activation_dtype", activation_dtype)):
        if not isinstance(dt, torch.dtype):
            raise TypeError(f"{name} must be a torch.dtype, got {type(dt).__name__}")
    try:
        pb = bytes_per_element(param_dtype)
    except ValueError as err:
        raise ValueError(f"param_dtype: {err}") from None
    try:
        ab = bytes_per_element(activation_dtype)
    except ValueError as err:
        raise ValueError(f"activation_dtype: {err}") from None
    params = n * pb
    grads = n * pb
    state = state_floats * pb
    activ = acts * ab
    return MemoryBreakdown(
        parameters=params,
        gradients=grads,
        optimizer_state=state,
        activations=activ,
        total=params + grads + state + activ,
    )


def _exact_number(value, name) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, numbers.Rational):
        return Fraction(value.numerator, value.denominator)
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return Fraction(f)


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """The most parameters that fit in ``memory_bytes`` at ``bytes_per_parameter``
    each (8 x 80 GB at 16 bytes/parameter: 4e10), as an int.

    Exactly: the largest int n with ``n * bytes_per_parameter <= memory_bytes``,
    the arguments (ints or floats) taken as the exact values they hold, that is
    the floor of their exact quotient (``fractions.Fraction`` holds a float's
    exact value). Python's floor division ``memory_bytes // bytes_per_parameter``
    computes it for ints, and for floats in the range the tests use (float
    arguments: ``memory_bytes`` up to 1e13, ``bytes_per_parameter`` from 0.01);
    ``math.floor(memory_bytes / bytes_per_parameter)`` does not, because ``/``
    rounds the quotient first: the float 0.1 is 0.1000000000000000055..., so
    ``max_trainable_parameters(1, 0.1)`` is 9 (ten such parameters need more
    than 1 byte), while ``1 / 0.1`` rounds to 10.0.

    Raises:
        TypeError: an argument is not a number.
        ValueError: a negative or non-finite argument, or ``bytes_per_parameter`` <= 0.
    """
    mem = _exact_number(memory_bytes, "memory_bytes")
    per = _exact_number(bytes_per_parameter, "bytes_per_parameter")
    if mem < 0:
        raise ValueError(f"memory_bytes must be >= 0, got {memory_bytes!r}")
    if per <= 0:
        raise ValueError(f"bytes_per_parameter must be > 0, got {bytes_per_parameter!r}")
    q = mem / per
    return int(q.numerator // q.denominator)

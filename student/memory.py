"""Handout §1.3: parameters, gradients, optimizer state and activations in bytes.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of each kind of training memory; ``total`` is their sum."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    total: int


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters in ``model`` (a parameter shared by two
    layers counts once).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    raise NotImplementedError("count_parameters: see handout §1.3")


def optimizer_state_floats(optimizer_name: str, num_params: int) -> int:
    """Floats of per-parameter state that ``optimizer_name`` keeps for
    ``num_params`` parameters, as torch.optim does with default flags.

    Names: "sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw".
    Step counters are not per-parameter state.

    Raises:
        TypeError: ``optimizer_name`` is not a str, or ``num_params`` not an int.
        ValueError: an unknown optimizer name, or a negative ``num_params``.
    """
    raise NotImplementedError("optimizer_state_floats: see handout §1.3")


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
    raise NotImplementedError("training_memory: see handout §1.3")


def max_trainable_parameters(memory_bytes: int | float, bytes_per_parameter: int | float) -> int:
    """The most parameters that fit in ``memory_bytes`` at ``bytes_per_parameter``
    each (8 x 80 GB at 16 bytes/parameter: 4e10), as an int.

    Exactly: the largest int n with ``n * bytes_per_parameter <= memory_bytes``,
    the arguments (ints or floats) taken as the exact values they hold, that is
    the floor of their exact quotient, for every finite argument
    (``fractions.Fraction`` holds a float's exact value).
    ``math.floor(memory_bytes / bytes_per_parameter)`` is wrong because ``/``
    rounds the quotient first: the float 0.1 is 0.1000000000000000055..., so
    ``max_trainable_parameters(1, 0.1)`` is 9 (ten such parameters need more
    than 1 byte), while ``1 / 0.1`` rounds to 10.0. Python's floor division
    ``memory_bytes // bytes_per_parameter`` floors the exact quotient, but for
    floats it returns a float, which cannot hold every integer past 2**53:
    ``max_trainable_parameters(1e20, 3.0)`` is 33333333333333333333, and
    ``int(1e20 // 3.0)`` is 1365 short of it.

    Raises:
        TypeError: an argument is not a number.
        ValueError: a negative or non-finite argument, or ``bytes_per_parameter`` <= 0.
    """
    raise NotImplementedError("max_trainable_parameters: see handout §1.3")

"""Handout §3.2: Xavier-style initialisation, a bias-free Linear, the Cruncher model, seeding."""

from __future__ import annotations

import math
import numbers
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn


def _check_positive_int(value, argument_name: str, smallest_allowed: int) -> int:
    """Check an int argument (bools refused) against its smallest allowed value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argument_name} must be an int, got {type(value).__name__}")
    if value < smallest_allowed:
        raise ValueError(f"{argument_name} must be at least {smallest_allowed}, got {value}")
    return int(value)


def _check_generator(generator) -> None:
    """The generator must be None or a torch.Generator."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """Float32 weights of shape (d_in, d_out), normal with std 1/sqrt(d_in), cut at 3 std."""
    # Step 1: check the arguments.
    input_width = _check_positive_int(d_in, "d_in", 1)
    output_width = _check_positive_int(d_out, "d_out", 1)
    _check_generator(generator)
    # Step 2: std 1/sqrt(d_in) keeps the variance of the activations at 1.
    standard_deviation = 1.0 / math.sqrt(input_width)
    # Step 3: draw a truncated normal; the bounds are absolute, so scale them by the std.
    weights = torch.empty(input_width, output_width, dtype=torch.float32)
    nn.init.trunc_normal_(
        weights,
        mean=0.0,
        std=standard_deviation,
        a=-3.0 * standard_deviation,
        b=3.0 * standard_deviation,
        generator=generator,
    )
    return weights


class Linear(nn.Module):
    """Bias-free linear layer: forward is ``x @ weight`` with weight of shape (d_in, d_out)."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        # The weight is registered as a parameter by assigning it as an attribute.
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator=generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        # Matrix product over the last dimension of x.
        return x @ self.weight


class Cruncher(nn.Module):
    """A stack of ``num_layers`` Linear(dim, dim) layers followed by Linear(dim, 1), squeezed."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        # Step 1: check the arguments (the generator is checked by xavier_init too).
        width = _check_positive_int(dim, "dim", 1)
        number_of_layers = _check_positive_int(num_layers, "num_layers", 0)
        _check_generator(generator)
        # Step 2: build the hidden layers in order, inside a ModuleList so they are registered.
        hidden_layers = []
        for layer_number in range(number_of_layers):
            hidden_layers.append(Linear(width, width, generator=generator))
        self.layers = nn.ModuleList(hidden_layers)
        # Step 3: the final layer maps to a single number, created last.
        self.final = Linear(width, 1, generator=generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        # Run the hidden layers one after the other.
        hidden = x
        for layer in self.layers:
            hidden = layer(hidden)
        # The final layer gives (..., 1); drop only that last dimension.
        output = self.final(hidden)
        return output.squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed Python's random, NumPy's global RNG and torch (CUDA included)."""
    # Step 1: check the seed (NumPy accepts 0 .. 2**32 - 1).
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0 or seed >= 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    seed_value = int(seed)
    # Step 2: seed each random number generator in turn.
    random.seed(seed_value)
    np.random.seed(seed_value)
    torch.manual_seed(seed_value)

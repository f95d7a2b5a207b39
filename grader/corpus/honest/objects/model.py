"""Handout §3.2: parameters, truncated Xavier initialisation, a deep linear net, seeding.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

# Cut-off of the truncated normal, in standard deviations.
_TRUNCATION = 3.0


def _dimension(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """Draw a float32 weight matrix that keeps activation variance steady.

    Args:
        d_in: Fan-in; the std is 1/sqrt(d_in).
        d_out: Fan-out.
        generator: Source of randomness; torch's global one when None.

    Returns:
        A (d_in, d_out) tensor from a normal truncated (by redrawing) at
        three standard deviations.
    """
    rows = _dimension(d_in, "d_in", 1)
    cols = _dimension(d_out, "d_out", 1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    std = 1.0 / math.sqrt(rows)
    bound = _TRUNCATION * std
    weight = torch.empty(rows, cols, dtype=torch.float32)
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-bound, b=bound, generator=generator)
    return weight


class Linear(nn.Module):
    """Bias-free linear map ``x @ weight`` with weight stored as (d_in, d_out).

    Args:
        d_in: Input width.
        d_out: Output width.
        generator: Optional generator for the initial weights.
    """

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator=generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        """Apply the map to the last axis of ``x``.

        Args:
            x: Input with any leading axes.

        Returns:
            ``x @ weight``.
        """
        return x @ self.weight


class Cruncher(nn.Module):
    """A stack of square linear layers followed by a scalar read-out.

    Args:
        dim: Width of every hidden layer.
        num_layers: How many (dim, dim) layers precede the read-out.
        generator: Optional generator shared by all layers, used in order.
    """

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        width = _dimension(dim, "dim", 1)
        depth = _dimension(num_layers, "num_layers", 0)
        self.layers = nn.ModuleList(Linear(width, width, generator=generator) for _ in range(depth))
        self.final = Linear(width, 1, generator=generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        """Run every layer, then drop the read-out's size-1 axis.

        Args:
            x: Input of shape (..., dim).

        Returns:
            One value per input row, shape (...).
        """
        hidden = x
        for layer in self.layers:
            hidden = layer(hidden)
        return self.final(hidden).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators alike.

    Args:
        seed: An int in [0, 2**32).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must lie in [0, 2**32), got {seed}")
    seeders = (random.seed, np.random.seed, torch.manual_seed)
    for seeder in seeders:
        seeder(seed)

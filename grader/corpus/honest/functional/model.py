"""Xavier-style truncated-normal init, a bias-free Linear, a deep linear Cruncher, seeding."""

from __future__ import annotations

import math
import numbers
import random
from functools import reduce

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

TRUNCATE_AT = 3.0  # in standard deviations


def _int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _generator(generator: object) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    return generator


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """Truncated normal (d_in, d_out) weights with std 1/sqrt(d_in)."""
    rows, cols = _int(d_in, "d_in", 1), _int(d_out, "d_out", 1)
    source = _generator(generator)
    std = 1.0 / math.sqrt(rows)
    # the cut-offs are absolute, so they scale with std
    return nn.init.trunc_normal_(
        torch.empty(rows, cols, dtype=torch.float32),
        mean=0.0, std=std, a=-TRUNCATE_AT * std, b=TRUNCATE_AT * std, generator=source,
    )


class Linear(nn.Module):
    """Bias-free x @ weight with weight of shape (d_in, d_out)."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    """num_layers square Linears, then a Linear to one output, squeezed."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        width, depth = _int(dim, "dim", 1), _int(num_layers, "num_layers", 0)
        source = _generator(generator)
        self.layers = nn.ModuleList(Linear(width, width, source) for _ in range(depth))
        self.final = Linear(width, 1, source)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        hidden = reduce(lambda h, layer: layer(h), self.layers, x)
        return self.final(hidden).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed random, NumPy and torch (CUDA included) from one int."""
    value = _int(seed, "seed", 0)
    if value >= 2**32:
        raise ValueError(f"seed must be below 2**32, got {value}")
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)

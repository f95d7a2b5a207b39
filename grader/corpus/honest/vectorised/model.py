"""Handout §3.2: parameters, Xavier initialisation, a deep linear model, seeding."""

from __future__ import annotations

import math
import random
from functools import reduce

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn


def _int(n, name, lo):
    """Validate an int >= lo."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < lo:
        raise ValueError(f"{name} must be >= {lo}, got {n}")
    return n


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """Truncated normal (±3 std) with std 1/sqrt(d_in)."""
    for n, v in (("d_in", d_in), ("d_out", d_out)):
        _int(v, n, 1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    s = 1 / math.sqrt(d_in)
    return nn.init.trunc_normal_(torch.empty(d_in, d_out), std=s, a=-3 * s, b=3 * s, generator=generator)


class Linear(nn.Module):
    """Bias-free x @ weight."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    """num_layers square Linears, then a Linear to one output, squeezed."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        _int(dim, "dim", 1)
        _int(num_layers, "num_layers", 0)
        self.layers = nn.ModuleList(Linear(dim, dim, generator) for _ in range(num_layers))
        self.final = Linear(dim, 1, generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        return self.final(reduce(lambda h, f: f(h), self.layers, x)).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed random, NumPy and torch."""
    _int(seed, "seed", 0)
    if seed >= 2**32:
        raise ValueError(f"seed must be < 2**32, got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

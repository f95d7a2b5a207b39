"""Handout §3.2: parameters, Xavier initialisation, a deep linear model, seeding."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

from ._validate import require_int

__all__ = ["Cruncher", "Linear", "seed_everything", "xavier_init"]


def _require_generator(generator: torch.Generator | None) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """A float32 (d_in, d_out) weight drawn from a normal with std 1/sqrt(d_in),
    truncated at ±3 std, so that ``x @ w`` keeps the variance of ``x``. Draws
    from ``generator``, else from torch's global generator, which each call
    advances (two calls after one ``torch.manual_seed`` differ)."""
    d_in = require_int("d_in", d_in, minimum=1)
    d_out = require_int("d_out", d_out, minimum=1)
    std = 1 / math.sqrt(d_in)
    # The bounds scale with std: ±3 in absolute terms would be ±3·sqrt(d_in)
    # std, which truncates nothing once d_in is more than a few.
    weight = torch.empty(d_in, d_out)
    return nn.init.trunc_normal_(weight, std=std, a=-3 * std, b=3 * std, generator=_require_generator(generator))


class Linear(nn.Module):
    """A bias-free linear layer: ``x @ weight`` with ``weight`` of shape (d_in, d_out)."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    """``num_layers`` Linear(dim, dim) layers, then Linear(dim, 1), no
    nonlinearity and no bias: ``num_layers·dim² + dim`` parameters."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        dim = require_int("dim", dim, minimum=1)
        num_layers = require_int("num_layers", num_layers)
        self.layers = nn.ModuleList([Linear(dim, dim, generator) for _ in range(num_layers)])
        self.final = Linear(dim, 1, generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        for layer in self.layers:
            x = layer(x)
        # squeeze(-1), not squeeze(): a batch of one must stay a batch.
        return self.final(x).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (every device)."""
    seed = require_int("seed", seed)
    if seed >= 2**32:  # NumPy's legacy seeding takes 32 bits
        raise ValueError(f"seed must be < 2**32, got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

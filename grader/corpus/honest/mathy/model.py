"""§3.2  Xavier initialisation, a linear layer, a deep linear model, seeding.

    W_ij ~ N(0, sigma^2) truncated to [-3 sigma, 3 sigma],  sigma = 1/sqrt(d_in)

so Var(sum_i x_i W_ij) = d_in * sigma^2 ~ 1 and the variance survives depth.
Cruncher:  f(x) = squeeze(W_f^T W_L^T ... W_1^T x),  N = L d^2 + d parameters.
"""

from __future__ import annotations

import math
import numbers
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn


def natural(n: object, name: str, least: int) -> int:
    """n in Z with n >= least, or TypeError / ValueError naming it."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < least:
        raise ValueError(f"{name} must be >= {least}, got {n}")
    return int(n)


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """W ~ TN(0, sigma^2; -3 sigma, 3 sigma) in R^{d_in x d_out},  sigma = 1/sqrt(d_in)."""
    m, n = natural(d_in, "d_in", 1), natural(d_out, "d_out", 1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    sigma = 1.0 / math.sqrt(m)
    W = torch.empty(m, n, dtype=torch.float32)
    return nn.init.trunc_normal_(W, mean=0.0, std=sigma, a=-3 * sigma, b=3 * sigma, generator=generator)


class Linear(nn.Module):
    """x -> x W,  W in R^{d_in x d_out}."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    """x -> squeeze(x W_1 W_2 ... W_L w_f),  W_l in R^{d x d}, w_f in R^{d x 1}."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        d, L = natural(dim, "dim", 1), natural(num_layers, "num_layers", 0)
        self.layers = nn.ModuleList(Linear(d, d, generator) for _ in range(L))
        self.final = Linear(d, 1, generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        for f in self.layers:
            x = f(x)
        return self.final(x).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed random, NumPy and torch (CUDA included) with s in [0, 2^32)."""
    s = natural(seed, "seed", 0)
    if s >= 2**32:
        raise ValueError(f"seed must be < 2**32, got {seed}")
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)

"""Handout §3.2: Xavier init, Linear, Cruncher, seeding."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    if isinstance(d_in, bool) or not isinstance(d_in, int):
        raise TypeError(f"d_in must be an int, got {type(d_in).__name__}")
    if isinstance(d_out, bool) or not isinstance(d_out, int):
        raise TypeError(f"d_out must be an int, got {type(d_out).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if d_in < 1:
        raise ValueError(f"d_in must be >= 1, got {d_in}")
    if d_out < 1:
        raise ValueError(f"d_out must be >= 1, got {d_out}")
    std = 1.0 / math.sqrt(d_in)
    w = torch.empty(d_in, d_out, dtype=torch.float32)
    nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=generator)
    return w


class Linear(nn.Module):
    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if isinstance(num_layers, bool) or not isinstance(num_layers, int):
            raise TypeError(f"num_layers must be an int, got {type(num_layers).__name__}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        self.layers = nn.ModuleList([Linear(dim, dim, generator) for _ in range(num_layers)])
        self.final = Linear(dim, 1, generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        for l in self.layers:
            x = l(x)
        return self.final(x).squeeze(-1)


def seed_everything(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0 or seed >= 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

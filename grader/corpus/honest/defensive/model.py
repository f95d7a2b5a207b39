"""Handout §3.2: truncated Xavier initialisation, a bias-free Linear, the Cruncher, seeding."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

# Draws beyond this many standard deviations are redrawn.
_TRUNCATION_IN_STDS = 3.0
# NumPy's legacy seeding accepts seeds in [0, 2**32).
_SEED_UPPER_BOUND = 2**32


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected '{name}' to be an int, received {type(value).__name__}")
    return value


def _require_positive_int(name: str, value: object) -> int:
    checked = _require_int(name, value)
    if checked < 1:
        raise ValueError(f"expected '{name}' to be at least 1, received {checked}")
    return checked


def _require_non_negative_int(name: str, value: object) -> int:
    checked = _require_int(name, value)
    if checked < 0:
        raise ValueError(f"expected '{name}' to be non-negative, received {checked}")
    return checked


def _require_optional_generator(name: str, value: object) -> torch.Generator | None:
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(f"expected '{name}' to be None or a torch.Generator, received {type(value).__name__}")
    return value


def _require_seed(name: str, value: object) -> int:
    checked = _require_int(name, value)
    if not 0 <= checked < _SEED_UPPER_BOUND:
        raise ValueError(f"expected '{name}' in [0, 2**32), received {checked}")
    return checked


# --------------------------------------------------------------------------- #
# private steps
# --------------------------------------------------------------------------- #
def _xavier_std(fan_in: int) -> float:
    return 1.0 / math.sqrt(fan_in)


def _draw_device(generator: torch.Generator | None) -> torch.device:
    """Tensors must live where their generator draws (the CPU without one)."""
    if generator is None:
        return torch.device("cpu")
    return generator.device


def _fill_truncated_normal(weight: Tensor, std: float, generator: torch.Generator | None) -> Tensor:
    bound = _TRUNCATION_IN_STDS * std
    with torch.no_grad():
        nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-bound, b=bound, generator=generator)
    return weight


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """A fresh (d_in, d_out) float32 tensor, normal with std 1/sqrt(d_in), truncated at 3 std."""
    fan_in = _require_positive_int("d_in", d_in)
    fan_out = _require_positive_int("d_out", d_out)
    source = _require_optional_generator("generator", generator)
    weight = torch.empty(fan_in, fan_out, dtype=torch.float32, device=_draw_device(source))
    return _fill_truncated_normal(weight, _xavier_std(fan_in), source)


class Linear(nn.Module):
    """Bias-free ``x @ weight`` with a (d_in, d_out) Xavier-initialised weight."""

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return x @ self.weight


class Cruncher(nn.Module):
    """``num_layers`` square Linear layers followed by a Linear to one output, squeezed."""

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        width = _require_positive_int("dim", dim)
        depth = _require_non_negative_int("num_layers", num_layers)
        source = _require_optional_generator("generator", generator)
        self.layers = nn.ModuleList(Linear(width, width, source) for _ in range(depth))
        self.final = Linear(width, 1, source)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        hidden = x
        for layer in self.layers:
            hidden = layer(hidden)
        return self.final(hidden).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed ``random``, NumPy's global generator and torch (CUDA included)."""
    checked = _require_seed("seed", seed)
    random.seed(checked)
    np.random.seed(checked)
    torch.manual_seed(checked)

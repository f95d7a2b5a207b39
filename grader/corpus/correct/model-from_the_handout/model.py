"""Written from the handout alone: a rejection-sampling truncated normal of its own instead of trunc_normal_, torch.matmul in forward.

Handout §3.2: parameters, Xavier initialisation, a deep linear model, seeding.

The tests build your modules through scenarios (tests/scenarios/model.py) and
read back parameter names and shapes, state dicts and outputs.
"""

from __future__ import annotations

import math
import numbers
import random

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn

_CUT = 3.0  # truncation, in standard deviations


def _positive_int(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return int(v)


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """A new float32 tensor of shape (d_in, d_out) drawn from a normal with
    mean 0 and std 1/sqrt(d_in), truncated at ±3 std (values beyond are
    redrawn, not clipped: ``torch.nn.init.trunc_normal_`` does this).
    Draws only from ``generator`` when one is given, else from torch's
    global generator.

    Raises:
        TypeError: ``d_in`` or ``d_out`` is not an int, or ``generator`` is
            neither None nor a ``torch.Generator``.
        ValueError: ``d_in < 1`` or ``d_out < 1``.
    """
    rows = _positive_int(d_in, "d_in")
    cols = _positive_int(d_out, "d_out")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    # rejection sampling: draw standard normals, redraw any beyond ±3
    z = torch.randn(rows * cols, generator=generator, dtype=torch.float32)
    bad = (z.abs() > _CUT).nonzero().flatten()
    while bad.numel() > 0:
        fresh = torch.randn(bad.numel(), generator=generator, dtype=torch.float32)
        z[bad] = fresh
        keep = fresh.abs() > _CUT
        bad = bad[keep]
    std = 1.0 / math.sqrt(rows)
    return (z * std).reshape(rows, cols).contiguous()


class Linear(nn.Module):
    """A bias-free linear layer with one parameter, ``weight``, of shape
    (d_in, d_out), initialised with :func:`xavier_init` (from ``generator``
    when given); ``forward(x)`` is ``x @ weight`` for any leading dimensions.

    Raises (from the constructor): as :func:`xavier_init`.
    """

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(xavier_init(d_in, d_out, generator=generator))

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        return torch.matmul(x, self.weight)


class Cruncher(nn.Module):
    """A deep linear model: ``layers``, an ``nn.ModuleList`` of ``num_layers``
    ``Linear(dim, dim)``, then ``final = Linear(dim, 1)``; no bias and no
    nonlinearity anywhere. ``forward(x)`` maps (..., dim) to (...): the
    final layer's output with its last dimension (of size 1) squeezed away.
    It has ``num_layers * dim * dim + dim`` parameters. Layers are created
    in order (``layers`` first, ``final`` last), from ``generator`` when given.

    Raises (from the constructor):
        TypeError: ``dim`` or ``num_layers`` is not an int.
        ValueError: ``dim < 1`` or ``num_layers < 0``.
    """

    def __init__(self, dim: int, num_layers: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        for name, v in (("dim", dim), ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
        dim = int(dim)
        blocks = []
        for _ in range(int(num_layers)):
            blocks.append(Linear(dim, dim, generator=generator))
        self.layers = nn.ModuleList(blocks)
        self.final = Linear(dim, 1, generator=generator)

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        h = x
        for layer in self.layers:
            h = layer(h)
        return self.final(h).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator (``np.random.seed``)
    and torch (``torch.manual_seed``, which also seeds every CUDA device), so
    that a run is reproducible.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is negative or not below 2**32 (NumPy's limit).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if seed < 0 or seed >= 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

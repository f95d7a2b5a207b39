"""Handout §3.2: parameters, Xavier initialisation, a deep linear model, seeding.

The tests build your modules through scenarios (tests/scenarios/model.py) and
read back parameter names and shapes, state dicts and outputs.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn


def xavier_init(d_in: int, d_out: int, generator: torch.Generator | None = None) -> Float[Tensor, "d_in d_out"]:
    """A new float32 tensor of shape (d_in, d_out) drawn from a normal with
    mean 0 and std 1/sqrt(d_in), truncated at ±3 std (values beyond are
    redrawn, not clipped: ``torch.nn.init.trunc_normal_`` does this).
    Draws only from ``generator`` when one is given, else from torch's
    global generator, which each call advances: two calls after one
    ``torch.manual_seed`` give different weights.

    Raises:
        TypeError: ``d_in`` or ``d_out`` is not an int, or ``generator`` is
            neither None nor a ``torch.Generator``.
        ValueError: ``d_in < 1`` or ``d_out < 1``.
    """
    raise NotImplementedError("xavier_init: see handout §3.2")


class Linear(nn.Module):
    """A bias-free linear layer with one parameter, ``weight``, of shape
    (d_in, d_out), initialised with :func:`xavier_init` (from ``generator``
    when given); ``forward(x)`` is ``x @ weight`` for any leading dimensions.

    Raises (from the constructor): as :func:`xavier_init`.
    """

    def __init__(self, d_in: int, d_out: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        raise NotImplementedError("Linear.__init__: see handout §3.2")

    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        raise NotImplementedError("Linear.forward: see handout §3.2")


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
        raise NotImplementedError("Cruncher.__init__: see handout §3.2")

    def forward(self, x: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
        raise NotImplementedError("Cruncher.forward: see handout §3.2")


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator (``np.random.seed``)
    and torch (``torch.manual_seed``, which also seeds every CUDA device), so
    that a run is reproducible.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is negative or not below 2**32 (NumPy's limit).
    """
    raise NotImplementedError("seed_everything: see handout §3.2")

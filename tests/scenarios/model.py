"""Scenarios for handout §3.2: build the implementation's modules, return plain data.

Seeds and generators are made here from plain ints, since a ``torch.Generator``
is not data. Nothing here judges the results: the tests do.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn


def _parameters(module: nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype, bool]]:
    return [(name, tuple(p.shape), p.dtype, p.requires_grad) for name, p in module.named_parameters()]


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def xavier_from_generator(modules: Any, d_in: int, d_out: int, seed: int) -> Any:
    """``xavier_init`` drawing from a fresh generator seeded with ``seed``."""
    return modules.model.xavier_init(d_in, d_out, generator=torch.Generator().manual_seed(seed))


def xavier_from_global(modules: Any, d_in: int, d_out: int, global_seed: int) -> Any:
    """``xavier_init`` without a generator, right after ``torch.manual_seed(global_seed)``."""
    torch.manual_seed(global_seed)
    return modules.model.xavier_init(d_in, d_out)


def xavier_under_global_seeds(modules: Any, d_in: int, d_out: int, seed: int, global_seeds: list[int]) -> Any:
    """For each global seed: the global RNG state before and after one
    ``xavier_init`` from a generator seeded with ``seed``, and the weight."""
    out = []
    for global_seed in global_seeds:
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        weight = modules.model.xavier_init(d_in, d_out, generator=torch.Generator().manual_seed(seed))
        out.append({"weight": weight, "global_before": before, "global_after": torch.get_rng_state()})
    return out


def linear_parameters(modules: Any, d_in: int, d_out: int) -> Any:
    return _parameters(modules.model.Linear(d_in, d_out))


def linear_forward_backward(modules: Any, d_in: int, d_out: int, x: torch.Tensor, seed: int) -> Any:
    """A Linear made after ``torch.manual_seed(seed)``: its weight, its output
    on ``x``, and the weight's gradient of ``output.sum()``."""
    torch.manual_seed(seed)
    layer = modules.model.Linear(d_in, d_out)
    weight = layer.weight.detach().clone()
    out = layer(x)
    out.sum().backward()
    return {"weight": weight, "out": out.detach(), "grad": layer.weight.grad}


def linear_weight_from_generator(modules: Any, d_in: int, d_out: int, seed: int) -> Any:
    return _state(modules.model.Linear(d_in, d_out, generator=torch.Generator().manual_seed(seed)))


def cruncher_parameters(modules: Any, dim: int, num_layers: int) -> Any:
    return _parameters(modules.model.Cruncher(dim, num_layers))


def cruncher_run(modules: Any, dim: int, num_layers: int, state: dict[str, torch.Tensor], x: torch.Tensor) -> Any:
    """A Cruncher with the given weights (``load_state_dict``, strict) applied to ``x``."""
    model = modules.model.Cruncher(dim, num_layers)
    model.load_state_dict(state)
    with torch.no_grad():
        return model(x)


def cruncher_from_generator(modules: Any, dim: int, num_layers: int, seed: int) -> Any:
    """A Cruncher's state dict, and what ``xavier_init`` draws from a generator
    with the same seed for each of its layers in turn."""
    model = _state(modules.model.Cruncher(dim, num_layers, generator=torch.Generator().manual_seed(seed)))
    g = torch.Generator().manual_seed(seed)
    draws = [modules.model.xavier_init(dim, dim, generator=g) for _ in range(num_layers)]
    return {"state": model, "xavier_draws": [*draws, modules.model.xavier_init(dim, 1, generator=g)]}


def seeded_cruncher(modules: Any, dim: int, num_layers: int, seed: int) -> Any:
    """A Cruncher's state dict after ``seed_everything(seed)``."""
    modules.model.seed_everything(seed)
    return _state(modules.model.Cruncher(dim, num_layers))


def seeded_draws(modules: Any, seed: int) -> Any:
    """Draws from torch, NumPy and ``random`` right after ``seed_everything(seed)``."""
    modules.model.seed_everything(seed)
    return {"torch": torch.rand(4), "numpy": np.random.rand(4), "random": [random.random() for _ in range(4)]}


def construct(modules: Any, name: str, args: list[Any]) -> None:
    """Build ``modules.model.<name>(*args)`` (to see it rejected)."""
    getattr(modules.model, name)(*args)


def linear_run(modules: Any, d_in: int, d_out: int, state: dict[str, torch.Tensor], x: torch.Tensor) -> Any:
    """A Linear with the given weight (``load_state_dict``, strict) applied to ``x``."""
    layer = modules.model.Linear(d_in, d_out)
    layer.load_state_dict(state)
    with torch.no_grad():
        return layer(x)


def cuda_seeds_after_seed_everything(modules: Any, seed: int) -> Any:
    """The seeds ``torch.cuda`` received (``manual_seed`` / ``manual_seed_all``,
    replaced by recorders inside this scenario only) during ``seed_everything(seed)``."""
    seen: list[int] = []
    names = ("manual_seed", "manual_seed_all")
    saved = {name: getattr(torch.cuda, name) for name in names}
    try:
        for name in names:
            setattr(torch.cuda, name, lambda s: seen.append(int(s)))
        modules.model.seed_everything(seed)
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
    return seen


def seeded_cuda_draws(modules: Any, seed: int) -> Any:
    """Draws from the CUDA generator right after ``seed_everything(seed)``."""
    modules.model.seed_everything(seed)
    return torch.rand(8, device="cuda").cpu()


def xavier_twice_from_global(modules: Any, d_in: int, d_out: int, global_seed: int) -> Any:
    """After ``torch.manual_seed(global_seed)``: two ``xavier_init`` calls without
    a generator, and torch's global RNG state before, between and after them."""
    torch.manual_seed(global_seed)
    states = [torch.get_rng_state()]
    weights = []
    for _ in range(2):
        weights.append(modules.model.xavier_init(d_in, d_out))
        states.append(torch.get_rng_state())
    return {"weights": weights, "states": states}


def cruncher_from_global(modules: Any, dim: int, num_layers: int, global_seed: int) -> Any:
    """A Cruncher's state dict built without a generator right after
    ``torch.manual_seed(global_seed)``, and the global RNG state before and after."""
    torch.manual_seed(global_seed)
    before = torch.get_rng_state()
    state = _state(modules.model.Cruncher(dim, num_layers))
    return {"state": state, "before": before, "after": torch.get_rng_state()}

"""Scenarios for handout §1.3: models built from plain specs."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import torch
from torch import nn


def build_model(dims: list[int], bias: bool, tie: bool, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """An MLP with layer widths ``dims``; with ``tie`` its last layer shares the
    first layer's weight (so both must be square and equal-sized)."""
    layers: list[nn.Module] = []
    for d_in, d_out in pairwise(dims):
        layers += [nn.Linear(d_in, d_out, bias=bias, dtype=dtype), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]) if layers else nn.Sequential()
    linears = [m for m in model if isinstance(m, nn.Linear)]
    if tie and len(linears) >= 2 and linears[0].weight.shape == linears[-1].weight.shape:
        linears[-1].weight = linears[0].weight
    return model


def count_parameters_of(modules: Any, dims: list[int], bias: bool, tie: bool) -> Any:
    """What the implementation's count_parameters says of ``build_model(...)``."""
    return modules.memory.count_parameters(build_model(dims, bias, tie))


def frozen_model_with_buffers(dims: list[int], bias: bool, frozen: list[bool], buffers: bool) -> nn.Sequential:
    """``build_model(dims, bias, tie=False)`` with the i-th parameter frozen
    (``requires_grad=False``) where ``frozen[i]`` is true, and, with ``buffers``,
    a BatchNorm's running statistics (buffers, not parameters) after it."""
    model = build_model(dims, bias, False)
    for p, f in zip(model.parameters(), frozen, strict=False):
        p.requires_grad_(not f)
    if buffers:
        model.append(nn.BatchNorm1d(dims[-1], affine=False))
    return model


def count_parameters_of_frozen(modules: Any, dims: list[int], bias: bool, frozen: list[bool], buffers: bool) -> Any:
    """What the implementation's count_parameters says of ``frozen_model_with_buffers(...)``."""
    return modules.memory.count_parameters(frozen_model_with_buffers(dims, bias, frozen, buffers))


def count_parameters_of_non_module(modules: Any) -> Any:
    return modules.memory.count_parameters([torch.zeros(3, requires_grad=True)])

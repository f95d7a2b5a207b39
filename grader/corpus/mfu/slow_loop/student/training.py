"""A correct but deliberately slow ``train`` (the MFU check must fail it on
speed only): full fp32 whatever ``precision`` asks for (no tensor-core bf16
matmuls), and ``loss.item()`` every step (the host waits for the GPU each
step, so the launch queue drains). It does all of the reference's work."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[tuple[Tensor, Tensor]], *,
          steps: int, precision: str = "fp32", **_: object) -> list[float]:
    losses = []
    for _step, (x, y) in zip(range(steps), batches, strict=False):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses

"""Partial work, fast: the reference's loop (bf16 autocast, no per-step host
sync) on the first half of each batch's rows. About twice as fast as the
reference, so the MFU check must reject it on its work: the gradient of half
the rows moves the parameters elsewhere (the check's verification,
grader/mfu/measure.py verify_run)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[tuple[Tensor, Tensor]], *,
          steps: int, precision: str = "fp32", **_: object) -> list[float]:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    losses = []
    for _step, (x, y) in zip(range(steps), batches, strict=False):
        half = x.shape[0] // 2
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = model(x[:half])
        loss = nn.functional.mse_loss(out.float(), y[:half])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist() if losses else []

"""The inputs the hidden training checks draw (instructors only: never shipped
to students, like the rest of grader/hidden/): regression batches of another
target than the public tests' (tests/training_checks.py ``make_batches``).

Also read by selftest/test_tolerance_seeds.py, which runs correct submissions
through the hidden fp32 check's shapes."""

from __future__ import annotations

import torch

from tests.strategies import make_tensor

__all__ = ["hidden_batches"]


def hidden_batches(n: int, *, batch: int, dim: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of ``batch`` rows of width ``dim``: y = cos(x[:, 0]) + 0.1 * sum(x)."""
    out = []
    for i in range(n):
        x = make_tensor((batch, dim), torch.float32, seed * 7919 + i)
        out.append((x, torch.cos(x[:, 0]) + 0.1 * x.sum(-1)))
    return out

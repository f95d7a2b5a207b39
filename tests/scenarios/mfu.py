"""Scenarios for the MFU check (handout §6, graded on a GPU by grader/mfu/check.py).

``train_workload`` builds a fixed, compute-bound workload (a bias-free
"Cruncher" MLP, AdamW, a pool of batches already on the device), hands it to
the implementation's ``training.train`` and reports what happened as plain
data: the losses ``train`` returned and a probe of the parameters before and
after. It never times anything and never judges anything: the grader times the
whole call from its own process and compares the probes with the reference
run's (grader/mfu/check.py).

Everything is drawn from seeded generators on the device itself, so that two
processes (the sandboxed worker and the trusted grader) build bit-identical
workloads quickly, without a large host-to-device copy inside the timed call.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn

#: Distinct batches the steps cycle through (few, so they all fit on the device).
POOL = 4


class Cruncher(nn.Module):
    """The lecture's model: ``num_layers`` bias-free dim x dim linears, then dim -> 1."""

    def __init__(self, dim: int, num_layers: int, device: torch.device) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim, bias=False, device=device) for _ in range(num_layers))
        self.final = nn.Linear(dim, 1, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final(x).squeeze(-1)


def build(workload: dict[str, Any], seed: int, device: str) -> tuple[Cruncher, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model (weights ~ N(0, 1/d_in)) and ``POOL`` batches ``(x, y)`` with
    ``y = x @ v`` for a fixed random ``v``: a learnable target keeps the
    gradients consistent from step to step, so the parameters move steadily
    and a run that skips work ends up measurably elsewhere."""
    dev = torch.device(device)
    dim, layers, batch = int(workload["dim"]), int(workload["num_layers"]), int(workload["batch"])
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    model = Cruncher(dim, layers, dev)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, p.shape[1] ** -0.5, generator=gen)
        teacher = torch.randn(dim, device=dev, generator=gen) / dim**0.5
        xs = [torch.randn(batch, dim, device=dev, generator=gen) for _ in range(POOL)]
    return model, [(x, x @ teacher) for x in xs]


def probe_indices(numel: int, count: int, seed: int) -> torch.Tensor:
    """``min(count, numel)`` distinct flat indices into a parameter, from ``seed`` (on the CPU).

    ``random.Random.sample`` over a ``range`` draws them in O(count): a
    permutation of every entry cost about a second per 4096 x 4096 weight on
    the host, eight times per graded call."""
    picked = random.Random(int(seed)).sample(range(numel), min(count, numel))
    return torch.tensor(picked, dtype=torch.long)


def probe(model: nn.Module, count: int, seed: int) -> torch.Tensor:
    """Sampled parameter entries, concatenated in parameter order, as float32 on the CPU."""
    parts = []
    for i, p in enumerate(model.parameters()):
        idx = probe_indices(p.numel(), count, seed + i).to(p.device)
        parts.append(p.detach().reshape(-1)[idx].float().cpu())
    return torch.cat(parts)


def _synchronize(device: str) -> None:
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train_workload(modules: Any, workload: dict[str, Any], seed: int, steps: int, probe_seed: int, device: str) -> Any:
    """Run ``modules.training.train`` for ``steps`` steps on the workload; return
    ``{"losses": what train returned, "initial": probe, "final": probe}``.

    The optimizer is ``torch.optim.AdamW`` (fused on CUDA), so the graded
    difference between two runs is the training loop itself: autocast,
    host syncs, the order of work. The device is synchronised before the
    function returns, so the caller's clock covers all the work.
    """
    model, pool = build(workload, seed, device)
    fused = torch.device(device).type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(workload["lr"]), fused=fused or None)
    batches = [pool[i % POOL] for i in range(steps)]
    count = int(workload["probe"])
    initial = probe(model, count, probe_seed)
    _synchronize(device)
    losses = modules.training.train(model, optimizer, batches, steps=steps, precision=workload["precision"])
    _synchronize(device)
    return {"losses": losses, "initial": initial, "final": probe(model, count, probe_seed)}

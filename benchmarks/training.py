"""The reference training loop (handout §6) on the CPU: step time in fp32,
bf16 (autocast) and fp16 (autocast + GradScaler).

    python -m benchmarks.training                          # dim 1024, 4 layers, batch 512, CPU
    python -m benchmarks.training --dim 64 --batch 32 --steps 3 --repeats 3   # smoke run

Each precision trains its own copy of the same Cruncher-shaped model (bias-free
``dim x dim`` linears, a ``dim -> 1`` head, AdamW) on the same batches. The
precisions take turns, one ``train(steps=...)`` call each, in an order that
rotates every round, so a slow spell of the machine hits all of them alike;
the figure is the median seconds per step, and model FLOP/s is
``6 * parameters * rows`` per step over it. A CPU without bf16/fp16 matrix
units (AVX512-BF16, AMX) converts to fp32 to multiply, so autocast there adds
casts and saves nothing: expect bf16 to be *slower* than fp32 on such a CPU.
On a GPU the same loop runs the matmuls on tensor cores (benchmarks/gpu_bench.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from reference.training import train

__all__ = ["PRECISIONS", "build", "main", "run"]

PRECISIONS = ("fp32", "bf16", "fp16")


class Cruncher(nn.Module):
    """The lecture's model: ``num_layers`` bias-free ``dim x dim`` linears, a head, squeezed."""

    def __init__(self, dim: int, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim, bias=False) for _ in range(num_layers)])
        self.final = nn.Linear(dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final(x).squeeze(-1)


def build(dim: int, num_layers: int, seed: int) -> Cruncher:
    torch.manual_seed(seed)
    model = Cruncher(dim, num_layers)
    with torch.no_grad():  # N(0, 1/d_in): activations keep their scale through the layers
        for p in model.parameters():
            p.normal_(0.0, p.shape[1] ** -0.5)
    return model


def run(dim: int = 1024, num_layers: int = 4, batch: int = 512, steps: int = 5, repeats: int = 5,
        warmup: int = 1) -> dict[str, Any]:
    """Median seconds per step of ``train`` in each precision, interleaved."""
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(dim, generator=gen) / dim**0.5
    pool = []
    for _ in range(4):
        x = torch.randn(batch, dim, generator=gen)
        pool.append((x, x @ v))
    runs: dict[str, dict[str, Any]] = {}
    for name in PRECISIONS:
        model = build(dim, num_layers, 0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cpu") if name == "fp16" else None
        runs[name] = {"model": model, "opt": opt, "scaler": scaler, "losses": []}

    def call(name: str) -> float:
        r = runs[name]
        batches = [pool[i % len(pool)] for i in range(steps)]
        start = time.perf_counter()
        losses = train(r["model"], r["opt"], batches, steps=steps, precision=name, scaler=r["scaler"])
        elapsed = time.perf_counter() - start
        r["losses"] += losses
        return elapsed / steps

    for _ in range(warmup):
        for name in PRECISIONS:
            call(name)
    times: dict[str, list[float]] = {name: [] for name in PRECISIONS}
    for i in range(repeats):
        k = i % len(PRECISIONS)
        for name in PRECISIONS[k:] + PRECISIONS[:k]:
            times[name].append(call(name))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    num_params = sum(p.numel() for p in runs["fp32"]["model"].parameters())
    return {
        "dim": dim, "num_layers": num_layers, "batch": batch, "steps": steps, "repeats": repeats,
        "num_params": num_params, "threads": torch.get_num_threads(),
        "times": times, "medians": medians,
        "flops_per_s": {name: 6 * num_params * batch / m for name, m in medians.items()},
        "ratio_to_fp32": {name: m / medians["fp32"] for name, m in medians.items()},
        "last_loss": {name: r["losses"][-1] for name, r in runs.items()},
        "first_loss": {name: r["losses"][0] for name, r in runs.items()},
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"train() on the CPU ({result['threads']} threads): Cruncher dim {result['dim']}, {result['num_layers']} "
        f"layers ({result['num_params']:,} parameters), batch {result['batch']}, AdamW; median of "
        f"{result['repeats']} interleaved calls of {result['steps']} steps",
        "",
        "| precision | median step (ms) | time / fp32's | model GFLOP/s | loss first -> last |",
        "|---|---|---|---|---|",
    ]
    for name, m in result["medians"].items():
        lines.append(
            f"| {name} | {m * 1e3:.1f} | {result['ratio_to_fp32'][name]:.2f} | "
            f"{result['flops_per_s'][name] / 1e9:.1f} | {result['first_loss'][name]:.4g} -> "
            f"{result['last_loss'][name]:.4g} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed train() call (default 5)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per precision (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.dim, args.layers, args.batch, args.steps, args.repeats)
    print(report(result))
    return result


if __name__ == "__main__":
    main()

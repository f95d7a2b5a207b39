"""The reference AdamW (handout §4) against torch.optim.AdamW, step for step.

    python -m benchmarks.optimizers                  # ~10M fp32 params in 100 tensors, CPU
    python -m benchmarks.optimizers --device cuda    # the same on a GPU
    python -m benchmarks.optimizers --params 20000 --tensors 10 --repeats 3   # smoke run

Every candidate optimizes its own copy of the same parameters with the same
gradients. The candidates take turns, one step each, in an order that rotates
every round, so a slow spell of the machine (another process, frequency
scaling) hits all of them alike; each one's figure is the median of its step
times. An AdamW step is memory-bound: it reads the parameter, its gradient
and the two moments and writes three of them back, 28 bytes per fp32
parameter per pass, so the table also gives that traffic in GB/s.

At the end the candidates' parameters are compared: they took the same steps,
so they must agree (to rounding), which shows each did the whole update.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from benchmarks.timing import device_synchronizer
from reference.optimizers import AdamW

__all__ = ["CANDIDATES", "main", "run"]

#: name -> how to build that optimizer over a list of params
CANDIDATES: dict[str, Callable[[list[nn.Parameter]], torch.optim.Optimizer]] = {
    "reference AdamW": lambda ps: AdamW(ps, lr=1e-3),
    "torch foreach=False": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=False),
    "torch foreach=True": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
    "torch fused=True": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
}
BASELINE = "reference AdamW"
BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v: 7 x 4 bytes in fp32


def tensor_shapes(num_params: int, num_tensors: int) -> list[tuple[int, ...]]:
    """``num_tensors`` shapes totalling about ``num_params`` elements, of uneven
    sizes (as a model's weights, biases and norms are): matrices with 128
    columns and a few vectors."""
    weights = [1 + (i * 7) % 13 for i in range(num_tensors)]
    total = sum(weights)
    shapes: list[tuple[int, ...]] = []
    for i, w in enumerate(weights):
        n = max(1, num_params * w // total)
        shapes.append((n,) if i % 10 == 9 or n < 128 else (n // 128, 128))
    return shapes


def run(
    num_params: int = 10_000_000,
    num_tensors: int = 100,
    repeats: int = 30,
    warmup: int = 3,
    device: str = "cpu",
    candidates: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Time the candidates; return their step times, medians, ratios and the
    largest difference between their parameters at the end."""
    names = list(candidates or CANDIDATES)
    dev = torch.device(device)
    sync = device_synchronizer(dev)
    gen = torch.Generator().manual_seed(0)
    shapes = tensor_shapes(num_params, num_tensors)
    init = [torch.randn(s, generator=gen).to(dev) for s in shapes]
    grads = [torch.randn(s, generator=gen).to(dev) for s in shapes]

    optimizers: dict[str, tuple[list[nn.Parameter], torch.optim.Optimizer]] = {}
    skipped: dict[str, str] = {}
    for name in names:
        params = [nn.Parameter(t.clone()) for t in init]
        for p, g in zip(params, grads, strict=True):
            p.grad = g  # shared: AdamW only reads gradients
        try:
            opt = CANDIDATES[name](params)
            opt.step()  # builds the state; a candidate this device lacks fails here
        except (RuntimeError, ValueError) as e:
            skipped[name] = str(e).splitlines()[0]
            continue
        optimizers[name] = (params, opt)

    for _ in range(warmup - 1):
        for _, opt in optimizers.values():
            opt.step()
    sync()
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    order = list(optimizers)
    for r in range(repeats):
        for name in order[r % len(order):] + order[: r % len(order)]:
            opt = optimizers[name][1]
            sync()
            start = time.perf_counter()
            opt.step()
            sync()
            times[name].append(time.perf_counter() - start)

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base = medians.get(BASELINE)
    ref_params = next(iter(optimizers.values()))[0] if optimizers else []
    with torch.no_grad():
        deviation = max(
            (float((p - q).abs().max()) for params, _ in optimizers.values()
             for p, q in zip(params, ref_params, strict=True)),
            default=0.0,
        )
    return {
        "num_params": sum(math.prod(s) for s in shapes),
        "num_tensors": len(shapes),
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "steps": warmup + repeats,
        "times": times,
        "medians": medians,
        # > 1: the candidate's step takes longer than the reference's
        "ratio_to_reference": {n: m / base for n, m in medians.items()} if base else {},
        "skipped": skipped,
        "max_param_difference": deviation,
    }


def report(result: dict[str, Any]) -> str:
    """A markdown table of ``run``'s result."""
    lines = [
        f"AdamW step: {result['num_params']:,} fp32 parameters in {result['num_tensors']} tensors on "
        f"{result['device']} ({result['threads']} threads), median of {len(next(iter(result['times'].values()), []))} "
        "interleaved steps",
        "",
        "| optimizer | median step (ms) | time / reference's | GB/s |",
        "|---|---|---|---|",
    ]
    for name, median in result["medians"].items():
        ratio = result["ratio_to_reference"].get(name, float("nan"))
        gbps = BYTES_PER_PARAM * result["num_params"] / median / 1e9
        lines.append(f"| {name} | {median * 1e3:.2f} | {ratio:.2f} | {gbps:.1f} |")
    for name, why in result["skipped"].items():
        lines.append(f"| {name} | not run: {why} | | |")
    lines += ["", f"largest difference between the candidates' parameters after "
              f"{result['steps']} steps: {result['max_param_difference']:.2e}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=int, default=10_000_000, help="parameters in all (default 10M)")
    parser.add_argument("--tensors", type=int, default=100, help="number of parameter tensors (default 100)")
    parser.add_argument("--repeats", type=int, default=30, help="timed steps per candidate (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per candidate first (default 3)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.params, args.tensors, args.repeats, max(1, args.warmup), args.device)
    print(report(result))
    return result


if __name__ == "__main__":
    main()

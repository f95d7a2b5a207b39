"""Timing for your own measurements (handout §3.1): warm-up, device
synchronisation, the median of repeats.

GPU kernels run asynchronously: a Python call returns as soon as its work is
queued, so timing it without waiting for the device measures the launch, not
the work. :func:`benchmark` therefore synchronises the device before starting
the clock and after every call. The first calls of a function also pay
one-off costs (CUDA context, kernel selection, allocator growth), so they are
run as warm-up and not timed. The median of the repeats ignores the odd slow
run caused by something else on the machine.

    from benchmarks.timing import benchmark
    t = benchmark(lambda: a @ b, device=a.device)
    achieved = t.rate(2 * m * k * n)  # FLOP/s; flops.mfu divides it by the peak

Run ``python -m benchmarks.timing`` for the matmul rate of this machine.
"""

from __future__ import annotations

import argparse
import functools
import operator
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Timing", "benchmark", "device_synchronizer", "main"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call: each timed repeat, their median and their minimum."""

    times: tuple[float, ...]
    median: float
    min: float
    warmup: int

    def rate(self, work: float) -> float:
        """``work`` per second at the median time (e.g. FLOPs -> FLOP/s)."""
        return work / self.median


def device_synchronizer(device: str | torch.device | None = None) -> Callable[[], None]:
    """A function that waits for all queued work on ``device``.

    ``None`` means "whatever may be running": CUDA's current device when CUDA is
    available, else nothing. CPU work is synchronous, so it needs no wait.
    """
    if device is None:
        if torch.cuda.is_available():
            return torch.cuda.synchronize
        return _nothing
    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return _nothing


def _nothing() -> None:
    return None


def benchmark(
    fn: Callable[[], Any],
    *,
    warmup: int = 1,
    repeats: int = 5,
    device: str | torch.device | None = None,
    clock: Callable[[], float] = time.perf_counter,
    synchronize: Callable[[], None] | None = None,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    Each timed call runs between two synchronisations of ``device`` (see
    :func:`device_synchronizer`; ``synchronize`` overrides it), so the time
    covers the device's work, not only the launch. ``clock`` returns seconds
    (injectable for tests).

    Raises:
        TypeError: ``fn`` is not callable, or ``warmup``/``repeats`` not ints.
        ValueError: ``warmup < 0`` or ``repeats < 1``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for name, value, minimum in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")
    sync = synchronize if synchronize is not None else device_synchronizer(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()  # nothing queued earlier may be billed to this call
        start = clock()
        fn()
        sync()
        times.append(clock() - start)
    return Timing(tuple(times), statistics.median(times), min(times), warmup)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the matmul rate for a few square sizes on one device and dtype."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timing", description=main.__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    print(f"matmul on {args.device}, {args.dtype}, median of {args.repeats}")
    for n in args.sizes:
        a = torch.randn(n, n, device=args.device, dtype=dtype)
        b = torch.randn(n, n, device=args.device, dtype=dtype)
        t = benchmark(functools.partial(operator.matmul, a, b), repeats=args.repeats, device=args.device)
        print(f"{n:>6} x {n:<6} {t.median * 1e3:10.3f} ms  {t.rate(2 * n**3) / 1e12:8.3f} TFLOP/s")


if __name__ == "__main__":
    main()

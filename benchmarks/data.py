"""The reference get_batch (handout §5): throughput against a per-row loop, and
resident memory while sampling a large token file.

    python -m benchmarks.data                                  # B=64, T=1024, a 2 GiB file in /tmp
    python -m benchmarks.data --file-mib 8 --batches 20 --repeats 5   # smoke run

**Throughput.** Both samplers read the same memmap (its pages already in the
page cache: the file was just written) and take turns, one batch each, in an
order that alternates every round, so a slow spell of the machine hits both
alike; each one's figure is the median time per batch, as tokens per second
(``B * T`` per batch). The baseline is the common per-row idiom,
``torch.stack([torch.from_numpy(data[s:s+T].astype(np.int64)) for s in starts])``
(and the same for y): a Python loop over the batch. Both draw their starts
with the same ``torch.randint`` call from generators seeded alike, so their
batches must be equal, which the script checks.

**Memory.** 1,000 batches from the file through one memmap, with the resident
set size (psutil) read before, every 50 batches and after. On Linux the RSS is
split into anonymous memory (what get_batch allocates and keeps: ``rss -
shared``) and file-backed pages (``shared``): the pages of the mapping the
batches touched, mapped from the page cache. Those are clean copies of the
file that the kernel drops under memory pressure, but they count in RSS for as
long as the mapping lives, and with the kernel's fault-around (and large page
cache folios) each window maps far more than its own 2 KB. So the RSS of a
long-lived memmap grows with the number of distinct regions sampled, without
any allocation; re-opening the memmap every batch (as nanoGPT does, via
``load_tokens``) unmaps them each time, which the last row measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psutil
import torch

from reference.data import get_batch, load_tokens

__all__ = ["loop_get_batch", "main", "memory_run", "speed_run", "write_token_file"]

MIB = 2**20


def loop_get_batch(
    tokens: np.ndarray, batch_size: int, context_length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-row baseline: the same starts, one slice and one copy per row."""
    starts = torch.randint(len(tokens) - context_length, (batch_size,), generator=generator).tolist()
    x = torch.stack([torch.from_numpy(tokens[s : s + context_length].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(tokens[s + 1 : s + 1 + context_length].astype(np.int64)) for s in starts])
    return x, y


def write_token_file(path: str, num_tokens: int, chunk: int = 32 * MIB) -> None:
    """``num_tokens`` uint16 tokens (``i * 2654435761 mod 50257``: every value
    of a GPT-2-sized vocabulary, no run of equal tokens), written in chunks."""
    with open(path, "wb") as f:
        for lo in range(0, num_tokens, chunk):
            ids = np.arange(lo, min(lo + chunk, num_tokens), dtype=np.uint64)
            ((ids * np.uint64(2654435761)) % np.uint64(50257)).astype(np.uint16).tofile(f)


def speed_run(tokens: np.ndarray, batch_size: int, context_length: int, repeats: int) -> dict[str, Any]:
    """Median seconds per batch of the reference and the loop, interleaved."""
    samplers: dict[str, Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]] = {
        "reference get_batch": lambda g: get_batch(tokens, batch_size, context_length, "cpu", generator=g),
        "per-row loop": lambda g: loop_get_batch(tokens, batch_size, context_length, g),
    }
    gens = {name: torch.Generator().manual_seed(0) for name in samplers}
    first = {name: fn(gens[name]) for name, fn in samplers.items()}  # warm-up, and the same batch
    a, b = first.values()
    same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    times: dict[str, list[float]] = {name: [] for name in samplers}
    order = list(samplers)
    for r in range(repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            samplers[name](gens[name])
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    tokens_per_batch = batch_size * context_length
    return {
        "medians": medians,
        "tokens_per_s": {name: tokens_per_batch / m for name, m in medians.items()},
        "speedup": medians["per-row loop"] / medians["reference get_batch"],
        "same_batches": same,
    }


def _rss() -> tuple[int, int | None]:
    """(RSS, its anonymous part where the OS tells it apart, else None)."""
    info = psutil.Process().memory_info()
    shared = getattr(info, "shared", None)  # Linux: file-backed + shmem resident pages
    return info.rss, (info.rss - shared) if shared is not None else None


def memory_run(path: str, batches: int, batch_size: int, context_length: int, reopen: bool) -> dict[str, Any]:
    """RSS growth while sampling ``batches`` batches from the file at ``path``,
    through one memmap (``reopen=False``) or a fresh one per batch."""
    g = torch.Generator().manual_seed(1)
    tokens = load_tokens(path)
    get_batch(tokens, batch_size, context_length, "cpu", generator=g)  # warm-up: lazy imports, allocator
    rss0, anon0 = _rss()
    peak, peak_anon = rss0, anon0
    start = time.perf_counter()
    for i in range(batches):
        if reopen:
            tokens = load_tokens(path)
        get_batch(tokens, batch_size, context_length, "cpu", generator=g)
        if i % 50 == 49:
            rss, anon = _rss()
            peak = max(peak, rss)
            peak_anon = max(peak_anon, anon) if anon is not None and peak_anon is not None else None
    elapsed = time.perf_counter() - start
    rss1, anon1 = _rss()
    del tokens
    return {
        "reopen": reopen,
        "batches": batches,
        "seconds": elapsed,
        "rss_growth": max(peak, rss1) - rss0,
        "anon_growth": (max(peak_anon, anon1) - anon0) if anon0 is not None and anon1 is not None
        and peak_anon is not None else None,
    }


def report(result: dict[str, Any]) -> str:
    s = result["speed"]
    b, t = result["batch_size"], result["context_length"]
    lines = [
        f"get_batch, B={b}, T={t}, uint16 memmap of {result['file_bytes'] / MIB:,.0f} MiB (warm page cache), "
        f"median of {result['repeats']} interleaved batches, {torch.get_num_threads()} torch threads",
        "",
        "| sampler | median per batch (ms) | tokens/s |",
        "|---|---|---|",
    ]
    for name, m in s["medians"].items():
        lines.append(f"| {name} | {m * 1e3:.3f} | {s['tokens_per_s'][name] / 1e6:,.1f} M |")
    lines += ["", f"speedup of the reference over the loop: {s['speedup']:.1f}x "
              f"(identical batches: {s['same_batches']})", ""]
    lines += [
        f"resident memory while sampling {result['memory'][0]['batches']:,} batches (B={b}, T={t}); "
        "growth = peak over the run minus the start",
        "",
        "| memmap | RSS growth (MiB) | of which anonymous (MiB) | seconds |",
        "|---|---|---|---|",
    ]
    for m in result["memory"]:
        anon = "n/a" if m["anon_growth"] is None else f"{m['anon_growth'] / MIB:.1f}"
        which = "re-opened every batch" if m["reopen"] else "one for the whole run"
        lines.append(f"| {which} | {m['rss_growth'] / MIB:.1f} | {anon} | {m['seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file-mib", type=int, default=2048, help="token file size (default 2048 MiB)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--context-length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=200, help="timed batches per sampler (default 200)")
    parser.add_argument("--batches", type=int, default=1000, help="batches for the memory run (default 1000)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write the file (deleted after)")
    args = parser.parse_args(argv)
    num_tokens = args.file_mib * MIB // 2
    fd, path = tempfile.mkstemp(prefix="tokens-", suffix=".bin", dir=args.dir)
    os.close(fd)
    try:
        start = time.perf_counter()
        write_token_file(path, num_tokens)
        print(f"wrote {args.file_mib} MiB to {path} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        tokens = load_tokens(path)
        speed = speed_run(tokens, args.batch_size, args.context_length, args.repeats)
        del tokens
        memory = [memory_run(path, args.batches, args.batch_size, args.context_length, reopen)
                  for reopen in (False, True)]
    finally:
        os.unlink(path)
    result = {"file_bytes": num_tokens * 2, "batch_size": args.batch_size, "context_length": args.context_length,
              "repeats": args.repeats, "speed": speed, "memory": memory}
    print(report(result))
    return result


if __name__ == "__main__":
    main()

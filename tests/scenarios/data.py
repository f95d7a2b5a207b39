"""Scenarios for handout §5: generators, files and memory maps built from plain specs.

NumPy dtypes travel as names ("uint16") and are turned back into NumPy types
here; files live in a private temporary folder that is removed afterwards.
"""

from __future__ import annotations

import os
import tempfile
import tracemalloc
from typing import Any

import numpy as np
import psutil
import torch


def _np_type(name: str) -> Any:
    return getattr(np, name)


def batch_with_seed(lab: Any, tokens: Any, batch_size: int, context_length: int, seed: int) -> Any:
    """``get_batch`` with a fresh ``torch.Generator`` seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return lab.data.get_batch(tokens, batch_size, context_length, "cpu", generator=g)


def batches_reproducible(lab: Any, tokens: Any, batch_size: int, context_length: int, seed: int) -> Any:
    """Two batches from generators seeded alike, one from another seed, and two
    from the global RNG seeded alike (``generator=None``)."""
    get = lab.data.get_batch
    same_a = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed))
    same_b = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed))
    other = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed + 1))
    torch.manual_seed(seed)
    global_a = get(tokens, batch_size, context_length, "cpu")
    torch.manual_seed(seed)
    global_b = get(tokens, batch_size, context_length, "cpu")
    return {"same": (same_a, same_b), "other": other, "global": (global_a, global_b)}


def batch_with_generator_of(lab: Any, tokens: Any, generator_kind: str) -> Any:
    """``get_batch`` with a generator argument that is not a CPU torch.Generator."""
    bad = {"int": 0, "numpy": np.random.default_rng(0)}[generator_kind]
    return lab.data.get_batch(tokens, 2, 2, "cpu", generator=bad)


def save_and_read_back(lab: Any, tokens: Any, dtype_name: str | None) -> Any:
    """The raw bytes ``save_tokens`` writes (with ``dtype`` left at its default
    when ``dtype_name`` is None), and whether it wrote anything else."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        if dtype_name is None:
            lab.data.save_tokens(path, tokens)
        else:
            lab.data.save_tokens(path, tokens, _np_type(dtype_name))
        with open(path, "rb") as f:
            raw = f.read()
        return {"bytes": raw, "files": sorted(os.listdir(d))}


def load_written(lab: Any, raw: bytes, dtype_name: str | None) -> Any:
    """Write ``raw`` to a file and report what ``load_tokens`` returns for it."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        with open(path, "wb") as f:
            f.write(raw)
        mm = lab.data.load_tokens(path) if dtype_name is None else lab.data.load_tokens(path, _np_type(dtype_name))
        out = {
            "is_memmap": isinstance(mm, np.memmap),
            "type": type(mm).__name__,
            "dtype": str(mm.dtype),
            "shape": tuple(mm.shape),
            "values": np.array(mm),
            "writeable": bool(mm.flags.writeable),
        }
        del mm  # unmap before the folder goes
        return out


def load_missing(lab: Any) -> Any:
    with tempfile.TemporaryDirectory() as d:
        return lab.data.load_tokens(os.path.join(d, "no-such-file.bin"))


def save_then_load(lab: Any, tokens: Any, dtype_name: str) -> Any:
    """``load_tokens(save_tokens(tokens))`` as a plain array."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        lab.data.save_tokens(path, tokens, _np_type(dtype_name))
        mm = lab.data.load_tokens(path, _np_type(dtype_name))
        values = np.array(mm)
        del mm
        return values


def memmap_footprint(lab: Any, n_tokens: int, batch_size: int, context_length: int, seed: int) -> Any:
    """Sample one batch from a freshly mapped ``n_tokens``-token uint16 file and
    report what it cost: the peak of Python/NumPy allocations (tracemalloc)
    during the call and the growth of the resident set, which counts every
    page of the mapping the call touched (for as long as the mapping lives).

    The file is sparse (all zeros, no disk blocks), so a large one costs
    nothing to create; reading it whole costs its full size in memory.
    """
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        with open(path, "wb") as f:
            f.truncate(n_tokens * 2)
        mm = np.memmap(path, dtype=np.uint16, mode="r")
        proc = psutil.Process()
        g = torch.Generator().manual_seed(seed)
        # Warm torch's own lazy initialisation outside the measured window.
        torch.randint(3, (2,), generator=torch.Generator().manual_seed(0)).numpy()
        rss_before = proc.memory_info().rss
        already = tracemalloc.is_tracing()  # e.g. python -X tracemalloc: leave it running
        if already:
            tracemalloc.reset_peak()
        else:
            tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            x, y = lab.data.get_batch(mm, batch_size, context_length, "cpu", generator=g)
            _, peak = tracemalloc.get_traced_memory()
            peak -= before
        finally:
            if not already:
                tracemalloc.stop()
        rss_after = proc.memory_info().rss
        del mm
        return {
            "file_bytes": n_tokens * 2,
            "traced_peak": peak,
            "rss_growth": rss_after - rss_before,
            "x": x,
            "y": y,
        }


def batch_on_device(lab: Any, tokens: Any, batch_size: int, context_length: int, seed: int, device: str) -> Any:
    """``get_batch`` on ``device`` with a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return lab.data.get_batch(tokens, batch_size, context_length, device, generator=g)


def save_twice(lab: Any, first: Any, second: Any, dtype_name: str | None) -> Any:
    """``save_tokens`` of ``first`` then of ``second`` to the same path; the raw
    bytes at the path afterwards and what ``load_tokens`` reads there."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        args = () if dtype_name is None else (_np_type(dtype_name),)
        lab.data.save_tokens(path, first, *args)
        lab.data.save_tokens(path, second, *args)
        with open(path, "rb") as f:
            raw = f.read()
        mm = lab.data.load_tokens(path, *args)
        values = np.array(mm)
        del mm
        return {"bytes": raw, "values": values, "files": sorted(os.listdir(d))}

"""Scenarios for handout §5: generators, files and memory maps built from plain specs.

NumPy dtypes travel as names ("uint16") and are turned back into NumPy types
here; files live in a private temporary folder that is removed afterwards.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import torch


def _np_type(name: str) -> Any:
    return getattr(np, name)


def batch_with_seed(modules: Any, tokens: Any, batch_size: int, context_length: int, seed: int) -> Any:
    """``get_batch`` with a fresh ``torch.Generator`` seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return modules.data.get_batch(tokens, batch_size, context_length, "cpu", generator=g)


def batches_reproducible(modules: Any, tokens: Any, batch_size: int, context_length: int, seed: int) -> Any:
    """Two batches from generators seeded alike, one from another seed, and two
    from the global RNG seeded alike (``generator=None``)."""
    get = modules.data.get_batch
    same_a = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed))
    same_b = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed))
    other = get(tokens, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(seed + 1))
    torch.manual_seed(seed)
    global_a = get(tokens, batch_size, context_length, "cpu")
    torch.manual_seed(seed)
    global_b = get(tokens, batch_size, context_length, "cpu")
    return {"same": (same_a, same_b), "other": other, "global": (global_a, global_b)}


def batch_with_generator_of(modules: Any, tokens: Any, generator_kind: str) -> Any:
    """``get_batch`` with a generator argument that is not a CPU torch.Generator."""
    bad = {"int": 0, "numpy": np.random.default_rng(0)}[generator_kind]
    return modules.data.get_batch(tokens, 2, 2, "cpu", generator=bad)


def save_and_read_back(modules: Any, tokens: Any, dtype_name: str | None) -> Any:
    """The raw bytes ``save_tokens`` writes (with ``dtype`` left at its default
    when ``dtype_name`` is None), and whether it wrote anything else."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        if dtype_name is None:
            modules.data.save_tokens(path, tokens)
        else:
            modules.data.save_tokens(path, tokens, _np_type(dtype_name))
        with open(path, "rb") as f:
            raw = f.read()
        return {"bytes": raw, "files": sorted(os.listdir(d))}


def load_written(modules: Any, raw: bytes, dtype_name: str | None) -> Any:
    """Write ``raw`` to a file and report what ``load_tokens`` returns for it."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        with open(path, "wb") as f:
            f.write(raw)
        mm = (modules.data.load_tokens(path) if dtype_name is None
              else modules.data.load_tokens(path, _np_type(dtype_name)))
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


def load_missing(modules: Any) -> Any:
    with tempfile.TemporaryDirectory() as d:
        return modules.data.load_tokens(os.path.join(d, "no-such-file.bin"))


def load_directory(modules: Any) -> Any:
    """``load_tokens`` of a path that is a directory."""
    with tempfile.TemporaryDirectory() as d:
        return modules.data.load_tokens(d)


def save_then_load(modules: Any, tokens: Any, dtype_name: str) -> Any:
    """``load_tokens(save_tokens(tokens))`` as a plain array."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        modules.data.save_tokens(path, tokens, _np_type(dtype_name))
        mm = modules.data.load_tokens(path, _np_type(dtype_name))
        values = np.array(mm)
        del mm
        return values


def sample_file(modules: Any, path: str, batch_size: int, context_length: int, seed: int) -> Any:
    """``get_batch`` from a read-only ``np.memmap`` of the uint16 token file at
    ``path`` (written by the test), with a generator seeded with ``seed``. The
    test reads this process's peak memory from outside and finds each row in
    the file itself (see ``Impl.measured_scenario``)."""
    mm = np.memmap(path, dtype=np.uint16, mode="r")
    try:
        generator = torch.Generator().manual_seed(seed)
        return modules.data.get_batch(mm, batch_size, context_length, "cpu", generator=generator)
    finally:
        del mm


def batch_on_device(modules: Any, tokens: Any, batch_size: int, context_length: int, seed: int, device: str) -> Any:
    """``get_batch`` on ``device`` with a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return modules.data.get_batch(tokens, batch_size, context_length, device, generator=g)


def batch_of_cuda_tokens(modules: Any, tokens: Any, batch_size: int, context_length: int) -> Any:
    """``get_batch`` of the tokens moved to the GPU first (the wire carries CPU tensors)."""
    return modules.data.get_batch(torch.as_tensor(tokens).cuda(), batch_size, context_length, "cpu")


def save_twice(modules: Any, first: Any, second: Any, dtype_name: str | None) -> Any:
    """``save_tokens`` of ``first`` then of ``second`` to the same path; the raw
    bytes at the path afterwards and what ``load_tokens`` reads there."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokens.bin")
        args = () if dtype_name is None else (_np_type(dtype_name),)
        modules.data.save_tokens(path, first, *args)
        modules.data.save_tokens(path, second, *args)
        with open(path, "rb") as f:
            raw = f.read()
        mm = modules.data.load_tokens(path, *args)
        values = np.array(mm)
        del mm
        return {"bytes": raw, "values": values, "files": sorted(os.listdir(d))}


def batch_of_a_strided_view(modules: Any, tokens: Any, step: int, batch_size: int, context_length: int, seed: int,
                            as_tensor: bool) -> Any:
    """``get_batch`` on ``tokens[::step]`` (a NumPy view, or with ``as_tensor`` a
    tensor view, neither contiguous), with a generator seeded ``seed``."""
    view = torch.from_numpy(np.asarray(tokens).astype(np.int64))[::step] if as_tensor else np.asarray(tokens)[::step]
    return modules.data.get_batch(view, batch_size, context_length, "cpu", torch.Generator().manual_seed(seed))


def batch_after_manual_seed(modules: Any, tokens: Any, batch_size: int, context_length: int, seed: int) -> Any:
    """``get_batch`` with ``generator=None`` right after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return modules.data.get_batch(tokens, batch_size, context_length, "cpu")

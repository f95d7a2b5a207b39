"""Handout §5: token files on disk, memory-mapped, sampled into training batches."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from ._validate import require_int

__all__ = ["get_batch", "load_tokens", "save_tokens"]


def _token_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from e
    if dt.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    return dt


def _as_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write ``tokens`` (1-D integers) to ``path`` as raw ``dtype`` values, no header."""
    dt = _token_dtype(dtype)
    target = _as_path(path)
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"tokens must be integers, got dtype {arr.dtype}")
    if arr.size:
        # A silent wrap-around (70000 -> 4464 in uint16) would corrupt the data
        # set without any error, so out-of-range ids are refused.
        info = np.iinfo(dt)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise ValueError(f"tokens span [{lo}, {hi}], outside the range of {dt} [{info.min}, {info.max}]")
    arr.astype(dt, copy=False).tofile(target)


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map ``path`` read-only as a 1-D array of ``dtype``; nothing is read until indexed."""
    dt = _token_dtype(dtype)
    target = _as_path(path)
    size = os.path.getsize(target)  # FileNotFoundError names the path
    if size == 0 or size % dt.itemsize:
        raise ValueError(f"{target}: {size} bytes is not a positive whole number of {dt} tokens")
    return np.memmap(target, dtype=dt, mode="r")


def _device(device: Any) -> torch.device:
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device {device!r} is not a valid torch device: {e}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r}: MPS is not available on this machine")
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r}: expected cpu, cuda or mps")
    return dev


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample ``batch_size`` windows of ``context_length + 1`` tokens; x is each
    window without its last token, y without its first (int64, on ``device``)."""
    if isinstance(tokens, torch.Tensor):
        if tokens.device.type != "cpu":
            raise ValueError(f"tokens must live in host memory, got a tensor on {tokens.device}")
        tokens = tokens.detach().numpy()
    if not isinstance(tokens, np.ndarray):
        raise TypeError(f"tokens must be a 1-D NumPy array (np.memmap included), got {type(tokens).__name__}")
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"tokens must hold integers, got dtype {tokens.dtype}")
    b = require_int("batch_size", batch_size, minimum=1)
    t = require_int("context_length", context_length, minimum=1)
    dev = _device(device)
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise TypeError(f"generator must be a CPU torch.Generator or None, got {generator!r}")
    n = len(tokens)
    if n < t + 1:
        raise ValueError(f"tokens has {n} tokens; context_length {t} needs at least {t + 1} (x plus one target)")

    # Valid starts are 0 .. n-t-1 inclusive (n-t of them): the window
    # [s, s+t] must fit, because y reaches one token past x.
    starts = torch.randint(n - t, (b,), generator=generator).numpy()
    # A strided view of every window (reads nothing); indexing it with `starts`
    # copies exactly the b sampled rows, so a memmap only pages those in.
    windows = np.lib.stride_tricks.sliding_window_view(tokens, t + 1)[starts]

    # One int64 (b, t+1) tensor; x and y are views of it, shifted by one (no
    # copy: flatten them with .reshape, not .view). NumPy casts the ids on one
    # thread: a tensor this small gains nothing from torch's intra-op threads,
    # and waking them costs milliseconds on a busy machine.
    if dev.type == "cuda":
        # Pinned host memory lets the copy run as an asynchronous DMA that
        # overlaps the GPU's work on the previous batch.
        host = torch.empty(windows.shape, dtype=torch.int64, pin_memory=True)
        host.numpy()[...] = windows
        batch = host.to(dev, non_blocking=True)
    else:
        batch = torch.from_numpy(windows.astype(np.int64, copy=False)).to(dev)
    return batch[:, :-1], batch[:, 1:]

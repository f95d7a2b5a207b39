"""Handout §5: raw token files, memmaps and batch sampling."""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    try:
        dt = np.dtype(dtype)
    except Exception:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from None
    if dt.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    info = np.iinfo(dt)
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must hold integers, got a tensor of {tokens.dtype}")
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got {tokens.dim()} dimensions")
        arr = tokens.detach().cpu().numpy()
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens must hold integers, got an array of {tokens.dtype}")
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dimensions")
        arr = tokens
    else:
        if isinstance(tokens, (str, bytes, dict)) or not hasattr(tokens, "__len__"):
            raise TypeError(f"tokens must be a 1-D sequence of integers, got {type(tokens).__name__}")
        tmp = list(tokens)
        for v in tmp:
            if isinstance(v, (list, tuple, np.ndarray, torch.Tensor)):
                raise ValueError("tokens must be 1-D, got a nested sequence")
        for v in tmp:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
                raise TypeError(f"tokens must hold integers, got {v!r}")
        for v in tmp:
            if int(v) < info.min or int(v) > info.max:
                raise ValueError(f"token {int(v)} does not fit in dtype {dt} ({info.min}..{info.max})")
        np.array([int(v) for v in tmp], dtype=dt).tofile(os.fspath(path))
        return
    if arr.size > 0:
        lo = int(arr.min())
        hi = int(arr.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValueError(f"token {bad} does not fit in dtype {dt} ({info.min}..{info.max})")
    np.ascontiguousarray(arr).astype(dt).tofile(os.fspath(path))


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    try:
        dt = np.dtype(dtype)
    except Exception:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from None
    if dt.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no token file at path {p!r}")
    if os.path.isdir(p):
        raise IsADirectoryError(f"path {p!r} is a directory, not a token file")
    n = os.path.getsize(p)
    if n == 0:
        raise ValueError(f"token file at path {p!r} is empty")
    if n % dt.itemsize != 0:
        raise ValueError(f"size of {p!r} ({n} bytes) is not a multiple of {dt}'s {dt.itemsize} bytes")
    return np.memmap(p, dtype=dt, mode="r")


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must hold integers, got a tensor of {tokens.dtype}")
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens must hold integers, got an array of {tokens.dtype}")
    else:
        raise TypeError(f"tokens must be a NumPy array or a tensor, got {type(tokens).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
    if isinstance(context_length, bool) or not isinstance(context_length, int):
        raise TypeError(f"context_length must be an int, got {type(context_length).__name__}")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise TypeError(f"generator must be a CPU torch.Generator or None, got {generator!r}")
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dimensions")
    if isinstance(tokens, torch.Tensor) and tokens.device.type != "cpu":
        raise ValueError(f"tokens must be on the CPU, got a tensor on {tokens.device}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if context_length < 1:
        raise ValueError(f"context_length must be >= 1, got {context_length}")
    n = tokens.shape[0]
    if n < context_length + 1:
        raise ValueError(f"tokens has {n} tokens, needs at least context_length + 1 = {context_length + 1}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {device!r} is not a valid device") from None
    if dev.type == "cpu":
        pass
    elif dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA devices")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r}: MPS is not available")
    else:
        raise ValueError(f"device {device!r} is not supported (cpu, cuda, mps)")

    x = tokens.numpy() if isinstance(tokens, torch.Tensor) else tokens
    starts = torch.randint(n - context_length, (batch_size,), generator=generator)
    win = np.lib.stride_tricks.sliding_window_view(x, context_length + 1)
    rows = win[starts.numpy()].astype(np.int64)
    w = torch.from_numpy(rows)
    if dev.type == "cuda":
        w = w.pin_memory().to(dev, non_blocking=True)
    elif dev.type != "cpu":
        w = w.to(dev)
    return w[:, :-1], w[:, 1:]

"""Handout §5: raw token files, memory-mapped and sampled into training batches."""

from __future__ import annotations

import os
from numbers import Integral
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def _path(path):
    """Validate a str/PathLike path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def _int_dtype(dtype):
    """NumPy integer dtype, or TypeError."""
    try:
        dt = np.dtype(dtype)
    except Exception as e:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype") from e
    if dt.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    return dt


def _pos(n, name):
    """Validate an int >= 1."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return n


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write tokens as headerless raw dtype values."""
    p, dt = _path(path), _int_dtype(dtype)
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be a sequence of integers, got a string")
    a = tokens.detach().cpu().numpy() if isinstance(tokens, Tensor) else np.asarray(tokens)
    if a.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {a.shape}")
    if a.size == 0:
        a = a.astype(dt)
    elif a.dtype == object:
        if not all(isinstance(t, Integral) and not isinstance(t, (bool, np.bool_)) for t in a):
            raise TypeError("tokens must hold integers")
    elif a.dtype.kind not in "iu":
        raise TypeError(f"tokens must hold integers, got {a.dtype}")
    if a.size and (int(a.min()) < (i := np.iinfo(dt)).min or int(a.max()) > i.max):
        raise ValueError(f"tokens must fit in {dt}: range [{i.min}, {i.max}]")
    with open(p, "wb") as f:
        f.write(np.ascontiguousarray(a.astype(dt)).tobytes())


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Read-only memmap of a raw token file."""
    p, dt = _path(path), _int_dtype(dtype)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no token file at {p!r}")
    if os.path.isdir(p):
        raise ValueError(f"path {p!r} is a directory")
    n = os.path.getsize(p)
    if n == 0 or n % dt.itemsize:
        raise ValueError(f"file {p!r} of {n} bytes is empty or not a multiple of {dt}'s {dt.itemsize} bytes")
    return np.memmap(p, dtype=dt, mode="r")


def _device(device):
    """Validated torch.device that exists here."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        d = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device {device!r} is not a valid device") from e
    ok = {
        "cpu": lambda: True,
        "cuda": lambda: torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count(),
        "mps": lambda: torch.backends.mps.is_available() and (d.index or 0) == 0,
    }.get(d.type, lambda: False)()
    if not ok:
        raise ValueError(f"device {device!r} is not available")
    return d


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Random (x, y) windows, y shifted by one, gathered in one shot."""
    if isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens must hold integers, got {tokens.dtype}")
    elif isinstance(tokens, Tensor):
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must hold integers, got {tokens.dtype}")
        if tokens.device.type != "cpu":
            raise ValueError(f"tokens must be on the CPU, got {tokens.device}")
    else:
        raise TypeError(f"tokens must be a NumPy array or a tensor, got {type(tokens).__name__}")
    B, T = _pos(batch_size, "batch_size"), _pos(context_length, "context_length")
    d = _device(device)
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise TypeError("generator must be a CPU torch.Generator or None")
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dims")
    if (n := len(tokens)) < T + 1:
        raise ValueError(f"tokens has {n} tokens, fewer than context_length + 1 = {T + 1}")
    s = torch.randint(n - T, (B,), generator=generator).numpy()
    a = tokens.numpy() if isinstance(tokens, Tensor) else tokens
    w = torch.from_numpy(np.lib.stride_tricks.sliding_window_view(a, T + 1)[s].astype(np.int64))
    if d.type == "cuda":
        w = w.pin_memory().to(d, non_blocking=True)
    elif d.type != "cpu":
        w = w.to(d)
    return w[:, :-1], w[:, 1:]

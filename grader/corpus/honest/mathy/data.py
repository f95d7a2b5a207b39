"""§5  Token files: raw on disk, memory-mapped back, sampled into windows.

With n tokens and context T, a window at s covers tokens s .. s + T, so the
valid starts are s in {0, ..., n - T - 1}, |S| = n - T, drawn uniformly:

    x_i = tokens[s_i : s_i + T],    y_i = tokens[s_i + 1 : s_i + T + 1]
"""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from numpy.lib.stride_tricks import sliding_window_view
from torch import Tensor


def check_path(path: object) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def integer_dtype(dtype: object) -> np.dtype:
    """dtype as a NumPy integer dtype, or TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from None
    if not np.issubdtype(dt, np.integer):
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    return dt


def positive_int(n: object, name: str) -> int:
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return int(n)


def as_array(tokens: Any) -> np.ndarray:
    """tokens as a NumPy array (a tensor moved to the CPU first)."""
    if isinstance(tokens, Tensor):
        return tokens.detach().cpu().numpy()
    return np.asarray(tokens)


def integers_of(a: np.ndarray) -> np.ndarray:
    """a in Z^n, or TypeError: bools and floats are not token ids."""
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype == object and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in a.flat):
        return a
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"tokens must hold integers, got dtype {a.dtype}")
    return a


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write tokens as raw dtype values, refusing any id outside [min dtype, max dtype]."""
    p, dt = check_path(path), integer_dtype(dtype)
    a = integers_of(as_array(tokens))
    if a.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {a.ndim} dimensions")
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    if a.size and not (lo <= int(a.min()) and int(a.max()) <= hi):
        raise ValueError(f"tokens must lie in [{lo}, {hi}] to fit {dt}, got [{int(a.min())}, {int(a.max())}]")
    a.astype(dt).tofile(p)


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """The file at path as a read-only 1-D memmap of n = bytes / itemsize tokens."""
    p, dt = check_path(path), integer_dtype(dtype)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no token file at {p}")
    if os.path.isdir(p):
        raise IsADirectoryError(f"{p} is a directory, not a token file")
    size = os.path.getsize(p)
    if size == 0 or size % dt.itemsize:
        raise ValueError(f"{p} holds {size} bytes: not a positive multiple of {dt.itemsize} ({dt})")
    return np.memmap(p, dtype=dt, mode="r")


def check_device(device: object) -> torch.device:
    """device as a torch.device that exists here, or TypeError / ValueError."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        d = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device={device!r} is not a device: {err}") from None
    available = {
        "cpu": lambda: d.index in (None, 0),
        "cuda": lambda: torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count(),
        "mps": lambda: torch.backends.mps.is_available(),
    }
    if d.type not in available or not available[d.type]():
        raise ValueError(f"device={device!r} is not available here")
    return d


def check_tokens(tokens: object) -> int:
    """n = len(tokens) for a 1-D integer array or CPU tensor."""
    if isinstance(tokens, Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must hold integers, got {tokens.dtype}")
        if tokens.device.type != "cpu":
            raise ValueError(f"tokens must be on the CPU, got {tokens.device}")
    elif isinstance(tokens, np.ndarray):
        if not np.issubdtype(tokens.dtype, np.integer):
            raise TypeError(f"tokens must hold integers, got {tokens.dtype}")
    else:
        raise TypeError(f"tokens must be a NumPy array or a tensor, got {type(tokens).__name__}")
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dimensions")
    return int(tokens.shape[0])


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """s ~ U{0, ..., n - T - 1}^B;  W_i = tokens[s_i : s_i + T + 1];  (x, y) = (W[:, :-1], W[:, 1:])."""
    n = check_tokens(tokens)
    B, T = positive_int(batch_size, "batch_size"), positive_int(context_length, "context_length")
    d = check_device(device)
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise TypeError(f"generator must be a CPU torch.Generator or None, got {generator!r}")
    if n < T + 1:
        raise ValueError(f"tokens holds n={n} tokens, fewer than context_length + 1 = {T + 1}")
    s = torch.randint(n - T, (B,), generator=generator)
    if isinstance(tokens, Tensor):
        W = tokens.unfold(0, T + 1, 1)[s].to(torch.int64)
    else:
        W = torch.from_numpy(sliding_window_view(tokens, T + 1)[s.numpy()].astype(np.int64))
    if d.type == "cuda":
        W = W.pin_memory().to(d, non_blocking=True)
    elif d.type != "cpu":
        W = W.to(d)
    return W[:, :-1], W[:, 1:]

"""Raw token files, memory-mapped loading and vectorised batch sampling."""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def _path(path: object) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def _int_dtype(dtype: object) -> np.dtype:
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype") from None
    if resolved.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {resolved}")
    return resolved


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _is_int_scalar(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _as_array(tokens: Any) -> np.ndarray:
    """Tokens as a NumPy array without any lossy conversion."""
    if isinstance(tokens, Tensor):
        return tokens.detach().cpu().numpy()
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be a sequence of integers, not a string")
    try:
        return np.asarray(tokens)
    except (ValueError, OverflowError):
        # ragged or out-of-range nested data: keep Python objects and judge later
        return np.asarray(tokens, dtype=object)


def _integer_values(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "iu":
        return array
    if array.dtype.kind == "O" and all(map(_is_int_scalar, array.ravel())):
        return array
    raise TypeError(f"tokens must hold integers, got dtype {array.dtype}")


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write token ids as headerless raw values of dtype."""
    target = _path(path)
    kind = _int_dtype(dtype)
    array = _as_array(tokens)
    if array.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {array.ndim} dimensions")
    if array.size == 0:
        np.empty(0, dtype=kind).tofile(target)
        return
    values = _integer_values(array)
    limits = np.iinfo(kind)
    low, high = int(values.min()), int(values.max())
    if low < limits.min or high > limits.max:
        raise ValueError(f"tokens span [{low}, {high}], outside {kind}'s range [{limits.min}, {limits.max}]")
    values.astype(kind).tofile(target)


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map a raw token file read-only, reading nothing yet."""
    source = _path(path)
    kind = _int_dtype(dtype)
    if os.path.isdir(source):
        raise ValueError(f"path {source!r} is a directory")
    if not os.path.exists(source):
        raise FileNotFoundError(f"no token file at {source!r}")
    size = os.path.getsize(source)
    if size == 0:
        raise ValueError(f"token file {source!r} is empty")
    if size % kind.itemsize:
        raise ValueError(f"token file size {size} is not a multiple of {kind}'s {kind.itemsize} bytes")
    return np.memmap(source, dtype=kind, mode="r")


def _device(device: object) -> torch.device:
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"device {device!r} is not a device: {err}") from None
    checks = {
        "cpu": lambda d: True,
        "cuda": lambda d: torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count(),
        "mps": lambda d: torch.backends.mps.is_available() and (d.index or 0) == 0,
    }
    if not checks.get(resolved.type, lambda d: False)(resolved):
        raise ValueError(f"device {device!r} is not available here")
    return resolved


def _token_array(tokens: object) -> np.ndarray:
    if isinstance(tokens, Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
        if tokens.device.type != "cpu":
            raise ValueError(f"tokens must be on the CPU, got {tokens.device}")
        array = tokens.numpy()
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens must be an integer array, got {tokens.dtype}")
        array = tokens
    else:
        raise TypeError(f"tokens must be a NumPy array or a tensor, got {type(tokens).__name__}")
    if array.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {array.ndim} dimensions")
    return array


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample (x, y) windows, y shifted by one, as int64 tensors on device."""
    array = _token_array(tokens)
    rows = _positive_int(batch_size, "batch_size")
    width = _positive_int(context_length, "context_length")
    target = _device(device)
    if generator is not None and not (isinstance(generator, torch.Generator) and generator.device.type == "cpu"):
        raise TypeError("generator must be None or a CPU torch.Generator")
    if len(array) < width + 1:
        raise ValueError(f"tokens holds {len(array)} tokens; context_length {width} needs at least {width + 1}")
    starts = torch.randint(len(array) - width, (rows,), generator=generator)
    # a strided view of every window reads nothing; fancy indexing copies the chosen rows only
    windows = np.lib.stride_tricks.sliding_window_view(array, width + 1)[starts.numpy()]
    batch = torch.from_numpy(windows.astype(np.int64, copy=False))
    if target.type == "cuda":
        batch = batch.pin_memory().to(target, non_blocking=True)
    elif target.type != "cpu":
        batch = batch.to(target)
    return batch[:, :-1], batch[:, 1:]

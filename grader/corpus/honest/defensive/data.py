"""Handout §5: raw token files, read-only memory maps and vectorised batch sampling."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

# torch's index dtype, required by cross_entropy targets and embeddings.
_BATCH_DTYPE = np.int64
_INTEGER_KINDS = frozenset({"i", "u"})
_ACCELERATOR_TYPES = frozenset({"cuda", "mps"})
_TORCH_INTEGER_DTYPES = frozenset(
    {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64}
)


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_path(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"'{name}' must be a str or os.PathLike, received {type(value).__name__}")
    resolved = os.fspath(value)
    if not isinstance(resolved, str):
        raise TypeError(f"'{name}' must name a path as text, received {type(resolved).__name__}")
    return resolved


def _require_integer_dtype(name: str, value: object) -> np.dtype:
    try:
        dtype = np.dtype(value)  # type: ignore[arg-type]
    except TypeError as error:
        raise TypeError(f"'{name}' is not a NumPy dtype: {error}") from None
    if dtype.kind not in _INTEGER_KINDS:
        raise TypeError(f"'{name}' must be a NumPy integer dtype, received {dtype}")
    return dtype


def _require_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{name}' must be an int, received {type(value).__name__}")
    if value < 1:
        raise ValueError(f"'{name}' must be at least 1, received {value}")
    return value


def _require_cpu_generator(name: str, value: object) -> torch.Generator | None:
    if value is None:
        return None
    if not isinstance(value, torch.Generator):
        raise TypeError(f"'{name}' must be None or a torch.Generator, received {type(value).__name__}")
    if value.device.type != "cpu":
        raise TypeError(f"'{name}' must be a CPU generator, received one on {value.device}")
    return value


def _require_available_device(name: str, value: object) -> torch.device:
    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"'{name}' must be a str or torch.device, received {type(value).__name__}")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"'{name}' does not name a device: {error}") from None
    if not _device_is_available(device):
        raise ValueError(f"'{name}' names {device}, which is not available on this machine")
    return device


def _device_is_available(device: torch.device) -> bool:
    if device.type == "cpu":
        return device.index in (None, 0)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        return device.index is None or 0 <= device.index < torch.cuda.device_count()
    if device.type == "mps":
        return bool(torch.backends.mps.is_available()) and device.index in (None, 0)
    return False


def _require_token_source(name: str, value: object) -> np.ndarray:
    """A 1-D integer NumPy view of ``value`` (no copy; a memmap stays a memmap)."""
    if isinstance(value, Tensor):
        return _tensor_as_array(name, value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _INTEGER_KINDS:
            raise TypeError(f"'{name}' must hold integers, received dtype {value.dtype}")
        if value.ndim != 1:
            raise ValueError(f"'{name}' must be 1-D, received {value.ndim} dimensions")
        return value
    raise TypeError(f"'{name}' must be a NumPy array or a torch tensor, received {type(value).__name__}")


def _tensor_as_array(name: str, value: Tensor) -> np.ndarray:
    if value.dtype not in _TORCH_INTEGER_DTYPES:
        raise TypeError(f"'{name}' must hold integers, received dtype {value.dtype}")
    if value.device.type != "cpu":
        raise ValueError(f"'{name}' must be on the CPU, received a tensor on {value.device}")
    if value.dim() != 1:
        raise ValueError(f"'{name}' must be 1-D, received {value.dim()} dimensions")
    return value.detach().numpy()


# --------------------------------------------------------------------------- #
# private steps for save_tokens
# --------------------------------------------------------------------------- #
def _tokens_as_array(name: str, tokens: object) -> np.ndarray:
    if isinstance(tokens, Tensor):
        if tokens.numel() > 0 and tokens.dtype not in _TORCH_INTEGER_DTYPES:
            raise TypeError(f"'{name}' must hold integers, received dtype {tokens.dtype}")
        return tokens.detach().cpu().numpy()
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"'{name}' must be a sequence of integers, received {type(tokens).__name__}")
    try:
        return np.asarray(tokens)
    except (TypeError, ValueError) as error:
        raise TypeError(f"'{name}' cannot be read as integers: {error}") from None


def _checked_integer_values(name: str, values: np.ndarray) -> np.ndarray:
    if values.ndim != 1:
        raise ValueError(f"'{name}' must be 1-D, received {values.ndim} dimensions")
    if values.size == 0:
        return values.astype(np.int64)
    if values.dtype.kind in _INTEGER_KINDS:
        return values
    if values.dtype.kind == "O" and all(type(item) is int for item in values.tolist()):
        return values
    raise TypeError(f"'{name}' must hold integers, received dtype {values.dtype}")


def _require_fits(name: str, values: np.ndarray, dtype: np.dtype) -> None:
    if values.size == 0:
        return
    limits = np.iinfo(dtype)
    smallest, largest = int(values.min()), int(values.max())
    if smallest < int(limits.min) or largest > int(limits.max):
        raise ValueError(
            f"'{name}' holds values in [{smallest}, {largest}], outside {dtype}'s range "
            f"[{int(limits.min)}, {int(limits.max)}]"
        )


def _encode(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if values.dtype.kind == "O":
        return np.array(values.tolist(), dtype=dtype)
    return values.astype(dtype, copy=False)


# --------------------------------------------------------------------------- #
# private steps for get_batch
# --------------------------------------------------------------------------- #
def _draw_starts(num_starts: int, batch_size: int, generator: torch.Generator | None) -> np.ndarray:
    starts = torch.randint(num_starts, (batch_size,), generator=generator)
    return starts.numpy()


def _gather_windows(tokens: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
    """Copy only the sampled windows: fancy indexing a strided view reads just those rows."""
    every_window = np.lib.stride_tricks.sliding_window_view(tokens, window)
    return every_window[starts].astype(_BATCH_DTYPE, copy=False)


def _move_to_device(rows: np.ndarray, device: torch.device) -> Tensor:
    host = torch.from_numpy(np.ascontiguousarray(rows))
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        pinned = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
        pinned.copy_(host)
        return pinned.to(device, non_blocking=True)
    return host.to(device)


# --------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------- #
def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write the token ids as raw ``dtype`` values, refusing any id the dtype cannot hold."""
    target = _require_path("path", path)
    file_dtype = _require_integer_dtype("dtype", dtype)
    values = _checked_integer_values("tokens", _tokens_as_array("tokens", tokens))
    _require_fits("tokens", values, file_dtype)
    payload = _encode(values, file_dtype)
    with open(target, "wb") as handle:
        handle.write(payload.tobytes())


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map a raw token file read-only, lazily (pages are read only when touched)."""
    source = _require_path("path", path)
    file_dtype = _require_integer_dtype("dtype", dtype)
    if not os.path.exists(source):
        raise FileNotFoundError(f"'path': no file at {source!r}")
    if os.path.isdir(source):
        raise IsADirectoryError(f"'path': {source!r} is a directory, not a token file")
    size = os.path.getsize(source)
    if size == 0:
        raise ValueError(f"'path': {source!r} is empty")
    if size % file_dtype.itemsize != 0:
        raise ValueError(f"'path': {size} bytes is not a whole number of {file_dtype} values")
    return np.memmap(source, dtype=file_dtype, mode="r")


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample ``batch_size`` uniform windows; y is x shifted by one token; int64 on ``device``."""
    source = _require_token_source("tokens", tokens)
    rows_wanted = _require_positive_int("batch_size", batch_size)
    span = _require_positive_int("context_length", context_length)
    target = _require_available_device("device", device)
    rng = _require_cpu_generator("generator", generator)

    available = int(source.shape[0])
    if available < span + 1:
        raise ValueError(f"'tokens' holds {available} tokens; context_length={span} needs at least {span + 1}")

    starts = _draw_starts(available - span, rows_wanted, rng)
    windows = _move_to_device(_gather_windows(source, starts, span + 1), target)
    return windows[:, :-1], windows[:, 1:]

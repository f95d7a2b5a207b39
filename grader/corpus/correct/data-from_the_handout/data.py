"""Written from the handout alone: get_batch gathers a (B, T+1) index matrix from the memmap, save_tokens writes a mkstemp file and os.replace.

Handout §5: token files on disk, memory-mapped, sampled into training batches.

A tokenised corpus is one long array of token ids. It is saved as raw binary
(no header), mapped back with ``np.memmap`` so that nothing is read until it
is indexed, and sampled into (x, y) batches for next-token prediction.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def _check_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"path must be a str path, got {type(p).__name__}")
    return p


def _int_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy integer dtype, or TypeError naming ``dtype``."""
    if isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a NumPy integer dtype, got the torch dtype {dtype}")
    try:
        dt = np.dtype(dtype)
    except Exception as err:  # np.dtype raises TypeError for most junk
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from err
    if dt.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dt}")
    return dt


def _tokens_to_numpy(tokens: Any) -> np.ndarray:
    """``tokens`` (list, array or tensor) as a NumPy integer (or object-int) array."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype == torch.bool or tokens.dtype.is_floating_point or tokens.dtype.is_complex:
            raise TypeError(f"tokens must hold integers, got a tensor of {tokens.dtype}")
        return tokens.detach().cpu().numpy()
    if isinstance(tokens, np.ndarray):
        arr = tokens
    elif isinstance(tokens, (str, bytes, dict, set)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a 1-D sequence of integers, got {type(tokens).__name__}")
    else:
        try:
            arr = np.asarray(tokens)
        except (ValueError, TypeError) as err:
            raise ValueError(f"tokens must be a 1-D sequence of integers: {err}") from err
        if arr.size == 0 and arr.ndim == 1:
            return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind == "O":
        flat = arr.ravel()
        for v in flat:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"tokens must hold integers, found {type(v).__name__}: {v!r}")
        return arr
    if arr.dtype.kind not in "iu":
        raise TypeError(f"tokens must hold integers, got dtype {arr.dtype}")
    return arr


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write ``tokens`` to ``path`` as raw binary ``dtype`` values (no header),
    so that ``np.fromfile(path, dtype)`` gives them back. An existing file at
    ``path`` is replaced: afterwards it holds exactly these tokens.

    ``tokens`` is a 1-D sequence of integers: a list, a NumPy array or a tensor.

    Raises:
        TypeError: ``path`` is not a str/PathLike, ``dtype`` is not a NumPy
            integer dtype, or ``tokens`` does not hold integers.
        ValueError: ``tokens`` is not 1-D, or a token does not fit in ``dtype``
            (70000 in uint16 must not silently wrap around).
    """
    p = _check_path(path)
    dt = _int_dtype(dtype)
    arr = _tokens_to_numpy(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {arr.ndim} dimensions (shape {tuple(arr.shape)})")
    info = np.iinfo(dt)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValueError(
                f"tokens: value {bad} does not fit in {dt} (range {info.min}..{info.max})"
            )
    out = np.asarray(arr.astype(dt) if arr.dtype.kind != "O" else np.array([int(v) for v in arr], dtype=dt))
    # Write next to the target and rename onto it: a reader that has the old
    # file mapped keeps its pages, and a crash never leaves half a file.
    directory = os.path.dirname(os.path.abspath(p))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tokens-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(out.tobytes(order="C"))
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map the raw token file at ``path`` read-only as a 1-D ``np.memmap`` of
    ``dtype``. Nothing is read eagerly: pages are read when indexed.

    Raises:
        TypeError: ``path`` is not a str/PathLike, or ``dtype`` is not a NumPy
            integer dtype.
        FileNotFoundError: there is no file at ``path``.
        ValueError: the file is empty or its size is not a multiple of the
            dtype's size.
    """
    p = _check_path(path)
    dt = _int_dtype(dtype)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no token file at path {p!r}")
    size = os.path.getsize(p)
    if size == 0:
        raise ValueError(f"token file {p!r} is empty")
    if size % dt.itemsize:
        raise ValueError(
            f"token file {p!r} has {size} bytes, not a multiple of {dt}'s {dt.itemsize}-byte size"
        )
    return np.memmap(p, dtype=dt, mode="r", shape=(size // dt.itemsize,))


def _check_device(device: Any) -> torch.device:
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a valid device: {err}") from err
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
        return dev
    if dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"device {device!r}: MPS is not available")
        return dev
    raise ValueError(f"device {device!r} is not a supported device (cpu, cuda, mps)")


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample a batch of next-token-prediction examples from ``tokens``.

    ``tokens`` is a 1-D integer NumPy array (an ``np.memmap`` included) or a
    1-D integer CPU tensor of length ``n``. Returns ``(x, y)``, two int64
    tensors of shape ``(batch_size, context_length)`` on ``device``: row ``i``
    of x is ``tokens[s_i : s_i + context_length]`` and row ``i`` of y is
    ``tokens[s_i + 1 : s_i + context_length + 1]`` (x shifted by one). The
    starts ``s_i`` are independent and uniform over every valid start,
    ``0 .. n - context_length - 1`` inclusive, drawn in one call,
    ``torch.randint(n - context_length, (batch_size,), generator=generator)``
    (the global torch RNG when ``generator`` is None), so a seeded generator
    gives the same batch again, on any device.

    x and y may be views of one ``(batch_size, context_length + 1)`` tensor
    (flatten them with ``.reshape``, not ``.view``).

    Vectorised: no Python loop over the batch. Reads only the sampled windows
    (a memmap must not be read whole). For a CUDA ``device`` the batch is
    assembled in pinned host memory and copied with ``non_blocking=True``.

    Raises:
        TypeError: ``tokens`` is not an integer array/tensor, ``batch_size``
            or ``context_length`` is not an int, ``device`` is not a str or
            torch.device, or ``generator`` is not a CPU torch.Generator.
        ValueError: ``tokens`` is not 1-D or has fewer than
            ``context_length + 1`` tokens, ``batch_size`` or
            ``context_length`` is below 1, or ``device`` is not a valid,
            available device.
    """
    # ---- argument checks
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype == torch.bool or tokens.dtype.is_floating_point or tokens.dtype.is_complex:
            raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
        is_tensor = True
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens must be an integer array, got dtype {tokens.dtype}")
        is_tensor = False
    else:
        raise TypeError(f"tokens must be a NumPy integer array or an integer tensor, got {type(tokens).__name__}")
    for name, v in (("batch_size", batch_size), ("context_length", context_length)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    B, T = int(batch_size), int(context_length)
    dev = _check_device(device)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if generator.device.type != "cpu":
            raise TypeError(f"generator must be a CPU torch.Generator, got one on {generator.device}")
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
    if B < 1:
        raise ValueError(f"batch_size must be >= 1, got {B}")
    if T < 1:
        raise ValueError(f"context_length must be >= 1, got {T}")
    n = int(tokens.shape[0])
    if n < T + 1:
        raise ValueError(f"tokens has {n} tokens, fewer than context_length + 1 = {T + 1}")

    # ---- sample starts, then gather with one (B, T+1) index matrix
    starts = torch.randint(n - T, (B,), generator=generator)
    offsets = torch.arange(T + 1)
    index = starts.unsqueeze(1) + offsets.unsqueeze(0)  # (B, T+1) int64
    if is_tensor:
        src = tokens if tokens.device.type == "cpu" else tokens.cpu()
        windows = src[index].to(torch.int64)
    else:
        # fancy indexing a memmap reads only the touched pages; np.array makes
        # a plain int64 ndarray (not a memmap subclass)
        windows = torch.from_numpy(np.array(tokens[index.numpy()], dtype=np.int64, copy=True))
    if dev.type == "cuda":
        windows = windows.pin_memory().to(dev, non_blocking=True)
    elif dev.type != "cpu":
        windows = windows.to(dev)
    x = windows[:, :-1]
    y = windows[:, 1:]
    return x, y

"""Handout §5: raw token files, memory-mapped reading, vectorised batch sampling.

Argument checking is gathered in ``_TokenSource`` (what may be sampled from)
and ``_Target`` (where a batch may go); the sampling itself gathers every
window at once through a strided view of the token array.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def _check_path(path: object) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")


def _integer_dtype(dtype: Any) -> np.dtype:
    """Normalise ``dtype`` to a NumPy integer dtype or raise ``TypeError``.

    Args:
        dtype: Anything ``np.dtype`` understands.

    Returns:
        The normalised dtype.
    """
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from None
    if resolved.kind not in "iu":
        raise TypeError(f"dtype must be a NumPy integer dtype, got {resolved}")
    return resolved


def _as_int_array(tokens: Any) -> np.ndarray:
    """Turn a list, array or tensor of token ids into a 1-D integer array.

    Args:
        tokens: The ids to convert.

    Returns:
        An integer ndarray (int64 when built from Python ints), or an
        object array when Python ints exceed int64.
    """
    if isinstance(tokens, Tensor):
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must hold integers, got a {tokens.dtype} tensor")
        return tokens.detach().cpu().numpy()
    if isinstance(tokens, np.ndarray):
        array = tokens
    elif isinstance(tokens, (list, tuple)):
        if len(tokens) == 0:
            return np.zeros(0, dtype=np.int64)
        try:
            array = np.asarray(tokens)
        except (OverflowError, ValueError):
            array = np.asarray(tokens, dtype=object)
    else:
        raise TypeError(f"tokens must be a list, NumPy array or tensor, got {type(tokens).__name__}")
    if array.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {array.ndim} dimensions")
    if array.dtype == object:
        for item in array:
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
                raise TypeError(f"tokens must hold integers, found {item!r}")
        return array
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise TypeError(f"tokens must hold integers, got dtype {array.dtype}")
    return array


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write token ids to disk as bare binary integers.

    Args:
        path: Destination file; replaced if it exists.
        tokens: 1-D ids (list, ndarray or tensor).
        dtype: NumPy integer dtype used on disk.
    """
    _check_path(path)
    target = _integer_dtype(dtype)
    values = _as_int_array(tokens)
    if values.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {values.ndim} dimensions")
    if values.size:
        limits = np.iinfo(target)
        lowest, highest = int(values.min()), int(values.max())
        if lowest < limits.min or highest > limits.max:
            raise ValueError(
                f"tokens range [{lowest}, {highest}] does not fit dtype {target} "
                f"([{limits.min}, {limits.max}])"
            )
    encoded = np.ascontiguousarray(values.astype(target))
    with open(path, "wb") as handle:
        encoded.tofile(handle)


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map a token file read-only without reading it.

    Args:
        path: File written by :func:`save_tokens`.
        dtype: The dtype it was written with.

    Returns:
        A 1-D read-only ``np.memmap``.
    """
    _check_path(path)
    element = _integer_dtype(dtype)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no token file at {os.fspath(path)!r}")
    if os.path.isdir(path):
        raise ValueError(f"path {os.fspath(path)!r} is a directory, not a token file")
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"token file {os.fspath(path)!r} is empty")
    if size % element.itemsize:
        raise ValueError(f"token file size {size} is not a multiple of {element} ({element.itemsize} bytes)")
    return np.memmap(path, dtype=element, mode="r")


@dataclass(frozen=True)
class _TokenSource:
    """A validated 1-D integer array to cut windows from.

    Attributes:
        array: NumPy view of the tokens (a memmap stays a memmap).
    """

    array: np.ndarray

    @classmethod
    def wrap(cls, tokens: object) -> _TokenSource:
        if isinstance(tokens, Tensor):
            if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
                raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
            if tokens.device.type != "cpu":
                raise ValueError(f"tokens must be on the CPU, got {tokens.device}")
            if tokens.dim() != 1:
                raise ValueError(f"tokens must be 1-D, got {tokens.dim()} dimensions")
            return cls(tokens.detach().numpy())
        if isinstance(tokens, np.ndarray):
            if tokens.dtype.kind not in "iu":
                raise TypeError(f"tokens must be an integer array, got dtype {tokens.dtype}")
            if tokens.ndim != 1:
                raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dimensions")
            return cls(tokens)
        raise TypeError(f"tokens must be a NumPy array or a torch tensor, got {type(tokens).__name__}")

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Copy out the rows ``array[s : s + width]`` for every start, at once.

        Args:
            starts: Start positions.
            width: Window length.

        Returns:
            An int64 array of shape (len(starts), width).
        """
        every_window = np.lib.stride_tricks.sliding_window_view(self.array, width)
        return every_window[starts].astype(np.int64, copy=False)


@dataclass(frozen=True)
class _Target:
    """A validated destination device for a batch.

    Attributes:
        device: The resolved torch device.
    """

    device: torch.device

    @classmethod
    def resolve(cls, device: object) -> _Target:
        if not isinstance(device, (str, torch.device)):
            raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
        try:
            resolved = torch.device(device)
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"device {device!r} is not a valid device: {error}") from None
        checks = {
            "cpu": lambda d: True,
            "cuda": lambda d: torch.cuda.is_available()
            and (d.index is None or d.index < torch.cuda.device_count()),
            "mps": lambda d: torch.backends.mps.is_available() and d.index in (None, 0),
        }
        check = checks.get(resolved.type)
        if check is None or not check(resolved):
            raise ValueError(f"device {device!r} is not available here")
        return cls(resolved)

    def receive(self, host: np.ndarray) -> Tensor:
        """Move a host batch to the device (pinned + asynchronous for CUDA).

        Args:
            host: Batch on the host.

        Returns:
            The batch as a tensor on the device.
        """
        batch = torch.from_numpy(host)
        if self.device.type == "cuda":
            staging = torch.empty(batch.shape, dtype=batch.dtype, pin_memory=True)
            staging.copy_(batch)
            return staging.to(self.device, non_blocking=True)
        return batch.to(self.device)


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample inputs and next-token targets from random windows of the corpus.

    Args:
        tokens: 1-D integer array, memmap or CPU tensor.
        batch_size: Number of windows.
        context_length: Tokens per input row.
        device: Where the batch should end up.
        generator: CPU generator for the starts; the global RNG when None.

    Returns:
        ``(x, y)``, int64 tensors of shape (batch_size, context_length), y
        being x shifted one token ahead.
    """
    source = _TokenSource.wrap(tokens)
    rows = _positive_int(batch_size, "batch_size")
    length = _positive_int(context_length, "context_length")
    target = _Target.resolve(device)
    if generator is not None:
        if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
            raise TypeError("generator must be a CPU torch.Generator or None")
    available = len(source) - length
    if available < 1:
        raise ValueError(
            f"tokens holds {len(source)} ids, fewer than context_length + 1 = {length + 1}"
        )
    starts = torch.randint(available, (rows,), generator=generator)
    block = target.receive(source.windows(starts.numpy(), length + 1))
    return block[:, :-1], block[:, 1:]

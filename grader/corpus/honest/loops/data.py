"""Handout §5: saving token ids as raw binary, memory-mapping them back, sampling batches."""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def _check_path(path) -> None:
    """The path must be a str or an os.PathLike."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")


def _integer_numpy_dtype(dtype) -> np.dtype:
    """Turn ``dtype`` into a NumPy integer dtype, or raise TypeError."""
    # A bool "dtype" (np.bool_) is not an integer dtype either.
    try:
        numpy_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy integer dtype, got {dtype!r}") from None
    if numpy_dtype.kind not in ("i", "u"):
        raise TypeError(f"dtype must be a NumPy integer dtype, got {numpy_dtype}")
    return numpy_dtype


def _tokens_as_numpy_array(tokens) -> np.ndarray:
    """Turn a list, NumPy array or tensor of token ids into a 1-D NumPy array (checked)."""
    # Step 1: tensors go through NumPy (on the CPU).
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must hold integers, got a tensor of {tokens.dtype}")
        token_array = tokens.detach().cpu().numpy()
    elif isinstance(tokens, np.ndarray):
        token_array = tokens
        # An object array must hold real ints only: check them one at a time.
        if token_array.dtype == object:
            for entry in token_array.ravel():
                if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, numbers.Integral):
                    raise TypeError(f"tokens must hold integers, got {entry!r}")
    elif isinstance(tokens, (list, tuple, range)):
        # An empty list is zero tokens (NumPy would call it float64).
        if len(tokens) == 0:
            return np.zeros(0, dtype=np.int64)
        # Check each entry is a real int (a bool is not), one at a time.
        for entry in tokens:
            if isinstance(entry, (list, tuple, np.ndarray)):
                raise ValueError("tokens must be 1-D, got a nested sequence")
            if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, numbers.Integral):
                raise TypeError(f"tokens must hold integers, got {entry!r}")
        # Python ints of any size: pick int64 if they fit, else keep them as objects.
        try:
            token_array = np.array(tokens, dtype=np.int64)
        except OverflowError:
            token_array = np.array([int(entry) for entry in tokens], dtype=object)
    else:
        raise TypeError(f"tokens must be a list, NumPy array or tensor, got {type(tokens).__name__}")
    # Step 2: it must be one-dimensional.
    if token_array.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got {token_array.ndim} dimensions")
    # Step 3: it must hold integers.
    if token_array.dtype != object and token_array.dtype.kind not in ("i", "u"):
        if token_array.size == 0:
            return np.zeros(0, dtype=np.int64)
        raise TypeError(f"tokens must hold integers, got dtype {token_array.dtype}")
    return token_array


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write the token ids to ``path`` as raw ``dtype`` values, with no header."""
    # Step 1: check the arguments.
    _check_path(path)
    numpy_dtype = _integer_numpy_dtype(dtype)
    token_array = _tokens_as_numpy_array(tokens)
    # Step 2: every token must fit in the dtype (70000 must not wrap around in uint16).
    if token_array.size > 0:
        smallest_token = int(token_array.min())
        largest_token = int(token_array.max())
        limits = np.iinfo(numpy_dtype)
        if smallest_token < int(limits.min) or largest_token > int(limits.max):
            raise ValueError(
                f"tokens must fit in {numpy_dtype} ({limits.min}..{limits.max}), "
                f"got values from {smallest_token} to {largest_token}"
            )
    # Step 3: convert and write the raw bytes, replacing any old file.
    converted_tokens = np.ascontiguousarray(token_array.astype(numpy_dtype))
    with open(path, "wb") as output_file:
        converted_tokens.tofile(output_file)


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map the token file read-only; nothing is read until it is indexed."""
    # Step 1: check the arguments.
    _check_path(path)
    numpy_dtype = _integer_numpy_dtype(dtype)
    # Step 2: the file must exist, be a file and hold a whole number of tokens.
    if not os.path.exists(path):
        raise FileNotFoundError(f"no token file at {os.fspath(path)!r}")
    if os.path.isdir(path):
        raise ValueError(f"path {os.fspath(path)!r} is a directory, not a token file")
    file_size_in_bytes = os.path.getsize(path)
    if file_size_in_bytes == 0:
        raise ValueError(f"token file {os.fspath(path)!r} is empty")
    if file_size_in_bytes % numpy_dtype.itemsize != 0:
        raise ValueError(
            f"token file size {file_size_in_bytes} is not a multiple of {numpy_dtype}'s {numpy_dtype.itemsize} bytes"
        )
    # Step 3: memory-map it, read-only.
    return np.memmap(path, dtype=numpy_dtype, mode="r")


def _checked_device(device) -> torch.device:
    """Turn ``device`` into a torch.device that really exists here, or raise."""
    # Step 1: type check and parse.
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        parsed_device = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"device {device!r} is not a valid device: {error}") from None
    # Step 2: check the device type is available on this machine.
    if parsed_device.type == "cpu":
        return parsed_device
    if parsed_device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available")
        if parsed_device.index is not None and parsed_device.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there are only {torch.cuda.device_count()} CUDA devices")
        return parsed_device
    if parsed_device.type == "mps":
        mps_backend = getattr(torch.backends, "mps", None)
        if mps_backend is None or not mps_backend.is_available():
            raise ValueError(f"device {device!r}: MPS is not available")
        return parsed_device
    raise ValueError(f"device {device!r} is not supported (use cpu, cuda or mps)")


def get_batch(
    tokens: np.ndarray | Tensor,
    batch_size: int,
    context_length: int,
    device: str | torch.device,
    generator: torch.Generator | None = None,
) -> tuple[Int[Tensor, "batch_size context_length"], Int[Tensor, "batch_size context_length"]]:
    """Sample ``batch_size`` random windows: x is the window, y the same window shifted by one."""
    # Step 1: check the token array (NumPy array/memmap or CPU tensor of integers).
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must hold integers, got a tensor of {tokens.dtype}")
        if tokens.device.type != "cpu":
            raise ValueError(f"tokens must be on the CPU, got a tensor on {tokens.device}")
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got {tokens.dim()} dimensions")
        token_array = tokens.detach().numpy()
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in ("i", "u"):
            raise TypeError(f"tokens must hold integers, got dtype {tokens.dtype}")
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got {tokens.ndim} dimensions")
        token_array = tokens
    else:
        raise TypeError(f"tokens must be a NumPy array or a tensor, got {type(tokens).__name__}")
    # Step 2: check the sizes.
    for argument_name, argument_value in (("batch_size", batch_size), ("context_length", context_length)):
        if isinstance(argument_value, bool) or not isinstance(argument_value, numbers.Integral):
            raise TypeError(f"{argument_name} must be an int, got {type(argument_value).__name__}")
        if argument_value < 1:
            raise ValueError(f"{argument_name} must be at least 1, got {argument_value}")
    rows = int(batch_size)
    window_length = int(context_length)
    number_of_tokens = token_array.shape[0]
    if number_of_tokens < window_length + 1:
        raise ValueError(
            f"tokens has {number_of_tokens} tokens, fewer than context_length + 1 = {window_length + 1}"
        )
    # Step 3: check the device and the generator.
    target_device = _checked_device(device)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if generator.device.type != "cpu":
            raise TypeError(f"generator must be a CPU torch.Generator, got one on {generator.device}")
    # Step 4: draw every start in one call; valid starts are 0 .. n - T - 1.
    number_of_valid_starts = number_of_tokens - window_length
    starts = torch.randint(number_of_valid_starts, (rows,), generator=generator)
    # Step 5 (vectorised, no loop over rows): a strided view of all windows reads nothing;
    # indexing it with the starts copies just those rows.
    all_windows_view = np.lib.stride_tricks.sliding_window_view(token_array, window_length + 1)
    chosen_windows = all_windows_view[starts.numpy()].astype(np.int64)
    windows_tensor = torch.from_numpy(chosen_windows)
    # Step 6: on a GPU, go through pinned memory so the copy can be asynchronous.
    if target_device.type == "cuda":
        windows_tensor = windows_tensor.pin_memory().to(target_device, non_blocking=True)
    elif target_device.type != "cpu":
        windows_tensor = windows_tensor.to(target_device)
    # Step 7: x is the window without its last token, y without its first.
    inputs = windows_tensor[:, :-1]
    targets = windows_tensor[:, 1:]
    return inputs, targets

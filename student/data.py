"""Handout §5: token files on disk, memory-mapped, sampled into training batches.

A tokenised corpus is one long array of token ids. It is saved as raw binary
(no header), mapped back with ``np.memmap`` so that nothing is read until it
is indexed, and sampled into (x, y) batches for next-token prediction.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def save_tokens(path: str | os.PathLike[str], tokens: Any, dtype: Any = np.uint16) -> None:
    """Write ``tokens`` to ``path`` as raw binary ``dtype`` values (no header),
    so that ``np.fromfile(path, dtype)`` gives them back. An existing file at
    ``path`` is replaced: afterwards it holds exactly these tokens.

    ``tokens`` is a 1-D sequence of integers: a list, a NumPy array or a tensor.
    An empty one (``[]``, which NumPy would make float64) is zero tokens: the
    file is written, empty (and ``load_tokens`` refuses it).

    Raises:
        TypeError: ``path`` is not a str/PathLike, ``dtype`` is not a NumPy
            integer dtype, or ``tokens`` does not hold integers.
        ValueError: ``tokens`` is not 1-D, or a token does not fit in ``dtype``
            (70000 in uint16 must not silently wrap around).
    """
    raise NotImplementedError("save_tokens: see handout §5")


def load_tokens(path: str | os.PathLike[str], dtype: Any = np.uint16) -> np.memmap:
    """Map the raw token file at ``path`` read-only as a 1-D ``np.memmap`` of
    ``dtype``. Nothing is read eagerly: pages are read when indexed.

    Raises:
        TypeError: ``path`` is not a str/PathLike, or ``dtype`` is not a NumPy
            integer dtype.
        FileNotFoundError: there is no file at ``path``.
        OSError or ValueError (either is accepted): ``path`` is a directory.
        ValueError: the file is empty or its size is not a multiple of the
            dtype's size.
    """
    raise NotImplementedError("load_tokens: see handout §5")


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

    The valid devices are ``"cpu"``, and ``"cuda"``, ``"cuda:N"`` or
    ``"mps"`` where torch has that device (as a str or a ``torch.device``);
    any other (``"meta"``, ``"cuda:7"`` on a machine with fewer GPUs, ``"mps"``
    off a Mac) is a ValueError.

    Raises:
        TypeError: ``tokens`` is not an integer array/tensor, ``batch_size``
            or ``context_length`` is not an int (a bool is not one), ``device``
            is not a str or torch.device, or ``generator`` is not a CPU
            torch.Generator.
        ValueError: ``tokens`` is not 1-D, is a tensor that is not on the CPU,
            or has fewer than ``context_length + 1`` tokens, ``batch_size`` or
            ``context_length`` is below 1, or ``device`` is not a valid,
            available device (see above).
    """
    raise NotImplementedError("get_batch: see handout §5")

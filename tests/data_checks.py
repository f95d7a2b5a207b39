"""The oracles the data tests share (handout §5): the batch the docstring's
draw gives for a seed, and a random token file with the search that finds a
batch's rows in it.

Trusted side only: imported by tests/test_data.py and the grader's hidden
checks, never by a scenario (scenarios run in the submission's worker, which
does not have this file).
"""

from __future__ import annotations

import mmap
from os import PathLike
from typing import Any

import numpy as np
import torch

__all__ = ["assert_rows_are_windows_of", "expected_batch", "write_random_tokens"]


def expected_batch(tokens: np.ndarray, batch_size: int, context_length: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The oracle of the docstring's draw: starts from one
    ``torch.randint(n - context_length, (batch_size,), generator=...)`` call with
    a generator seeded ``seed``, then the windows at those starts."""
    n = len(tokens)
    starts = torch.randint(n - context_length, (batch_size,), generator=torch.Generator().manual_seed(seed))
    data = torch.from_numpy(tokens.astype(np.int64))
    rows = [data[s : s + context_length + 1] for s in starts.tolist()]
    w = torch.stack(rows) if rows else torch.empty(0, context_length + 1, dtype=torch.int64)
    return w[:, :-1], w[:, 1:]


def write_random_tokens(path: str | PathLike[str], n_tokens: int, seed: int) -> None:
    """``n_tokens`` uniform uint16 tokens from ``seed``: random, so that no row
    of a batch can be produced without reading the file.

    Written 4 KiB at a time: large writes fill the page cache with large folios
    (up to 2 MiB), and mapping one page of a folio maps all of it, so touching
    64 windows would count ~100 MiB; with 4 KiB pages it counts a few MiB."""
    rng = np.random.default_rng(seed)
    with open(path, "wb", buffering=0) as f:
        for start in range(0, n_tokens, 8 << 20):
            chunk = memoryview(rng.integers(0, 65536, min(8 << 20, n_tokens - start), dtype=np.uint16).tobytes())
            for at in range(0, len(chunk), 4096):
                f.write(chunk[at:at + 4096])


def assert_rows_are_windows_of(path: str | PathLike[str], x: Any, y: Any, what: str) -> None:
    """Each row of ``x`` occurs in the token file at ``path`` and ``y`` is the
    window one token further (searched in the file on this side)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for i, (row, nxt) in enumerate(zip(x.tolist(), y.tolist(), strict=True)):
            needle = np.array(row + nxt[-1:], dtype="<u2").tobytes()
            at = data.find(needle)
            while at >= 0 and at % 2:  # tokens start at even bytes
                at = data.find(needle, at + 1)
            assert at >= 0, (
                f"{what}: row {i} of x followed by the last token of y is not a window of the file "
                f"(x[{i}][:4] = {row[:4]}, y[{i}][-2:] = {nxt[-2:]})"
            )
            assert nxt[:-1] == row[1:], f"{what}: row {i} of y is not x shifted by one"

"""Shared hypothesis strategies: shapes, dtypes, tensors (also non-contiguous ones)
and optimizer hyperparameters. Tensors are drawn from a seed, so a failing
example prints a small reproducible recipe rather than a wall of numbers."""

from __future__ import annotations

import functools
from typing import Any

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
ALL_DTYPES = (*FLOAT_DTYPES, *FP8_DTYPES, *INT_DTYPES, torch.bool)

dtypes = st.sampled_from(ALL_DTYPES)
float_dtypes = st.sampled_from(FLOAT_DTYPES)
#: dtypes whose arithmetic is reliable on every CPU (for numeric comparisons)
compute_dtypes = st.sampled_from((torch.float64, torch.float32))
seeds = st.integers(0, 2**31 - 1)


def dims(max_side: int = 8, min_side: int = 1) -> st.SearchStrategy[int]:
    return st.integers(min_side, max_side)


# Strategies are immutable: one object per argument tuple, so that a composite
# drawing shapes many times does not build (and validate) a new one each time.
@functools.cache
def shapes(
    min_dims: int = 0, max_dims: int = 4, min_side: int = 1, max_side: int = 6
) -> st.SearchStrategy[tuple[int, ...]]:
    """Tensor shapes; ``min_side=0`` allows empty dimensions."""
    return st.lists(dims(max_side, min_side), min_size=min_dims, max_size=max_dims).map(tuple)


def make_tensor(
    shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0
) -> torch.Tensor:
    """A reproducible random tensor (normal for floats, small ints otherwise)."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        base = torch.randn(shape, generator=g, dtype=torch.float64)
        return base.to(dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def make_tensors(
    shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32, seed: int = 0
) -> list[torch.Tensor]:
    """Reproducible normal tensors of the given shapes, one per shape, from a
    single draw of ``seed``'s generator (much cheaper than one generator each);
    each tensor has its own storage."""
    import math

    sizes = [math.prod(s) for s in shapes]
    flat = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    return [chunk.reshape(s).clone() for chunk, s in zip(flat.split(sizes), shapes, strict=True)]


@st.composite
def tensors(
    draw: st.DrawFn,
    shape: st.SearchStrategy[tuple[int, ...]] | tuple[int, ...] | None = None,
    dtype: st.SearchStrategy[torch.dtype] | torch.dtype = torch.float32,
    noncontiguous: bool | None = None,
) -> torch.Tensor:
    """A tensor of the given (or drawn) shape and dtype. ``noncontiguous=None``
    draws either layout; ``True`` forces a strided view (transposed or sliced)
    with the same shape, so a correct function must not assume contiguity."""
    shp = draw(shapes()) if shape is None else shape if isinstance(shape, tuple) else draw(shape)
    dt = dtype if isinstance(dtype, torch.dtype) else draw(dtype)
    seed = draw(seeds)
    want_nc = draw(st.booleans()) if noncontiguous is None else noncontiguous
    if not want_nc:
        return make_tensor(shp, dt, seed)
    return _strided(shp, dt, seed, draw)


def _strided(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, draw: st.DrawFn
) -> torch.Tensor:
    if len(shape) >= 2 and draw(st.booleans()):
        # Store the last two dimensions swapped, then view them back.
        big = make_tensor((*shape[:-2], shape[-1], shape[-2]), dtype, seed)
        return big.transpose(-1, -2)
    # Every other element of a twice-as-long last dimension.
    last = shape[-1] if shape else 1
    big = make_tensor((*shape[:-1], 2 * last), dtype, seed) if shape else make_tensor((2,), dtype, seed)
    return big[..., ::2] if shape else big[0]


#: Each optimizer hyperparameter's values, in the ranges torch.optim accepts.
HYPERPARAMETER_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "lr": st.sampled_from([1e-4, 1e-3, 1e-2, 0.1]),
    "betas": st.tuples(st.sampled_from([0.0, 0.5, 0.9]), st.sampled_from([0.0, 0.9, 0.999])),
    "eps": st.sampled_from([1e-8, 1e-6, 1e-3]),
    "weight_decay": st.sampled_from([0.0, 1e-2, 0.1]),
    "momentum": st.sampled_from([0.0, 0.5, 0.9]),
    "alpha": st.sampled_from([0.5, 0.9, 0.99]),
}


def hyperparameters(keys: tuple[str, ...] | list[str] | None = None, /,
                    **overrides: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Optimizer hyperparameters in the ranges torch.optim accepts: those named
    in ``keys`` (default: every one), each drawn from its strategy in
    :data:`HYPERPARAMETER_VALUES` (``overrides`` replace or add strategies by name)."""
    base = {**HYPERPARAMETER_VALUES, **overrides}
    return st.fixed_dictionaries(base if keys is None else {k: base[k] for k in keys})

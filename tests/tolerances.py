"""Comparisons with tolerances chosen per dtype, and messages that say what was
expected, what came back, and where they differ most."""

from __future__ import annotations

from typing import Any

import torch

#: (rtol, atol) per dtype for results of a few arithmetic operations. fp32 and
#: fp64 follow torch.testing's defaults; bf16 has 8 mantissa bits (eps 2^-7)
#: and fp16 has 11 (eps 2^-10), so a handful of roundings stay within these.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``, multiplied by ``scale`` for longer computations."""
    rtol, atol = TOLERANCES.get(dtype, (0.0, 0.0))
    return rtol * scale, atol * scale


def check_tensor(
    actual: Any,
    *,
    dtype: torch.dtype | None = None,
    shape: tuple[int, ...] | None = None,
    device: str | torch.device | None = None,
    what: str = "result",
) -> torch.Tensor:
    """Assert ``actual`` is a plain tensor of the given dtype, shape and device."""
    assert type(actual) is torch.Tensor, (
        f"{what}: expected a torch.Tensor, got {type(actual).__name__}: {actual!r:.200}"
    )
    if dtype is not None:
        assert actual.dtype == dtype, f"{what}: expected dtype {dtype}, got {actual.dtype}"
    if shape is not None:
        assert tuple(actual.shape) == tuple(shape), (
            f"{what}: expected shape {tuple(shape)}, got {tuple(actual.shape)}"
        )
    if device is not None:
        assert actual.device.type == torch.device(device).type, (
            f"{what}: expected device {device}, got {actual.device}"
        )
    return actual


def assert_close(
    actual: Any,
    expected: torch.Tensor,
    *,
    scale: float = 1.0,
    what: str = "result",
    check_dtype: bool = True,
) -> None:
    """Assert a tensor equals ``expected`` within the tolerance of ``expected.dtype``.

    The dtype, shape and device must match exactly first (unless
    ``check_dtype=False``, which compares values in float64).
    """
    check_tensor(actual, dtype=expected.dtype if check_dtype else None,
                 shape=tuple(expected.shape), device=expected.device, what=what)
    rtol, atol = tolerance(expected.dtype, scale)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as err:
        diff = (a - e).abs().nan_to_num(float("inf"))
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.numel() else ()
        raise AssertionError(
            f"{what} differs from the expected value ({expected.dtype}, rtol={rtol:g}, atol={atol:g}):"
            f" at index {idx} expected {e[idx].item()!r}, got {a[idx].item()!r}\n{err}"
        ) from None

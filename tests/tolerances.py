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


# --------------------------------------------------------------------------- against an exact run
#
# A fixed rtol cannot tell a reformulation from a bug when the computation is
# ill-conditioned. Adam with betas=(0.9, 0.0) divides by sqrt(v) = |g|: where a
# gradient is tiny the step is large and inherits the relative rounding error
# of g, so two correct fp32 codes (torch.optim's `m / c1 / (sqrt(v / c2) + eps)`
# and a textbook `m_hat / (sqrt(v_hat) + eps)`) end a long run several fixed
# tolerances apart. The rule below measures how far rounding alone moves *this*
# computation on *these* inputs, and accepts what stays within a small multiple
# of it:
#
# * ``exact``: the oracle run in float64 on the same inputs (cast up exactly).
#   For float32 it is the truth up to float64's rounding, ~2^29 times finer.
# * ``oracle_error``: how far the oracle's own runs in the tested precision
#   (several formulations of it where it has them, e.g. torch.optim's
#   ``foreach=False`` and ``foreach=True`` code paths) land from ``exact``,
#   elementwise, the largest over those runs, and how far float64 runs land
#   whose every value is perturbed by about one rounding of the tested dtype
#   at every step (tests/optimizer_oracle.py's ``torch_trajectory``: random
#   signs, so the perturbed runs follow this run's own conditioning, whether
#   or not the oracle's run happened to round luckily). Ill-conditioned inputs
#   make this large by themselves, on exactly the elements they affect. For a
#   float64 test there is no finer run: the oracle's float32 error is scaled
#   by eps(float64) / eps(float32), the same conditioning at float64's roundoff.
# * ``magnitude``: the sizes of the values the computation went through
#   (for an optimizer, |param| and |update| at every step so far, summed):
#   ``ulps`` roundings of each cover a well-conditioned computation whose
#   oracle happens to round luckily on some element.
#
# An element passes when |actual - exact| <= factor * oracle_error
# + ulps * eps(dtype) * magnitude (+ the dtype's smallest normal, for zeros).
# A wrong update (a missing bias correction, eps inside the root, a decay of the
# wrong sign) moves a parameter by a fraction of lr, orders of magnitude beyond
# this bound; a correct one differs from the oracle by roundings, which the
# bound counts.

#: multiple of the oracle's own error a correct implementation may reach
ORACLE_FACTOR = 4.0
#: roundings of each value involved that a correct implementation may add
ULPS = 16.0


def eps(dtype: torch.dtype) -> float:
    """Unit roundoff scale of a float dtype: its machine epsilon."""
    return torch.finfo(dtype).eps


def oracle_error(exact: torch.Tensor, runs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Elementwise, the largest distance from ``exact`` of the oracle's ``runs``
    (each in ``dtype``, or in a coarser dtype whose error is then scaled down by
    the ratio of the epsilons), in float64."""
    err = torch.zeros_like(exact, dtype=torch.float64)
    for run in runs:
        scale = eps(dtype) / eps(run.dtype) if run.dtype != dtype else 1.0
        err = torch.maximum(err, (run.double() - exact.double()).abs().nan_to_num(0.0) * scale)
    return err


def bound_to_exact(exact: torch.Tensor, *, dtype: torch.dtype, error: torch.Tensor, magnitude: torch.Tensor,
                   factor: float = ORACLE_FACTOR, ulps: float = ULPS) -> torch.Tensor:
    """The elementwise distance from the float64 ``exact`` value that rounding
    explains (see the comment above), in float64."""
    return (factor * error.double() + ulps * eps(dtype) * magnitude.double()
            + torch.finfo(dtype).smallest_normal) * torch.ones_like(exact, dtype=torch.float64)


def worst_ratio(actual: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> float:
    """The largest ``|actual - exact| / bound`` over the elements (inf where one
    is NaN and the other not; a correct result stays at or below 1)."""
    a, e = actual.detach().double(), exact.detach().double()
    ratio = ((a - e).abs() / bound).nan_to_num(float("inf"))
    ratio = torch.where(a.isnan() & e.isnan(), torch.zeros_like(ratio), ratio)
    return float(ratio.max()) if ratio.numel() else 0.0


def assert_close_to_exact(
    actual: Any,
    exact: torch.Tensor,
    *,
    dtype: torch.dtype,
    error: torch.Tensor,
    magnitude: torch.Tensor,
    what: str = "result",
    factor: float = ORACLE_FACTOR,
    ulps: float = ULPS,
) -> None:
    """Assert ``actual`` (a ``dtype`` tensor shaped like ``exact``) is within
    ``factor * error + ulps * eps(dtype) * magnitude`` of the float64 ``exact``
    value, elementwise (see the comment above for why)."""
    check_tensor(actual, dtype=dtype, shape=tuple(exact.shape), device=exact.device, what=what)
    a, e = actual.detach().double(), exact.detach().double()
    bound = bound_to_exact(exact, dtype=dtype, error=error, magnitude=magnitude, factor=factor, ulps=ulps)
    diff = (a - e).abs()
    both_nan = a.isnan() & e.isnan()
    bad = ~((diff <= bound) | both_nan)
    if not bool(bad.any()):
        return
    excess = torch.where(bad, (diff / bound).nan_to_num(float("inf")), torch.zeros_like(diff))
    idx = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape)) if excess.dim() else ()
    raise AssertionError(
        f"{what} differs from the exact (float64) value by more than rounding explains: "
        f"at index {idx} expected {e[idx].item()!r}, got {a[idx].item()!r} "
        f"(difference {diff[idx].item():.3g}, allowed {bound[idx].item():.3g} = {factor:g} x the oracle's own "
        f"{dtype} error {error[idx].item():.3g} + {ulps:g} ulps of the values involved); "
        f"{int(bad.sum())} of {bad.numel()} elements differ"
    )

"""Handout §3.1: FLOPs and MFU.

Oracle: ``torch.utils.flop_counter.FlopCounterMode``, which counts the FLOPs
of every matmul torch actually runs, forward and backward. The layers live on
the ``meta`` device (shapes without data), so large sizes cost nothing.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

META = torch.device("meta")

sizes = st.integers(1, 2048)
widths = st.lists(st.integers(1, 512), min_size=2, max_size=5)


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def _mlp(dims: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for d_in, d_out in pairwise(dims):
        layers += [nn.Linear(d_in, d_out, bias=False, device=META), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _forward_backward(model: nn.Module, batch: int, d_in: int, input_requires_grad: bool) -> tuple[int, int]:
    """FLOPs FlopCounterMode counts for one forward and one backward pass."""
    x = torch.empty(batch, d_in, device=META, requires_grad=input_requires_grad)
    out: list[torch.Tensor] = []
    forward = _counted(lambda: out.append(model(x)))
    backward = _counted(lambda: out[0].sum().backward())
    return forward, backward


def _check_int(got, expected: int, call: str) -> None:
    assert type(got) is int, f"{call}: expected the int {expected}, got {type(got).__name__} {got!r}"
    assert got == expected, f"{call}: FlopCounterMode counts {expected}, got {got}"


@given(m=sizes, k=sizes, n=sizes)
def test_matmul_flops_matches_counter(impl, m, k, n):
    a, b = torch.empty(m, k, device=META), torch.empty(k, n, device=META)
    _check_int(impl.flops.matmul_flops(m, k, n), _counted(lambda: a @ b), f"matmul_flops({m}, {k}, {n})")


@given(batch=sizes, d_in=sizes, d_out=sizes, input_requires_grad=st.booleans())
def test_linear_flops_match_counter(impl, batch, d_in, d_out, input_requires_grad):
    forward, backward = _forward_backward(_mlp([d_in, d_out]), batch, d_in, input_requires_grad)
    _check_int(impl.flops.linear_forward_flops(batch, d_in, d_out), forward,
               f"linear_forward_flops({batch}, {d_in}, {d_out})")
    _check_int(impl.flops.linear_backward_flops(batch, d_in, d_out, input_requires_grad), backward,
               f"linear_backward_flops({batch}, {d_in}, {d_out}, input_requires_grad={input_requires_grad})")


@given(batch=sizes, d_in=sizes, d_out=sizes)
def test_linear_backward_flops_default_input_requires_grad(impl, batch, d_in, d_out):
    """Called without ``input_requires_grad``: the default is True (the
    gradient of the input is computed too, 4BDK)."""
    _, backward = _forward_backward(_mlp([d_in, d_out]), batch, d_in, True)
    _check_int(impl.flops.linear_backward_flops(batch, d_in, d_out), backward,
               f"linear_backward_flops({batch}, {d_in}, {d_out}) (default input_requires_grad=True)")


@given(batch=st.integers(1, 512), dims=widths, input_requires_grad=st.booleans())
def test_mlp_flops_match_counter(impl, batch, dims, input_requires_grad):
    forward, backward = _forward_backward(_mlp(dims), batch, dims[0], input_requires_grad)
    got = impl.flops.mlp_flops(batch, dims, input_requires_grad)
    call = f"mlp_flops({batch}, {dims}, input_requires_grad={input_requires_grad})"
    _check_int(got.forward, forward, f"{call}.forward")
    _check_int(got.backward, backward, f"{call}.backward")
    _check_int(got.total, forward + backward, f"{call}.total")


@given(batch=st.integers(1, 512), dims=widths)
def test_mlp_flops_default_input_requires_grad(impl, batch, dims):
    """Called without ``input_requires_grad``: the default is False (the first
    layer computes only its weight's gradient)."""
    forward, backward = _forward_backward(_mlp(dims), batch, dims[0], False)
    got = impl.flops.mlp_flops(batch, dims)
    call = f"mlp_flops({batch}, {dims}) (default input_requires_grad=False)"
    _check_int(got.forward, forward, f"{call}.forward")
    _check_int(got.backward, backward, f"{call}.backward")
    _check_int(got.total, forward + backward, f"{call}.total")


def test_mlp_flops_worked_example(impl):
    """The handout's [5, 7, 3] MLP on 4 rows: a layer's backward costs twice its
    forward (4BDK), except the first layer's when the input needs no gradient:
    only the weight's gradient is computed, as much as the forward (2BDK)."""
    got = impl.flops.mlp_flops(4, [5, 7, 3])
    assert (got.forward, got.backward, got.total) == (448, 616, 1064), (
        f"mlp_flops(4, [5, 7, 3]): expected forward 448, backward 280 + 336 = 616, total 1064; got {got}"
    )
    got = impl.flops.mlp_flops(4, [5, 7, 3], input_requires_grad=True)
    assert (got.forward, got.backward, got.total) == (448, 896, 1344), (
        f"mlp_flops(4, [5, 7, 3], input_requires_grad=True): expected 448, 896, 1344; got {got}"
    )


@given(batch=st.integers(1, 512), dims=widths)
def test_training_flops_is_what_a_training_step_costs(impl, batch, dims):
    """For a bias-free MLP whose input needs a gradient, forward + backward is
    exactly 6 FLOPs per parameter per row: the 6NT rule."""
    model = _mlp(dims)
    num_params = sum(p.numel() for p in model.parameters())
    forward, backward = _forward_backward(model, batch, dims[0], input_requires_grad=True)
    got = impl.flops.training_flops(num_params, batch)
    assert isinstance(got, (int, float)) and got == forward + backward, (
        f"training_flops({num_params}, {batch}): one counted training step is {forward + backward}, got {got!r}"
    )


@given(n=st.floats(0, 1e12), t=st.floats(0, 1e13))
def test_training_flops_is_6nt(impl, n, t):
    got = impl.flops.training_flops(n, t)
    assert math.isclose(got, 6 * n * t, rel_tol=1e-12), (
        f"training_flops({n}, {t}): expected 6NT = {6 * n * t}, got {got!r}"
    )


@given(
    flops=st.floats(0, 1e25), seconds=st.floats(1e-3, 1e7), peak=st.floats(1e9, 1e16),
)
def test_mfu_is_achieved_over_peak(impl, flops, seconds, peak):
    got = impl.flops.mfu(flops, seconds, peak)
    expected = flops / seconds / peak
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300), (
        f"mfu({flops}, {seconds}, {peak}): expected (FLOPs / seconds) / peak = {expected}, got {got!r}"
    )


def test_mfu_worked_example(impl):
    # 6 * 1e9 params * 1e6 tokens = 6e15 FLOPs in 10 s is 6e14 FLOP/s; of 989.5e12, 60.6%.
    got = impl.flops.mfu(6e15, 10.0, 989.5e12)
    assert math.isclose(got, 6e14 / 989.5e12, rel_tol=1e-12), f"mfu(6e15, 10, 989.5e12): expected 0.606, got {got!r}"


def test_training_days_worked_example(impl):
    """70B parameters, 15T tokens, 1024 H100s at 989.5 TFLOP/s and MFU 0.5."""
    got = impl.flops.training_days(70e9, 15e12, 1024, 989.5e12, 0.5)
    expected = 6 * 70e9 * 15e12 / (1024 * 989.5e12 * 0.5) / 86400  # 143.9 days
    assert math.isclose(got, expected, rel_tol=1e-9), (
        f"training_days(70e9, 15e12, 1024, 989.5e12, 0.5): expected {expected:.2f}, got {got!r}"
    )


@given(
    n=st.floats(1e6, 1e12), t=st.floats(1e6, 1e13), devices=st.integers(1, 100_000),
    peak=st.floats(1e12, 1e16), utilisation=st.floats(0.01, 1.0),
)
def test_training_days_is_flops_over_throughput(impl, n, t, devices, peak, utilisation):
    got = impl.flops.training_days(n, t, devices, peak, utilisation)
    expected = 6 * n * t / (devices * peak * utilisation) / 86400
    assert math.isclose(got, expected, rel_tol=1e-9), (
        f"training_days({n}, {t}, {devices}, {peak}, {utilisation}): expected {expected}, got {got!r}"
    )


@given(n=st.floats(1e6, 1e12), t=st.floats(1e6, 1e13), devices=st.integers(1, 100_000), peak=st.floats(1e12, 1e16))
def test_training_days_accepts_full_utilisation(impl, n, t, devices, peak):
    """``mfu`` may be anything in (0, 1]: the closed end, 1 (every peak FLOP
    spent on the model), is a valid utilisation, not an error."""
    got = impl.flops.training_days(n, t, devices, peak, 1.0)
    expected = 6 * n * t / (devices * peak) / 86400
    assert math.isclose(got, expected, rel_tol=1e-9), (
        f"training_days({n}, {t}, {devices}, {peak}, mfu=1.0): expected {expected}, got {got!r}"
    )


@pytest.mark.parametrize(
    ("function", "args", "error"),
    [
        ("matmul_flops", (2, 3, -1), ValueError),
        ("matmul_flops", (2, 3.0, 4), TypeError),
        ("linear_forward_flops", (-1, 3, 4), ValueError),
        ("linear_backward_flops", (2, 3, 4, "yes"), TypeError),
        ("mlp_flops", (4, [5]), ValueError),
        ("mlp_flops", (4, [5, 0, 3]), ValueError),
        ("mlp_flops", (4, "57"), TypeError),
        ("mlp_flops", (-4, [5, 7]), ValueError),
        ("training_flops", (-1.0, 10.0), ValueError),
        ("training_flops", ("70B", 10.0), TypeError),
        ("mfu", (1e12, 0.0, 1e15), ValueError),
        ("mfu", (1e12, 1.0, -1e15), ValueError),
        ("mfu", (1e12, 1.0, "H100"), TypeError),
        ("training_days", (70e9, 15e12, 0, 989.5e12, 0.5), ValueError),
        ("training_days", (70e9, 15e12, 1024.0, 989.5e12, 0.5), TypeError),
        ("training_days", (70e9, 15e12, 1024, 989.5e12, 0.0), ValueError),
        ("training_days", (70e9, 15e12, 1024, 989.5e12, 50), ValueError),
        ("training_days", (70e9, 15e12, 1024, 0.0, 0.5), ValueError),
        ("matmul_flops", (True, 3, 4), TypeError),  # a bool is not a count here (handout)
        ("training_days", (70e9, 15e12, True, 989.5e12, 0.5), TypeError),
        ("mfu", (1e12, False, 1e15), TypeError),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    with pytest.raises(error):
        result = getattr(impl.flops, function)(*args)
        pytest.fail(f"{function}{args} should raise {error.__name__}, returned {result!r}")


@pytest.mark.parametrize("value", [-1e-9, -0.5, -1.0, -3e12], ids=str)
@pytest.mark.parametrize(
    ("function", "position"),
    [("training_flops", 0), ("training_flops", 1), ("mfu", 0), ("training_days", 0), ("training_days", 1)],
    ids=lambda v: v if isinstance(v, str) else f"arg{v}",
)
def test_bad_input_any_negative_count(impl, function, position, value):
    """A negative count (parameters, tokens, model FLOPs) is a ValueError
    however small its magnitude: the bound is 0, not -1."""
    args = {"training_flops": [70e9, 15e12], "mfu": [6e15, 10.0, 989.5e12],
            "training_days": [70e9, 15e12, 1024, 989.5e12, 0.5]}[function]
    args[position] = value
    with pytest.raises(ValueError):
        result = getattr(impl.flops, function)(*args)
        pytest.fail(f"{function}{tuple(args)} should raise ValueError, returned {result!r}")


@pytest.mark.parametrize("utilisation", [1.0000001, 1.5, 2.0, 100.0], ids=str)
def test_bad_input_utilisation_above_one(impl, utilisation):
    """``mfu`` is a fraction of peak: anything above 1, however slightly, is a ValueError."""
    with pytest.raises(ValueError):
        result = impl.flops.training_days(70e9, 15e12, 1024, 989.5e12, utilisation)
        pytest.fail(f"training_days(70e9, 15e12, 1024, 989.5e12, {utilisation}) should raise ValueError, "
                    f"returned {result!r}")


@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("training_flops", (math.inf, 15e12)),
        ("training_flops", (70e9, math.inf)),
        ("training_flops", (math.nan, 15e12)),
        ("training_flops", (70e9, math.nan)),
        ("training_flops", (math.inf, 0.0)),
        ("mfu", (math.inf, 10.0, 989.5e12)),
        ("mfu", (6e15, math.inf, 989.5e12)),
        ("mfu", (6e15, 10.0, math.inf)),
        ("mfu", (math.nan, 10.0, 989.5e12)),
        ("training_days", (math.inf, 15e12, 1024, 989.5e12, 0.5)),
        ("training_days", (70e9, math.nan, 1024, 989.5e12, 0.5)),
        ("training_days", (70e9, 15e12, 1024, math.inf, 0.5)),
        ("training_days", (70e9, 15e12, 1024, 989.5e12, math.nan)),
    ],
    ids=str,
)
def test_bad_input_not_finite(impl, function, args):
    """``training_flops``, ``mfu`` and ``training_days``: "ValueError: ... or an
    argument is not finite". Infinities and NaN are refused, not turned into an
    infinite or NaN count."""
    with pytest.raises(ValueError):
        result = getattr(impl.flops, function)(*args)
        pytest.fail(f"{function}{args} should raise ValueError (an argument is not finite), returned {result!r}")


@given(
    n=st.integers(0, 10**12), t=st.integers(0, 10**13), devices=st.integers(1, 100_000),
    seconds=st.integers(1, 10**7), peak=st.integers(10**9, 10**16), utilisation=st.floats(0.01, 1.0),
)
def test_float_results_are_python_floats_even_for_int_arguments(impl, n, t, devices, seconds, peak, utilisation):
    """``training_flops``, ``mfu`` and ``training_days`` promise a float:
    exactly ``float`` (not an int, np.float64 or a 0-d tensor), also when
    every argument is an int."""
    for call, got in (
        (f"training_flops({n}, {t})", impl.flops.training_flops(n, t)),
        (f"mfu({n}, {seconds}, {peak})", impl.flops.mfu(n, seconds, peak)),
        (f"training_days({n}, {t}, {devices}, {peak}, {utilisation})",
         impl.flops.training_days(n, t, devices, peak, utilisation)),
    ):
        assert type(got) is float, f"{call} should return a float, got {type(got).__name__} {got!r}"

"""Hidden differential checks for handout §3.1: the submission against the
reference on sizes far beyond the public tests' (counts past 2**53, where a
float loses exactness; deep MLPs; extreme training budgets)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind

big = st.integers(0, 10**7)
widths = st.lists(st.integers(1, 10**5), min_size=2, max_size=12)


def _same_int(got, expected, call: str) -> None:
    assert type(got) is int and got == expected, f"{call}: expected the int {expected}, got {got!r}"


@pytest.mark.extends("tests/test_flops.py::test_matmul_flops_matches_counter")
@given(m=big, k=big, n=big)
def test_matmul_flops(impl, ref, m, k, n):
    input_kind(sizes="up to 1e7 (counts past 2**53)")
    _same_int(impl.flops.matmul_flops(m, k, n), ref.flops.matmul_flops(m, k, n), f"matmul_flops({m}, {k}, {n})")


@pytest.mark.extends("tests/test_flops.py::test_linear_flops_match_counter")
@given(batch=big, d_in=big, d_out=big, input_requires_grad=st.booleans())
def test_linear_flops(impl, ref, batch, d_in, d_out, input_requires_grad):
    input_kind(sizes="up to 1e7", input_requires_grad=str(input_requires_grad))
    args = (batch, d_in, d_out)
    _same_int(impl.flops.linear_forward_flops(*args), ref.flops.linear_forward_flops(*args),
              f"linear_forward_flops{args}")
    _same_int(impl.flops.linear_backward_flops(*args, input_requires_grad),
              ref.flops.linear_backward_flops(*args, input_requires_grad),
              f"linear_backward_flops{args}, input_requires_grad={input_requires_grad}")


@pytest.mark.extends("tests/test_flops.py::test_mlp_flops_match_counter")
@given(batch=st.integers(0, 10**6), dims=widths, input_requires_grad=st.booleans())
def test_mlp_flops(impl, ref, batch, dims, input_requires_grad):
    input_kind(layers=str(len(dims) - 1), widths="up to 1e5", input_requires_grad=str(input_requires_grad))
    got = impl.flops.mlp_flops(batch, dims, input_requires_grad)
    expected = ref.flops.mlp_flops(batch, dims, input_requires_grad)
    call = f"mlp_flops({batch}, {dims}, {input_requires_grad})"
    for field in ("forward", "backward", "total"):
        _same_int(getattr(got, field), getattr(expected, field), f"{call}.{field}")


@pytest.mark.extends("tests/test_flops.py::test_training_flops_is_6nt")
@given(n=st.floats(0, 1e15), t=st.floats(0, 1e16))
def test_training_flops(impl, ref, n, t):
    input_kind(arguments="floats up to 1e16")
    got, expected = impl.flops.training_flops(n, t), ref.flops.training_flops(n, t)
    assert math.isclose(got, expected, rel_tol=1e-12), f"training_flops({n}, {t}): expected {expected}, got {got!r}"


@pytest.mark.extends("tests/test_flops.py::test_mfu_is_achieved_over_peak")
@given(flops=st.floats(0, 1e30), seconds=st.floats(1e-9, 1e9), peak=st.floats(1e6, 1e20))
def test_mfu(impl, ref, flops, seconds, peak):
    input_kind(arguments="floats over many magnitudes")
    got, expected = impl.flops.mfu(flops, seconds, peak), ref.flops.mfu(flops, seconds, peak)
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300), (
        f"mfu({flops}, {seconds}, {peak}): expected {expected}, got {got!r}"
    )


@pytest.mark.extends("tests/test_flops.py::test_training_days_is_flops_over_throughput")
@given(
    n=st.floats(1, 1e15), t=st.floats(1, 1e16), devices=st.integers(1, 10**6),
    peak=st.floats(1e9, 1e18), utilisation=st.floats(1e-4, 1.0),
)
def test_training_days(impl, ref, n, t, devices, peak, utilisation):
    input_kind(arguments="floats over many magnitudes, up to 1e6 devices")
    args = (n, t, devices, peak, utilisation)
    got, expected = impl.flops.training_days(*args), ref.flops.training_days(*args)
    assert math.isclose(got, expected, rel_tol=1e-9), f"training_days{args}: expected {expected}, got {got!r}"

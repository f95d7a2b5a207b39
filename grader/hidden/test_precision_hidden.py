"""Hidden differential checks for handout §1.1: the submission against the
reference on inputs the public tests do not use (float64 values that are not
float32-exact, values a hair either side of every rounding threshold, negative
values, integer arguments, huge shapes)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind, raises_like_reference
from tests.strategies import ALL_DTYPES, FLOAT_DTYPES, FP8_DTYPES

FORMATS = (*FLOAT_DTYPES, *FP8_DTYPES)
NARROW = (torch.float16, torch.bfloat16, *FP8_DTYPES)


def _same(got, expected, call: str) -> None:
    assert type(got) is type(expected) and got == expected, f"{call}: expected {expected!r}, got {got!r}"


@pytest.mark.extends("tests/test_precision.py::test_tensor_bytes_matches_measured_storage")
@given(shape=st.lists(st.integers(0, 10**6), max_size=8).map(tuple), dtype=st.sampled_from(ALL_DTYPES))
def test_tensor_bytes_of_large_shapes(impl, ref, shape, dtype):
    input_kind(dtype=str(dtype).removeprefix("torch."), dims=str(len(shape)), sides="up to 1e6")
    _same(impl.precision.tensor_bytes(shape, dtype), ref.precision.tensor_bytes(shape, dtype),
          f"tensor_bytes({shape}, {dtype})")


@pytest.mark.extends("tests/test_precision.py::test_tensor_bytes_matches_measured_storage")
@given(shape=st.lists(st.integers(0, 50), max_size=4))
def test_tensor_bytes_accepts_lists(impl, ref, shape):
    input_kind(shape="a list", dtype="int16")
    _same(impl.precision.tensor_bytes(shape, torch.int16), ref.precision.tensor_bytes(shape, torch.int16),
          f"tensor_bytes({shape}, torch.int16)")


@pytest.mark.extends("tests/test_precision.py::test_float_format_matches_finfo")
@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_float_format_fields(impl, ref, dtype):
    input_kind(dtype=str(dtype).removeprefix("torch."))
    got, expected = impl.precision.float_format(dtype), ref.precision.float_format(dtype)
    for field in ("bits", "exponent_bits", "mantissa_bits", "max", "smallest_normal", "eps"):
        _same(getattr(got, field), getattr(expected, field), f"float_format({dtype}).{field}")


@st.composite
def near_thresholds(draw: st.DrawFn) -> tuple[float, torch.dtype]:
    """A float64 value within a few ulps (of the format) of a rounding threshold."""
    dtype = draw(st.sampled_from(NARROW))
    info = torch.finfo(dtype)
    m = round(-math.log2(info.eps))
    tiny = info.smallest_normal * info.eps  # the smallest subnormal
    ulp_max = math.ldexp(info.eps, math.frexp(info.max)[1] - 1)
    anchor = draw(st.sampled_from([tiny / 2, tiny, info.max, info.max + ulp_max / 2, info.max + ulp_max]))
    nudge = draw(st.sampled_from([0.0, 1.0, -1.0, 0.25, -0.25, 1e-9, -1e-9]))
    step = anchor * 2.0 ** -(m + 2)
    value = anchor + nudge * step
    sign = draw(st.sampled_from([1.0, -1.0]))
    return sign * value, dtype


@pytest.mark.extends("tests/test_precision.py::test_underflows_matches_cast")
@given(case=near_thresholds())
def test_underflows_near_thresholds(impl, ref, case):
    input_kind(dtype=str(case[1]).removeprefix("torch."), value="within a few ulps of a rounding threshold")
    value, dtype = case
    if value == 0:
        return
    _same(impl.precision.underflows(value, dtype), ref.precision.underflows(value, dtype),
          f"underflows({value!r}, {dtype})")


@pytest.mark.extends("tests/test_precision.py::test_overflows_matches_cast")
@given(case=near_thresholds())
def test_overflows_near_thresholds(impl, ref, case):
    input_kind(dtype=str(case[1]).removeprefix("torch."), value="within a few ulps of a rounding threshold")
    value, dtype = case
    _same(impl.precision.overflows(value, dtype), ref.precision.overflows(value, dtype),
          f"overflows({value!r}, {dtype})")


@pytest.mark.extends("tests/test_precision.py::test_underflows_matches_cast")
@given(value=st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0),
       dtype=st.sampled_from(FORMATS))
def test_float64_values(impl, ref, value, dtype):
    input_kind(dtype=str(dtype).removeprefix("torch."), value="any finite float64")
    _same(impl.precision.underflows(value, dtype), ref.precision.underflows(value, dtype),
          f"underflows({value!r}, {dtype})")
    _same(impl.precision.overflows(value, dtype), ref.precision.overflows(value, dtype),
          f"overflows({value!r}, {dtype})")


@pytest.mark.extends("tests/test_precision.py::test_overflows_matches_cast")
@given(value=st.integers(-(10**6), 10**6).filter(bool), dtype=st.sampled_from(NARROW))
def test_integer_values(impl, ref, value, dtype):
    input_kind(dtype=str(dtype).removeprefix("torch."), value="an int")
    _same(impl.precision.overflows(value, dtype), ref.precision.overflows(value, dtype),
          f"overflows({value}, {dtype})")
    _same(impl.precision.underflows(value, dtype), ref.precision.underflows(value, dtype),
          f"underflows({value}, {dtype})")


@pytest.mark.extends("tests/test_precision.py::test_bad_input_is_rejected")
@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("bytes_per_element", (None,)),
        ("bytes_per_element", (torch.complex128,)),
        ("tensor_bytes", ((3, -2, 1), torch.int8)),
        ("tensor_bytes", ((3, 4), None)),
        ("float_format", (torch.bool,)),
        ("float_format", ("float16",)),
        ("underflows", (float("-inf"), torch.bfloat16)),
        ("underflows", (1e-3, torch.int64)),
        ("underflows", (None, torch.float16)),
        ("overflows", (float("nan"), torch.float8_e5m2)),
        ("overflows", ("70000", torch.float16)),
        ("overflows", (1.0, "float16")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_like_the_reference(impl, ref, function, args):
    input_kind(function=function, argument_types=", ".join(type(a).__name__ for a in args))
    raises_like_reference(impl, ref, "precision", function, *args)


def _double_rounding_cases() -> list[tuple[str, float, torch.dtype]]:
    """Values a hair past a threshold in float64 that round onto the threshold in
    float32: casting through float32 first (double rounding) gets them wrong."""
    cases: list[tuple[str, float, torch.dtype]] = []
    for dtype in NARROW:
        info = torch.finfo(dtype)
        tiny = info.smallest_normal * info.eps
        ulp_max = math.ldexp(info.eps, math.frexp(info.max)[1] - 1)
        cases.append(("underflows", tiny / 2 * (1 + 2.0**-40), dtype))
        cases.append(("underflows", -tiny / 2 * (1 + 2.0**-40), dtype))
        if dtype is not torch.float8_e4m3fn:  # IEEE: the tie goes to inf
            cases.append(("overflows", (info.max + ulp_max / 2) * (1 - 2.0**-40), dtype))
    return cases


@pytest.mark.extends("tests/test_precision.py::test_underflows_matches_cast")
@pytest.mark.parametrize(("function", "value", "dtype"), _double_rounding_cases(), ids=str)
def test_no_double_rounding(impl, ref, function, value, dtype):
    input_kind(function=function, dtype=str(dtype).removeprefix("torch."), value="a hair past a threshold in float64")
    _same(getattr(impl.precision, function)(value, dtype), getattr(ref.precision, function)(value, dtype),
          f"{function}({value!r}, {dtype})")

"""Handout §1.1: bytes per element and float formats.

Oracles: ``Tensor.element_size()``, ``torch.finfo`` and real casts.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from tests.strategies import ALL_DTYPES, FLOAT_DTYPES, FP8_DTYPES, dtypes, shapes

FORMATS = (*FLOAT_DTYPES, *FP8_DTYPES)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_bytes_per_element_matches_element_size(impl, dtype):
    expected = torch.empty(0, dtype=dtype).element_size()
    got = impl.precision.bytes_per_element(dtype)
    assert got == expected, f"bytes_per_element({dtype}): expected {expected}, got {got!r}"
    assert type(got) is int


@given(shape=shapes(max_dims=5, min_side=0, max_side=9), dtype=dtypes)
def test_tensor_bytes_matches_measured_storage(impl, shape, dtype):
    measured = torch.empty(shape, dtype=dtype).untyped_storage().nbytes()
    got = impl.precision.tensor_bytes(shape, dtype)
    assert got == measured, f"tensor_bytes({shape}, {dtype}): expected {measured}, got {got!r}"


def test_tensor_bytes_worked_examples(impl):
    assert impl.precision.tensor_bytes((4, 8), torch.float32) == 128
    # GPT-3's feed-forward matrix in fp32: 2304 MiB.
    assert impl.precision.tensor_bytes((12288, 4 * 12288), torch.float32) == 2304 * 2**20


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_float_format_matches_finfo(impl, dtype):
    info = torch.finfo(dtype)
    fmt = impl.precision.float_format(dtype)
    mantissa = round(-math.log2(info.eps))
    assert fmt.bits == info.bits, f"{dtype}: bits {fmt.bits} != {info.bits}"
    assert fmt.mantissa_bits == mantissa, f"{dtype}: mantissa_bits {fmt.mantissa_bits} != {mantissa}"
    assert fmt.exponent_bits == info.bits - 1 - mantissa, f"{dtype}: exponent_bits {fmt.exponent_bits}"
    for field, want in (("max", info.max), ("smallest_normal", info.smallest_normal), ("eps", info.eps)):
        assert getattr(fmt, field) == want, f"{dtype}.{field}: expected {want}, got {getattr(fmt, field)}"


def test_fp8_maxima(impl):
    assert impl.precision.float_format(torch.float8_e4m3fn).max == 448.0
    assert impl.precision.float_format(torch.float8_e5m2).max == 57344.0


def _ulp_at_max(dtype: torch.dtype) -> float:
    info = torch.finfo(dtype)
    return math.ldexp(info.eps, math.frexp(info.max)[1] - 1)


def _cast(value: float, dtype: torch.dtype) -> float:
    # Values are drawn float32-exact, so going through float32 rounds once.
    return torch.tensor(value, dtype=torch.float32).to(dtype).item()


def _oracle_overflows(value: float, dtype: torch.dtype) -> bool:
    cast = _cast(value, dtype)
    if math.isinf(cast) or math.isnan(cast):
        return True
    # e4m3fn saturates in torch: past max by more than half an ulp is unrepresentable.
    return abs(value) - torch.finfo(dtype).max > _ulp_at_max(dtype) / 2


finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@given(value=finite32.filter(lambda v: v != 0), dtype=st.sampled_from(FORMATS))
@example(value=1e-8, dtype=torch.float16)
@example(value=1e-8, dtype=torch.bfloat16)
@example(value=2.0**-25, dtype=torch.float16)  # the tie rounds to even: zero
@example(value=2.0**-10, dtype=torch.float8_e4m3fn)
def test_underflows_matches_cast(impl, value, dtype):
    assume(dtype is not torch.float64)  # no float32 value underflows float64
    expected = _cast(value, dtype) == 0.0
    got = impl.precision.underflows(value, dtype)
    assert got is expected, f"underflows({value!r}, {dtype}): expected {expected}, got {got!r}"


@given(value=finite32, dtype=st.sampled_from(FORMATS))
@example(value=70000.0, dtype=torch.float16)
@example(value=70000.0, dtype=torch.bfloat16)
@example(value=65520.0, dtype=torch.float16)  # the tie above max rounds to inf
@example(value=464.0, dtype=torch.float8_e4m3fn)  # the tie stays at 448 (even)
@example(value=465.0, dtype=torch.float8_e4m3fn)
@example(value=61440.0, dtype=torch.float8_e5m2)
def test_overflows_matches_cast(impl, value, dtype):
    expected = _oracle_overflows(value, dtype)
    got = impl.precision.overflows(value, dtype)
    assert got is expected, f"overflows({value!r}, {dtype}): expected {expected}, got {got!r}"


def test_worked_examples(impl):
    assert impl.precision.underflows(1e-8, torch.float16) is True
    assert impl.precision.underflows(1e-8, torch.bfloat16) is False
    assert impl.precision.overflows(70000.0, torch.float16) is True
    assert impl.precision.overflows(70000.0, torch.bfloat16) is False


@pytest.mark.parametrize(
    ("function", "args", "error"),
    [
        ("bytes_per_element", ("float32",), TypeError),
        ("bytes_per_element", (torch.complex64,), ValueError),
        ("tensor_bytes", ((2, -1), torch.float32), ValueError),
        ("tensor_bytes", ((2, 1.5), torch.float32), TypeError),
        ("tensor_bytes", ((2, 3), "float32"), TypeError),
        ("float_format", (torch.int32,), ValueError),
        ("float_format", (4,), TypeError),
        ("underflows", (float("nan"), torch.float16), ValueError),
        ("underflows", ("1e-8", torch.float16), TypeError),
        ("overflows", (float("inf"), torch.float16), ValueError),
        ("overflows", (1.0, torch.int8), ValueError),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    with pytest.raises(error):
        getattr(impl.precision, function)(*args)


# --------------------------------------------------------------------------- more inputs (issue 16)


def _smallest_subnormal(dtype: torch.dtype) -> float:
    info = torch.finfo(dtype)
    return info.smallest_normal * info.eps  # 2^(emin - mantissa_bits)


@st.composite
def _near_the_subnormals(draw: st.DrawFn) -> tuple[float, torch.dtype]:
    """A float32-exact value between a quarter of the smallest subnormal and the
    smallest normal of a 16-bit or fp8 format (where gradual underflow lives)."""
    dtype = draw(st.sampled_from((torch.float16, torch.bfloat16, *FP8_DTYPES)))
    lo, hi = _smallest_subnormal(dtype) / 4, torch.finfo(dtype).smallest_normal
    value = draw(st.one_of(
        st.floats(lo, hi, width=32),
        st.sampled_from([_smallest_subnormal(dtype) * k for k in (0.5, 0.75, 1.0, 1.5)]),
    ))
    return (-value if draw(st.booleans()) else value), dtype


@given(_near_the_subnormals())
def test_underflows_between_the_subnormals_and_the_smallest_normal(impl, case):
    """Below the smallest normal a value is not lost yet: it becomes a subnormal,
    and only what rounds below half the smallest subnormal becomes zero."""
    value, dtype = case
    expected = _cast(value, dtype) == 0.0
    got = impl.precision.underflows(value, dtype)
    assert got is expected, (
        f"underflows({value!r}, {dtype}): a real cast gives {_cast(value, dtype)!r}, so expected {expected}, "
        f"got {got!r} (subnormals: smallest {_smallest_subnormal(dtype)!r}, smallest normal "
        f"{torch.finfo(dtype).smallest_normal!r})"
    )


@given(shape=shapes(max_dims=4, min_side=0, max_side=9), dtype=dtypes)
def test_results_have_the_promised_python_types(impl, shape, dtype):
    """``int`` where an int is promised (not np.int64, a float or a 0-d
    tensor), ``float`` for the formats' real-valued fields, ``bool`` for the
    predicates: results are exactly of these types."""
    got = impl.precision.tensor_bytes(shape, dtype)
    assert type(got) is int, f"tensor_bytes({shape}, {dtype}) should be an int, got {type(got).__name__} {got!r}"
    got = impl.precision.bytes_per_element(dtype)
    assert type(got) is int, f"bytes_per_element({dtype}) should be an int, got {type(got).__name__}"
    if dtype in FORMATS:
        fmt = impl.precision.float_format(dtype)
        for field in ("bits", "exponent_bits", "mantissa_bits"):
            v = getattr(fmt, field)
            assert type(v) is int, f"float_format({dtype}).{field} should be an int, got {type(v).__name__} {v!r}"
        for field in ("max", "smallest_normal", "eps"):
            v = getattr(fmt, field)
            assert type(v) is float, f"float_format({dtype}).{field} should be a float, got {type(v).__name__} {v!r}"
        for fn in ("underflows", "overflows"):
            v = getattr(impl.precision, fn)(1.0, dtype)
            assert type(v) is bool, f"{fn}(1.0, {dtype}) should be a bool, got {type(v).__name__} {v!r}"


@st.composite
def _near_the_largest_value(draw: st.DrawFn) -> tuple[float, torch.dtype]:
    """A float32-exact value within two ulps of a 16-bit or fp8 format's max."""
    dtype = draw(st.sampled_from((torch.float16, torch.bfloat16, *FP8_DTYPES)))
    top, ulp = torch.finfo(dtype).max, _ulp_at_max(dtype)
    value = draw(st.one_of(
        # bfloat16's max is within two of its ulps of float32's: stay finite in float32
        st.floats(top - 2 * ulp, min(top + 2 * ulp, torch.finfo(torch.float32).max), width=32),
        st.sampled_from([top + k * ulp for k in (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75)]),
    ))
    return (-value if draw(st.booleans()) else value), dtype


@given(_near_the_largest_value())
def test_overflows_near_the_largest_value(impl, case):
    """Around max, only what rounds beyond it overflows: a value up to half an
    ulp above max (exclusive for IEEE formats, whose tie rounds to inf) still
    rounds to max."""
    value, dtype = case
    expected = _oracle_overflows(value, dtype)
    got = impl.precision.overflows(value, dtype)
    assert got is expected, (
        f"overflows({value!r}, {dtype}): a real cast gives {_cast(value, dtype)!r} (max {torch.finfo(dtype).max!r}), "
        f"so expected {expected}, got {got!r}"
    )

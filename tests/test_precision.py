"""Handout §1.1: bytes per element and float formats.

Oracles: ``Tensor.element_size()``, ``torch.finfo`` and real casts.
"""

from __future__ import annotations

import math
from fractions import Fraction

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


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_tensor_bytes_of_every_dtype(impl, dtype):
    """Every dtype of bytes_per_element's list, each time (the property above
    draws a few of them per run)."""
    measured = torch.empty((3, 5), dtype=dtype).untyped_storage().nbytes()
    got = impl.precision.tensor_bytes((3, 5), dtype)
    assert got == measured, f"tensor_bytes((3, 5), {dtype}): expected {measured}, got {got!r}"


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


@pytest.mark.parametrize("zero", [0.0, -0.0], ids=["0.0", "-0.0"])
@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_underflows_of_zero_is_false(impl, zero, dtype):
    """Zero stays zero: nothing underflows (the handout's definition: a value
    that is not zero and rounds to zero)."""
    got = impl.precision.underflows(zero, dtype)
    assert got is False, f"underflows({zero!r}, {dtype}): expected False (zero is not lost), got {got!r}"


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


def test_worked_examples(impl):
    assert impl.precision.underflows(1e-8, torch.float16) is True
    assert impl.precision.underflows(1e-8, torch.bfloat16) is False
    assert impl.precision.overflows(70000.0, torch.float16) is True
    assert impl.precision.overflows(70000.0, torch.bfloat16) is False


# --------------------------------------------------------------------------- float64 values, rounded once

#: (exponent bits, mantissa bits, IEEE) of each format, from the handout's table;
#: IEEE formats reserve the all-ones exponent for inf/NaN, e4m3fn does not.
HANDOUT_LAYOUT = {
    torch.float64: (11, 52, True), torch.float32: (8, 23, True), torch.float16: (5, 10, True),
    torch.bfloat16: (8, 7, True), torch.float8_e4m3fn: (4, 3, False), torch.float8_e5m2: (5, 2, True),
}


def _handout_thresholds(dtype: torch.dtype) -> tuple[Fraction, Fraction, bool]:
    """(half the smallest subnormal, max + ulp/2, whether that tie overflows), exactly,
    from the handout's formulas: bias b = 2^(e-1) - 1, smallest subnormal 2^(1-b-m),
    IEEE max (2 - 2^-m) * 2^(2^e - 2 - b), e4m3fn max 1.75 * 2^8 = 448."""
    e, m, ieee = HANDOUT_LAYOUT[dtype]
    b = 2 ** (e - 1) - 1
    top = 2**e - 2 - b if ieee else 2**e - 1 - b  # max's binary exponent
    largest = (2 - Fraction(1, 2**m)) * Fraction(2) ** top if ieee else Fraction(7, 4) * Fraction(2) ** top
    info = torch.finfo(dtype)  # the formulas agree with torch (a check of the oracle itself)
    assert largest == Fraction(info.max) and Fraction(2) ** (1 - b - m) == Fraction(info.smallest_normal * info.eps)
    return Fraction(2) ** (1 - b - m) / 2, largest + Fraction(2) ** (top - m) / 2, ieee


def _exact_underflows(value: float, dtype: torch.dtype) -> bool:
    """At or below half the smallest subnormal (the tie rounds to even: zero)."""
    return 0 < abs(Fraction(value)) <= _handout_thresholds(dtype)[0]


def _exact_overflows(value: float, dtype: torch.dtype) -> bool:
    """At or above max + ulp/2 for IEEE formats (the tie rounds to inf); beyond it for e4m3fn."""
    _, limit, ieee = _handout_thresholds(dtype)
    x = abs(Fraction(value))
    return x >= limit if ieee else x > limit


def _is_power_of_two(q: Fraction) -> bool:
    return q > 0 and q.numerator & (q.numerator - 1) == 0 and q.denominator & (q.denominator - 1) == 0


def _show(q: Fraction) -> str:
    """A threshold, exactly: 2^k, or 2^a - 2^c (every max + ulp/2 is one), with its float where it is one."""
    if _is_power_of_two(q):
        text = f"2^{q.numerator.bit_length() - q.denominator.bit_length()}"
    else:
        a = q.numerator.bit_length()
        rest = 2**a - q
        text = f"2^{a} - 2^{rest.numerator.bit_length() - 1}" if _is_power_of_two(rest) else str(q)
    try:
        return f"{text} = {float(q)!r}" if float(q) == q else text
    except OverflowError:
        return text


def _check_rounded_once(impl, function: str, value: float, dtype: torch.dtype) -> None:
    tiny, limit, ieee = _handout_thresholds(dtype)
    if function == "underflows":
        expected = _exact_underflows(value, dtype)
        rule = f"it underflows iff 0 < |value| <= {_show(tiny)} (half the smallest subnormal)"
    else:
        expected = _exact_overflows(value, dtype)
        rule = f"it overflows iff |value| {'>=' if ieee else '>'} {_show(limit)} (max + ulp/2)"
    got = getattr(impl.precision, function)(value, dtype)
    if got is expected:
        return
    as_float32 = torch.tensor(value, dtype=torch.float32).item()
    hint = (f" (through float32 it would be {as_float32!r} first: round once, straight to {dtype})"
            if as_float32 != value else "")
    raise AssertionError(
        f"{function}({value!r}, {dtype}): the float64 value is exactly {value.hex()} and {rule}, "
        f"so expected {expected}, got {got!r}{hint}"
    )


def _a_hair_from(threshold: Fraction, below: bool, j: int) -> float:
    """threshold * (1 -/+ 2^-j): within float32's half-ulp of the threshold, so a
    cast through float32 rounds it onto the threshold."""
    return float(threshold * (1 + (-1 if below else 1) * Fraction(1, 2**j)))


def _rounded_once_cases() -> list[tuple[str, float, torch.dtype]]:
    cases: list[tuple[str, float, torch.dtype]] = []
    for dtype in (torch.float16, torch.bfloat16, *FP8_DTYPES):
        tiny, limit, _ = _handout_thresholds(dtype)
        for below in (False, True):
            cases.append(("underflows", _a_hair_from(tiny, below, 40), dtype))
            cases.append(("overflows", _a_hair_from(limit, below, 40), dtype))
    # Nothing finite and non-zero underflows or overflows float64 (nor these
    # values, float32).
    for value in (1e-50, -1e-300, 5e-324, 1e-46):
        cases.append(("underflows", value, torch.float64))
    for value in (1e300, -1.7e308, 3.5e38, 1e39):
        cases.append(("overflows", value, torch.float64))
    for below in (False, True):
        cases.append(("underflows", _a_hair_from(_handout_thresholds(torch.float32)[0], below, 40), torch.float32))
    return cases


@pytest.mark.parametrize(("function", "value", "dtype"), _rounded_once_cases(), ids=str)
def test_underflows_and_overflows_round_float64_values_once(impl, function, value, dtype):
    """The handout: "``underflows`` and ``overflows`` take ``value`` (a Python
    float, that is a float64) as the exact number it holds and round it once,
    straight to ``dtype``, float64 included", by its rule ("Casting rounds to
    nearest, ties to even. [...] A value **underflows** when it rounds to zero: at
    or below half the smallest subnormal ``2^(1-b-m)`` [...] A value
    **overflows** when it rounds beyond max: at or above ``max + ulp/2`` in IEEE
    formats"). A hair past a threshold (2^-40 of it) is on the other side of
    it, though float32 cannot tell the two apart."""
    _check_rounded_once(impl, function, value, dtype)


@st.composite
def _float64_near_a_threshold(draw: st.DrawFn) -> tuple[str, float, torch.dtype]:
    """A float64 value a hair (2^-25 to 2^-52 of it) either side of one of a
    format's two thresholds, or on it; float64 values beyond float32's range
    for float64 itself."""
    function = draw(st.sampled_from(["underflows", "overflows"]))
    dtype = draw(st.sampled_from(FORMATS))
    if dtype is torch.float64:
        # below float32's smallest subnormal, or above float32's max
        value = draw(st.floats(5e-324, 2.0**-150) if function == "underflows" else st.floats(3.5e38, 1.7e308))
    else:
        tiny, limit, _ = _handout_thresholds(dtype)
        threshold = tiny if function == "underflows" else limit
        side = draw(st.sampled_from(["below", "on", "above"]))
        j = draw(st.integers(25, 52))
        value = float(threshold) if side == "on" else _a_hair_from(threshold, side == "below", j)
    return function, (-value if draw(st.booleans()) else value), dtype


@given(_float64_near_a_threshold())
def test_underflows_and_overflows_of_float64_values_near_a_threshold(impl, case):
    """The handout's thresholds, exactly (``fractions.Fraction``), for float64
    values that are not float32-exact: "A value **underflows** when it rounds to
    zero: at or below half the smallest subnormal ``2^(1-b-m)`` [...] A value
    **overflows** when it rounds beyond max: at or above ``max + ulp/2`` in IEEE
    formats [...] in e4m3fn the tie 464 rounds to 448 [...], and anything larger
    is unrepresentable". The value is rounded once, straight to ``dtype``."""
    _check_rounded_once(impl, *case)


@given(value=st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0),
       dtype=st.sampled_from(FORMATS))
def test_underflows_and_overflows_of_any_float64_value(impl, value, dtype):
    """Any finite non-zero float64, any format of the table (float64 included):
    the handout's thresholds applied to the exact value."""
    _check_rounded_once(impl, "underflows", value, dtype)
    _check_rounded_once(impl, "overflows", value, dtype)


# --------------------------------------------------------------------------- bad input, result types


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
        ("underflows", (True, torch.float16), TypeError),  # a bool is not a number here (handout)
        ("overflows", (False, torch.float16), TypeError),
        ("tensor_bytes", ((2, True), torch.float32), TypeError),
        ("overflows", (float("inf"), torch.float16), ValueError),
        ("overflows", (1.0, torch.int8), ValueError),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    with pytest.raises(error):
        getattr(impl.precision, function)(*args)


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

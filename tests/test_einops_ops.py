"""Handout §2: einops and jaxtyping.

Oracles: plain torch (``@``, ``transpose``, ``reshape``, ``sum``, ``mean``) on
hypothesis-drawn shapes, with any number of leading dimensions and with
non-contiguous inputs (transposed or strided views).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from tests.strategies import compute_dtypes, dims, make_tensor, shapes, tensors
from tests.tolerances import assert_close, assert_close_to_exact, check_tensor

#: leading ("...") dimensions: none up to three
leading = shapes(min_dims=0, max_dims=3, max_side=4)


@given(b=dims(4), s1=dims(5), s2=dims(5), h=dims(8), dtype=compute_dtypes, data=st.data())
def test_pairwise_scores_matches_matmul(impl, b, s1, s2, h, dtype, data):
    x = data.draw(tensors((b, s1, h), dtype), label="x")
    y = data.draw(tensors((b, s2, h), dtype), label="y")
    expected = x @ y.transpose(-1, -2)
    got = impl.einops_ops.pairwise_scores(x, y)
    assert_close(got, expected, scale=h, what=f"pairwise_scores(x {tuple(x.shape)}, y {tuple(y.shape)})")


@given(batch=leading, d_in=dims(8), d_out=dims(8), dtype=compute_dtypes, data=st.data())
def test_apply_linear_matches_matmul(impl, batch, d_in, d_out, dtype, data):
    x = data.draw(tensors((*batch, d_in), dtype), label="x")
    w = data.draw(tensors((d_out, d_in), dtype), label="w")
    expected = x @ w.T
    got = impl.einops_ops.apply_linear(x, w)
    assert_close(got, expected, scale=d_in, what=f"apply_linear(x {tuple(x.shape)}, w {tuple(w.shape)})")


@given(batch=leading, heads=dims(4), d_head=dims(4), dtype=compute_dtypes, data=st.data())
def test_split_heads_matches_reshape(impl, batch, heads, d_head, dtype, data):
    x = data.draw(tensors((*batch, heads * d_head), dtype), label="x")
    expected = x.reshape(*batch, heads, d_head)
    got = impl.einops_ops.split_heads(x, heads)
    # A pure rearrangement moves values without arithmetic: exact equality.
    assert_close(got, expected, scale=0, what=f"split_heads(x {tuple(x.shape)}, heads={heads})")


@given(batch=leading, heads=dims(4), d_head=dims(4), dtype=compute_dtypes, data=st.data())
def test_merge_heads_matches_reshape_and_inverts_split(impl, batch, heads, d_head, dtype, data):
    x = data.draw(tensors((*batch, heads, d_head), dtype), label="x")
    expected = x.reshape(*batch, heads * d_head)
    got = impl.einops_ops.merge_heads(x)
    assert_close(got, expected, scale=0, what=f"merge_heads(x {tuple(x.shape)})")
    back = impl.einops_ops.split_heads(expected, heads)
    assert_close(back, x.contiguous(), scale=0, what=f"split_heads(merge_heads(x), {heads})")


EMPTY_BATCHES = [(0,), (2, 0), (0, 3)]


@pytest.mark.parametrize("batch", EMPTY_BATCHES, ids=str)
def test_merge_heads_of_an_empty_batch(impl, batch):
    """A batch with no rows still has a shape: merge_heads of ``(*batch, 3, 4)``
    is ``(*batch, 12)`` (``reshape(..., -1)`` cannot tell the size of -1 there)."""
    x = torch.zeros((*batch, 3, 4))
    got = impl.einops_ops.merge_heads(x)
    check_tensor(got, dtype=x.dtype, shape=(*batch, 12), what=f"merge_heads(x {tuple(x.shape)})")


@pytest.mark.parametrize("batch", EMPTY_BATCHES, ids=str)
def test_split_heads_of_an_empty_batch(impl, batch):
    """split_heads of ``(*batch, 12)`` with 3 heads is ``(*batch, 3, 4)``, rows or no rows."""
    x = torch.zeros((*batch, 12))
    got = impl.einops_ops.split_heads(x, 3)
    check_tensor(got, dtype=x.dtype, shape=(*batch, 3, 4), what=f"split_heads(x {tuple(x.shape)}, 3)")


@given(lead=st.lists(st.integers(1, 3), max_size=3), heads=st.integers(2, 6), data=st.data())
def test_split_heads_rejects_a_non_divisor_at_any_rank(impl, lead, heads, data):
    """``heads`` that does not divide the last dimension is a ValueError, for
    inputs of any rank (a 1-D x included)."""
    hidden = data.draw(st.integers(1, 30).filter(lambda h: h % heads), label="hidden")
    x = make_tensor((*lead, hidden))
    with pytest.raises(ValueError):
        result = impl.einops_ops.split_heads(x, heads)
        pytest.fail(f"split_heads(x of shape {tuple(x.shape)}, {heads}) should raise ValueError, got {result!r:.100}")


@given(batch=leading, hidden=dims(8), dtype=compute_dtypes, data=st.data())
def test_sum_and_mean_hidden_match_torch(impl, batch, hidden, dtype, data):
    x = data.draw(tensors((*batch, hidden), dtype), label="x")
    assert_close(impl.einops_ops.sum_hidden(x), x.sum(-1), scale=hidden, what=f"sum_hidden(x {tuple(x.shape)})")
    assert_close(impl.einops_ops.mean_hidden(x), x.mean(-1), scale=hidden, what=f"mean_hidden(x {tuple(x.shape)})")


def test_worked_examples(impl):
    """The handout's examples: heads are the outer factor of the last dimension."""
    x = torch.arange(6.0)
    got = impl.einops_ops.split_heads(x, 2)
    assert torch.equal(got, torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])), (
        f"split_heads(arange(6), heads=2): expected [[0, 1, 2], [3, 4, 5]] "
        f"(head h holds elements h*d_head ... h*d_head + d_head - 1), got {got.tolist()}"
    )
    got = impl.einops_ops.mean_hidden(torch.tensor([[1.0, 2.0, 3.0, 6.0]]))
    assert torch.equal(got, torch.tensor([3.0])), f"mean_hidden([[1, 2, 3, 6]]): expected [3.0], got {got.tolist()}"


@pytest.mark.parametrize("function", ["pairwise_scores", "apply_linear", "split_merge", "reduce"])
def test_noncontiguous_inputs(impl, function):
    """Transposed and strided views give the same answers as their contiguous copies."""
    a = make_tensor((3, 5, 4), seed=1).transpose(-1, -2)  # (3, 4, 5), transposed storage
    b = make_tensor((3, 6, 10), seed=2)[..., ::2]  # (3, 6, 5), every other element
    ops = impl.einops_ops
    if function == "pairwise_scores":
        assert_close(ops.pairwise_scores(a, b), a @ b.transpose(-1, -2), scale=5, what="pairwise_scores(views)")
    elif function == "apply_linear":
        w = make_tensor((5, 7), seed=3).T  # (7, 5), not contiguous
        assert_close(ops.apply_linear(b, w), b @ w.T, scale=5, what="apply_linear(views)")
    elif function == "split_merge":
        c = make_tensor((2, 12, 3), seed=4).transpose(-1, -2)  # (2, 3, 12)
        assert_close(ops.split_heads(c, 3), c.reshape(2, 3, 3, 4), scale=0, what="split_heads(view)")
        d = c[..., ::3].reshape(2, 3, 2, 2).transpose(-1, -2)  # (2, 3, 2, 2), a copy made non-contiguous
        assert_close(ops.merge_heads(d), d.reshape(2, 3, 4), scale=0, what="merge_heads(view)")
    else:
        assert_close(ops.sum_hidden(a), a.sum(-1), scale=5, what="sum_hidden(view)")
        assert_close(ops.mean_hidden(b), b.mean(-1), scale=5, what="mean_hidden(view)")


def _t(*shape: int) -> torch.Tensor:
    return make_tensor(shape)


# Shape mismatches must raise TypeError (jaxtyping's TypeCheckError is one) or
# ValueError; the RuntimeError torch or einops would raise later does not count.
SHAPE_ERRORS = (TypeError, ValueError)


@pytest.mark.parametrize(
    ("function", "args", "error"),
    [
        ("pairwise_scores", (_t(2, 3, 4), _t(3, 3, 4)), SHAPE_ERRORS),  # batch sizes differ
        ("pairwise_scores", (_t(2, 3, 4), _t(2, 3, 5)), SHAPE_ERRORS),  # hidden sizes differ
        ("pairwise_scores", (_t(3, 4), _t(3, 4)), SHAPE_ERRORS),  # no batch dimension
        ("apply_linear", (_t(2, 3, 4), _t(5, 3)), SHAPE_ERRORS),  # d_in differs
        ("apply_linear", (_t(2, 4), _t(4)), SHAPE_ERRORS),  # w is not a matrix
        ("apply_linear", (_t(), _t(5, 1)), SHAPE_ERRORS),  # x has no d_in
        ("split_heads", (_t(2, 6), 4), ValueError),  # 4 does not divide 6
        ("split_heads", (_t(2, 6), 0), ValueError),
        ("split_heads", (_t(2, 6), 2.0), TypeError),
        ("split_heads", (_t(2, 6), True), TypeError),  # a bool is not an int here (handout)
        ("split_heads", (_t(), 1), SHAPE_ERRORS),
        ("merge_heads", (_t(6),), SHAPE_ERRORS),  # needs heads and d_head
        ("sum_hidden", (_t(),), SHAPE_ERRORS),
        ("mean_hidden", (_t(),), SHAPE_ERRORS),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    shapes_ = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(error):
        result = getattr(impl.einops_ops, function)(*args)
        pytest.fail(f"{function}{tuple(shapes_)} should raise {error}, returned {result!r:.200}")


# --------------------------------------------------------------------------- float64 accuracy

F64 = torch.float64
#: a float64 computation of n terms is off by at most about n * eps(float64) = n * 2.2e-16
#: of the sum of the terms' magnitudes, whatever the order it adds them in: this allows
#: 4500 times that. Rounding the inputs to float32 alone moves each term by ~6e-8 of
#: itself, tens to thousands of times this bound for the sizes drawn here (up to 128).
F64_ROUNDING_PER_TERM = 1e-12


def _assert_float64_accurate(got, expected: torch.Tensor, magnitude: torch.Tensor, n: int, what: str) -> None:
    """|got - expected| <= 1e-12 * n * magnitude elementwise, where ``magnitude``
    sums the absolute values of the n terms behind each element (so a
    cancelling sum is not held to a tolerance relative to its small result):
    ``assert_close_to_exact`` with that bound and no oracle-error term."""
    assert_close_to_exact(
        got, expected, dtype=F64, error=torch.zeros_like(expected), magnitude=n * magnitude,
        factor=0.0, ulps=F64_ROUNDING_PER_TERM / torch.finfo(F64).eps,
        what=f"{what} (float64 inputs must give a float64-accurate result: computed in float64, not in float32 "
             f"and cast back)",
    )


@st.composite
def _linear_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    batch, d_in, d_out = draw(shapes(min_dims=0, max_dims=2, max_side=3)), draw(dims(96)), draw(dims(6))
    return draw(tensors((*batch, d_in), F64), label="x"), draw(tensors((d_out, d_in), F64), label="w")


@given(_linear_inputs())
@example((make_tensor((3, 64), F64, 1), make_tensor((5, 64), F64, 2)))
@example((make_tensor((2, 2, 128), F64, 3).transpose(0, 1), make_tensor((4, 128), F64, 4)))
def test_apply_linear_is_float64_accurate(impl, case):
    """The module docstring: "Results have the inputs' dtype and are computed in
    it: float64 inputs give float64-accurate results". Oracle: ``x @ w.T`` in
    float64, within float64's rounding over ``d_in`` terms."""
    x, w = case
    got = impl.einops_ops.apply_linear(x, w)
    _assert_float64_accurate(got, x @ w.T, x.abs() @ w.abs().T, x.shape[-1],
                             f"apply_linear(x {tuple(x.shape)} float64, w {tuple(w.shape)} float64)")


@st.composite
def _pairwise_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    b, s1, s2, h = draw(dims(3)), draw(dims(4)), draw(dims(4)), draw(dims(96))
    return draw(tensors((b, s1, h), F64), label="x"), draw(tensors((b, s2, h), F64), label="y")


@given(_pairwise_inputs())
@example((make_tensor((2, 3, 64), F64, 5), make_tensor((2, 4, 64), F64, 6)))
def test_pairwise_scores_is_float64_accurate(impl, case):
    """The module docstring: "float64 inputs give float64-accurate results".
    Oracle: ``x @ y.transpose(-1, -2)`` in float64, within float64's rounding
    over ``hidden`` terms."""
    x, y = case
    got = impl.einops_ops.pairwise_scores(x, y)
    _assert_float64_accurate(got, x @ y.transpose(-1, -2), x.abs() @ y.abs().transpose(-1, -2), x.shape[-1],
                             f"pairwise_scores(x {tuple(x.shape)} float64, y {tuple(y.shape)} float64)")


@st.composite
def _hidden_inputs(draw: st.DrawFn) -> torch.Tensor:
    return draw(tensors((*draw(shapes(min_dims=0, max_dims=2, max_side=3)), draw(dims(128))), F64), label="x")


@given(_hidden_inputs())
@example(make_tensor((3, 64), F64, 7))
@example(make_tensor((2, 200), F64, 8)[:, ::2])
def test_sum_and_mean_hidden_are_float64_accurate(impl, x):
    """The module docstring: "float64 inputs give float64-accurate results".
    Oracles: ``x.sum(-1)`` and ``x.mean(-1)`` in float64, within float64's
    rounding over ``hidden`` terms (one more for the mean's division)."""
    n = x.shape[-1]
    what = f"(x {tuple(x.shape)} float64)"
    _assert_float64_accurate(impl.einops_ops.sum_hidden(x), x.sum(-1), x.abs().sum(-1), n, "sum_hidden" + what)
    _assert_float64_accurate(impl.einops_ops.mean_hidden(x), x.mean(-1), x.abs().mean(-1), n + 1, "mean_hidden" + what)

"""Hidden differential checks for handout §2: the submission against the
reference on shapes the public tests do not draw (more leading dimensions,
larger sizes, half-precision dtypes, non-contiguous views of every kind)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind
from tests.strategies import dims, shapes, tensors
from tests.tolerances import assert_close

DTYPES = st.sampled_from((torch.float64, torch.float32, torch.float16, torch.bfloat16))
#: up to five leading dimensions, some of size 1
leading = shapes(min_dims=0, max_dims=5, max_side=3)
SHAPE_ERRORS = (TypeError, ValueError)


@pytest.mark.extends("tests/test_einops_ops.py::test_pairwise_scores_matches_matmul")
@given(b=dims(6), s1=dims(24), s2=dims(24), h=dims(64), dtype=DTYPES, data=st.data())
def test_pairwise_scores(impl, ref, b, s1, s2, h, dtype, data):
    input_kind(dtype=str(dtype).removeprefix("torch."), hidden="up to 64", seq="up to 24")
    x = data.draw(tensors((b, s1, h), dtype), label="x")
    y = data.draw(tensors((b, s2, h), dtype), label="y")
    expected = ref.einops_ops.pairwise_scores(x, y)
    assert_close(impl.einops_ops.pairwise_scores(x, y), expected, scale=4 * h, what="pairwise_scores")


@pytest.mark.extends("tests/test_einops_ops.py::test_apply_linear_matches_matmul")
@given(batch=leading, d_in=dims(48), d_out=dims(48), dtype=DTYPES, data=st.data())
def test_apply_linear(impl, ref, batch, d_in, d_out, dtype, data):
    input_kind(dtype=str(dtype).removeprefix("torch."), leading_dims=str(len(batch)), d_in="up to 48")
    x = data.draw(tensors((*batch, d_in), dtype), label="x")
    w = data.draw(tensors((d_out, d_in), dtype), label="w")
    expected = ref.einops_ops.apply_linear(x, w)
    assert_close(impl.einops_ops.apply_linear(x, w), expected, scale=4 * d_in, what="apply_linear")


@pytest.mark.extends("tests/test_einops_ops.py::test_merge_heads_matches_reshape_and_inverts_split")
@given(batch=leading, heads=dims(12), d_head=dims(12), dtype=DTYPES, data=st.data())
def test_split_and_merge_heads(impl, ref, batch, heads, d_head, dtype, data):
    input_kind(dtype=str(dtype).removeprefix("torch."), leading_dims=str(len(batch)), heads="up to 12")
    x = data.draw(tensors((*batch, heads * d_head), dtype), label="x")
    split = ref.einops_ops.split_heads(x, heads)
    assert_close(impl.einops_ops.split_heads(x, heads), split, scale=0, what=f"split_heads(heads={heads})")
    view = data.draw(tensors((*batch, heads, d_head), dtype), label="y")
    assert_close(impl.einops_ops.merge_heads(view), ref.einops_ops.merge_heads(view), scale=0, what="merge_heads")


@pytest.mark.extends("tests/test_einops_ops.py::test_sum_and_mean_hidden_match_torch")
@given(batch=leading, hidden=dims(64), dtype=DTYPES, data=st.data())
def test_sum_and_mean_hidden(impl, ref, batch, hidden, dtype, data):
    input_kind(dtype=str(dtype).removeprefix("torch."), leading_dims=str(len(batch)), hidden="up to 64")
    x = data.draw(tensors((*batch, hidden), dtype), label="x")
    assert_close(impl.einops_ops.sum_hidden(x), ref.einops_ops.sum_hidden(x), scale=4 * hidden, what="sum_hidden")
    assert_close(impl.einops_ops.mean_hidden(x), ref.einops_ops.mean_hidden(x), scale=4 * hidden, what="mean_hidden")


@pytest.mark.extends("tests/test_einops_ops.py::test_bad_input_is_rejected")
@given(batch=leading, heads=st.integers(2, 9), d_head=dims(6), data=st.data())
def test_split_heads_rejects_a_non_divisor(impl, ref, batch, heads, d_head, data):
    input_kind(leading_dims=str(len(batch)), heads="2 to 9", hidden="not a multiple of heads")
    hidden = heads * d_head + data.draw(st.integers(1, heads - 1), label="remainder")
    x = data.draw(tensors((*batch, hidden)), label="x")
    with pytest.raises(ValueError):
        ref.einops_ops.split_heads(x, heads)
    with pytest.raises(ValueError):
        impl.einops_ops.split_heads(x, heads)


@pytest.mark.extends("tests/test_einops_ops.py::test_bad_input_is_rejected")
@given(batch=leading, d_in=dims(16), d_out=dims(16), delta=st.integers(1, 5), data=st.data())
def test_mismatched_shapes_are_rejected(impl, ref, batch, d_in, d_out, delta, data):
    input_kind(leading_dims=str(len(batch)), mismatch="inner dimensions or batch sizes")
    x = data.draw(tensors((*batch, d_in)), label="x")
    w = data.draw(tensors((d_out, d_in + delta)), label="w")
    with pytest.raises(SHAPE_ERRORS):
        ref.einops_ops.apply_linear(x, w)
    with pytest.raises(SHAPE_ERRORS):
        impl.einops_ops.apply_linear(x, w)
    b, s, h = data.draw(st.tuples(dims(4), dims(4), dims(8)), label="bsh")
    with pytest.raises(SHAPE_ERRORS):
        impl.einops_ops.pairwise_scores(torch.zeros(b, s, h), torch.zeros(b + delta, s, h))

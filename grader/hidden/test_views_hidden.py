"""Hidden differential checks for handout §1.2: the submission against the
reference on inputs the public tests do not use (many dimensions, large sides
and strides, zero strides, views made by other operations: expand, narrow,
as_strided, diagonal, unfold, dtype views)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind, raises_like_reference


def _same(got, expected, call: str) -> None:
    assert type(got) is type(expected) and got == expected, f"{call}: expected {expected!r}, got {got!r}"


@pytest.mark.extends("tests/test_views.py::test_contiguous_strides_match_torch")
@given(shape=st.lists(st.integers(0, 1000), max_size=8).map(tuple))
def test_contiguous_strides_many_dims(impl, ref, shape):
    input_kind(dims=str(len(shape)), sides="up to 1000")
    got, expected = impl.views.contiguous_strides(shape), ref.views.contiguous_strides(shape)
    assert tuple(got) == expected, f"contiguous_strides({shape}): expected {expected}, got {got!r}"


@pytest.mark.extends("tests/test_views.py::test_storage_index_finds_the_element")
@given(data=st.data(), ndim=st.integers(0, 7), offset=st.integers(0, 10**9))
def test_storage_index_large(impl, ref, data, ndim, offset):
    input_kind(dims=str(ndim), strides="up to 1e6", offset="up to 1e9")
    index = tuple(data.draw(st.lists(st.integers(0, 10**4), min_size=ndim, max_size=ndim)))
    strides = tuple(data.draw(st.lists(st.integers(0, 10**6), min_size=ndim, max_size=ndim)))
    _same(impl.views.storage_index(index, strides, offset), ref.views.storage_index(index, strides, offset),
          f"storage_index({index}, {strides}, {offset})")


@pytest.mark.extends("tests/test_views.py::test_is_contiguous_matches_torch")
@given(data=st.data(), shape=st.lists(st.integers(0, 5), max_size=6).map(tuple))
def test_is_contiguous_random_strides(impl, ref, data, shape):
    input_kind(dims=str(len(shape)), strides="random or near-contiguous")
    strides = tuple(data.draw(st.lists(st.integers(0, 400), min_size=len(shape), max_size=len(shape))))
    if data.draw(st.booleans()):  # near-contiguous: contiguous strides with one changed
        near = list(torch.empty(shape).stride())
        if near:
            near[data.draw(st.integers(0, len(near) - 1))] = data.draw(st.integers(0, 64))
        strides = tuple(near)
    _same(impl.views.is_contiguous(shape, strides), ref.views.is_contiguous(shape, strides),
          f"is_contiguous({shape}, {strides})")


_VIEWS = {
    "x": lambda t: t,
    "x.expand": lambda t: t[:1].expand(3, -1),
    "x.narrow": lambda t: t.narrow(1, 2, 3),
    "x.as_strided": lambda t: t.as_strided((2, 2), (1, 7), 5),
    "x.diagonal": lambda t: t.diagonal(),
    "x.unfold": lambda t: t.view(-1).unfold(0, 4, 3),
    "x.view(int32)": lambda t: t.view(torch.int32),
    "x[-1, -1]": lambda t: t[-1, -1],
    "x.unsqueeze": lambda t: t.unsqueeze(0)[:, 1:],
}


@pytest.mark.extends("tests/test_views.py::test_same_storage_matches_untyped_storage")
@given(a=st.sampled_from(sorted(_VIEWS)), b=st.sampled_from(sorted(_VIEWS)), shared=st.booleans())
def test_same_storage_other_views(impl, ref, a, b, shared):
    input_kind(views=f"{a} and {b}", same_tensor=str(shared))
    base = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    other = base.clone()
    x, y = _VIEWS[a](base), _VIEWS[b](base if shared else other)
    _same(impl.views.same_storage(x, y), ref.views.same_storage(x, y),
          f"same_storage({a}, {b} of {'the same' if shared else 'another'} tensor)")


@pytest.mark.extends("tests/test_views.py::test_bad_input_is_rejected")
@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("contiguous_strides", ((3, None),)),
        ("contiguous_strides", ((-1,),)),
        ("storage_index", ((0, 0), (1, 1, 1))),
        ("storage_index", ((0,), (1,), -3)),
        ("storage_index", ((0.0,), (1,))),
        ("is_contiguous", ((2, 2), (2, -1))),
        ("is_contiguous", ((2,), ("1",))),
        ("same_storage", (torch.zeros(2), "tensor")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_like_the_reference(impl, ref, function, args):
    input_kind(function=function, argument_types=", ".join(type(a).__name__ for a in args))
    raises_like_reference(impl, ref, "views", function, *args)

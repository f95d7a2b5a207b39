"""Handout §1.2: strides, contiguity and shared storage.

Oracles: ``Tensor.stride()``, ``Tensor.is_contiguous()``, ``untyped_storage()``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from tests.scenarios import views as scenarios
from tests.strategies import shapes


@given(shape=shapes(max_dims=5, min_side=0))
# The edges the contract names, in every profile: no dimension, a size-0
# dimension first, in the middle and last (a product taken through the 0
# gives 0 where torch gives the product of the later sizes), size-1 dimensions.
@example(shape=())
@example(shape=(0, 2, 3))
@example(shape=(2, 0, 3))
@example(shape=(2, 3, 0))
@example(shape=(1, 1, 4))
def test_contiguous_strides_match_torch(impl, shape):
    expected = torch.empty(shape).stride()
    got = impl.views.contiguous_strides(shape)
    assert tuple(got) == expected, f"contiguous_strides({shape}): expected {expected}, got {got!r}"


@st.composite
def views(draw: st.DrawFn) -> tuple[torch.Tensor, tuple[int, ...]]:
    """A tensor view made by slicing, transposing and indexing, and one element of it."""
    base = torch.arange(draw(st.integers(1, 6)) * 2 * 3 * 4).reshape(-1, 2, 3, 4)
    t = base
    for op in draw(st.lists(st.sampled_from(["t", "slice", "index", "step"]), max_size=4)):
        if op == "t" and t.dim() >= 2:
            t = t.transpose(0, t.dim() - 1)
        elif op == "slice" and t.shape[0] > 1:
            t = t[1:]
        elif op == "index" and t.dim() > 1:
            t = t[t.shape[0] - 1]
        elif op == "step" and t.dim() >= 1:
            t = t[..., ::2]
    index = tuple(draw(st.integers(0, s - 1)) for s in t.shape)
    return t, index


@given(views())
def test_storage_index_finds_the_element(impl, case):
    t, index = case
    flat = t.untyped_storage()
    got = impl.views.storage_index(index, t.stride(), t.storage_offset())
    storage = torch.empty(0, dtype=t.dtype).set_(flat)
    assert storage[got] == t[index], (
        f"storage_index({index}, {t.stride()}, {t.storage_offset()}) = {got!r}: "
        f"storage holds {storage[got].item() if 0 <= got < storage.numel() else 'nothing'} "
        f"there, but the element is {t[index].item()}"
    )


def test_storage_index_worked_example(impl):
    assert impl.views.storage_index((1, 2), (4, 1)) == 6
    assert impl.views.storage_index((1, 2), (4, 1), 3) == 9


@given(views())
def test_storage_index_without_offset_starts_at_zero(impl, case):
    """``storage_offset`` defaults to 0: the index of an element relative to
    the start of the view's own storage offset."""
    t, index = case
    expected = sum(i * s for i, s in zip(index, t.stride(), strict=True))
    got = impl.views.storage_index(index, t.stride())
    assert got == expected, f"storage_index({index}, {t.stride()}) without an offset: expected {expected}, got {got!r}"


@given(
    shape=shapes(max_dims=4, min_side=0, max_side=4),
    data=st.data(),
)
def test_is_contiguous_matches_torch(impl, shape, data):
    contiguous = torch.empty(shape).stride()
    # Half the time perturb the strides, size-1 dimensions included.
    strides = data.draw(
        st.one_of(
            st.just(contiguous),
            st.tuples(*[st.sampled_from([s, s + 1, 0, 7]) for s in contiguous]),
        )
    )
    expected = torch.empty_strided(shape, strides).is_contiguous()
    got = impl.views.is_contiguous(shape, strides)
    assert got is expected, f"is_contiguous({shape}, {strides}): expected {expected}, got {got!r}"


def test_size_one_strides_do_not_matter(impl):
    assert impl.views.is_contiguous((2, 1, 3), (3, 100, 1)) is True
    assert impl.views.is_contiguous((2, 3), (1, 2)) is False


#: views of a (4, 6) tensor, each with a name for the messages
VIEWS = {
    "x": lambda t: t,
    "x[1]": lambda t: t[1],
    "x[2:, 1:]": lambda t: t[2:, 1:],
    "x.T": lambda t: t.T,
    "x.view(-1)[5:]": lambda t: t.view(-1)[5:],
    "x[:, 3]": lambda t: t[:, 3],
    "x[3, 5:]": lambda t: t[3, 5:],
}


@st.composite
def view_pairs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, bool, tuple[str, str]]:
    base = torch.arange(24.0).reshape(4, 6)
    other = torch.arange(24.0).reshape(4, 6)  # equal values, different storage
    a_name, b_name = draw(st.sampled_from(sorted(VIEWS))), draw(st.sampled_from(sorted(VIEWS)))
    shared = draw(st.booleans())
    return VIEWS[a_name](base), VIEWS[b_name](base if shared else other), shared, (a_name, b_name)


@given(view_pairs())
def test_same_storage_matches_untyped_storage(impl, case):
    a, b, shared, names = case
    got = impl.views.same_storage(a, b)
    assert got is shared, (
        f"same_storage({names[0]}, {names[1]} of {'the same' if shared else 'another'} tensor): "
        f"expected {shared}, got {got!r}"
    )


def test_same_storage_is_not_data_ptr(impl):
    x = torch.arange(16.0).reshape(4, 4)
    assert impl.views.same_storage(x, x[1]) is True
    assert impl.views.same_storage(x[1], x.clone()[1]) is False


def test_same_storage_is_false_across_devices(impl):
    """Tensors on different devices never share a storage (here a CPU tensor
    and one on torch's data-less ``meta`` device)."""
    got = impl.scenario(scenarios.same_storage_across_devices)
    assert got == [False, False], f"same_storage(cpu tensor, meta tensor) and back: expected [False, False], got {got}"


def test_same_storage_of_empty_tensors(impl):
    """An empty view of a tensor still shares its storage (True). Two separate
    tensors whose storages hold no bytes share nothing to compare: either
    answer is accepted, as long as it is a bool."""
    x = torch.arange(6.0)
    assert impl.views.same_storage(x, x[2:2]) is True, "x and its empty view x[2:2] share x's storage"
    got = impl.views.same_storage(torch.empty(0), torch.empty(0))
    assert type(got) is bool, f"same_storage of two empty tensors should be a bool, got {type(got).__name__}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                                   torch.uint8, torch.bool], ids=str)
def test_same_storage_of_views_of_any_dtype(impl, dtype):
    """The docstring: "Whether ``a`` and ``b`` are views of the same storage,
    e.g. ``x`` and ``x[1]``, for tensors of any dtype"; the handout: "a storage
    offset counts elements, and an element's size in bytes depends on the
    dtype". Every pair of these views, of one tensor or of two equal ones."""
    base = (torch.arange(24) % 7).reshape(4, 6).to(dtype)
    other = base.clone()  # equal values, another storage
    for a_name, make_a in VIEWS.items():
        for b_name, make_b in VIEWS.items():
            for shared in (True, False):
                a, b = make_a(base), make_b(base if shared else other)
                got = impl.views.same_storage(a, b)
                assert got is shared, (
                    f"same_storage({a_name}, {b_name} of {'the same' if shared else 'another'} {dtype} tensor x "
                    f"of shape (4, 6); storage offsets {a.storage_offset()} and {b.storage_offset()}, "
                    f"{a.element_size()} bytes per element): expected {shared}, got {got!r}"
                )


@pytest.mark.parametrize(
    ("function", "args", "error"),
    [
        ("contiguous_strides", ((2, -3),), ValueError),
        ("contiguous_strides", ("23",), TypeError),
        ("storage_index", ((1, 2), (4,)), ValueError),
        ("storage_index", ((1, -2), (4, 1)), ValueError),
        ("storage_index", ((1, 2), (4, 1), -1), ValueError),  # storage_offset is an entry too
        ("storage_index", ((1, True), (4, 1)), TypeError),  # a bool is not an int here (handout)
        ("is_contiguous", ((2, 3), (3, 1, 1)), ValueError),
        ("same_storage", ([1, 2], [1, 2]), TypeError),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    with pytest.raises(error):
        getattr(impl.views, function)(*args)


@given(shape=shapes(max_dims=5, min_side=0), data=st.data())
def test_results_have_the_promised_python_types(impl, shape, data):
    """``contiguous_strides`` is a tuple of ints, ``storage_index`` an int and
    ``is_contiguous`` / ``same_storage`` bools: exactly these types (not
    lists, np.int64, 0-d tensors or numpy bools)."""
    strides = impl.views.contiguous_strides(shape)
    assert type(strides) is tuple and all(type(s) is int for s in strides), (
        f"contiguous_strides({shape}) should be a tuple of ints, got {strides!r}"
    )
    expected = torch.empty(shape).stride()
    got = impl.views.is_contiguous(shape, expected)
    assert type(got) is bool, f"is_contiguous should be a bool, got {type(got).__name__} {got!r}"
    index = tuple(data.draw(st.integers(0, max(s - 1, 0)), label="index") for s in shape)
    got = impl.views.storage_index(index, expected)
    assert type(got) is int, f"storage_index({index}, {expected}) should be an int, got {type(got).__name__} {got!r}"
    x = torch.arange(12.0).reshape(3, 4)
    got = impl.views.same_storage(x, x[1:])
    assert type(got) is bool, f"same_storage should be a bool, got {type(got).__name__} {got!r}"

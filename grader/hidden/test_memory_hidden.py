"""Hidden differential checks for handout §1.3: the submission against the
reference on inputs the public tests do not use (billions of parameters, every
parameter and activation dtype, mixed dtypes, deeper and tied models, larger
memory budgets). Each names the public test whose property it extends."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind, raises_like_reference
from tests.memory_checks import exact_floor, float_memory, float_per
from tests.scenarios import memory as scenarios
from tests.strategies import ALL_DTYPES

OPTIMIZERS = ("sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw")


def _same(got, expected, call: str) -> None:
    assert type(got) is type(expected) and got == expected, f"{call}: expected {expected!r}, got {got!r}"


@pytest.mark.extends("tests/test_memory.py::test_optimizer_state_floats_matches_torch")
@given(name=st.sampled_from(OPTIMIZERS), n=st.integers(0, 10**13))
def test_optimizer_state_floats_large(impl, ref, name, n):
    input_kind(optimizer=name, num_params="up to 1e13")
    _same(impl.memory.optimizer_state_floats(name, n), ref.memory.optimizer_state_floats(name, n),
          f"optimizer_state_floats({name!r}, {n})")


@pytest.mark.extends("tests/test_memory.py::test_training_memory_matches_a_real_step")
@given(n=st.integers(0, 10**12), acts=st.integers(0, 10**12), name=st.sampled_from(OPTIMIZERS),
       pdt=st.sampled_from(ALL_DTYPES), adt=st.sampled_from(ALL_DTYPES))
def test_training_memory_mixed_dtypes(impl, ref, n, acts, name, pdt, adt):
    input_kind(optimizer=name, param_dtype=str(pdt).removeprefix("torch."),
               activation_dtype=str(adt).removeprefix("torch."), sizes="up to 1e12 parameters and activations")
    got = impl.memory.training_memory(n, acts, name, pdt, adt)
    expected = ref.memory.training_memory(n, acts, name, pdt, adt)
    call = f"training_memory({n}, {acts}, {name!r}, {pdt}, {adt})"
    for field in ("parameters", "gradients", "optimizer_state", "activations", "total"):
        _same(getattr(got, field), getattr(expected, field), f"{call}.{field}")


@pytest.mark.extends("tests/test_memory.py::test_max_trainable_parameters_of_floats_is_the_exact_floor")
@given(memory=st.one_of(st.integers(0, 10**16), float_memory), per=st.one_of(st.integers(1, 10**4), float_per))
def test_max_trainable_parameters_floats(impl, memory, per):
    if isinstance(per, float) and memory > 10**13:
        memory = 10**13  # the docstring's range for float arguments
    input_kind(memory_bytes=type(memory).__name__, bytes_per_parameter=type(per).__name__)
    want = exact_floor(memory, per)
    _same(impl.memory.max_trainable_parameters(memory, per), want,
          f"max_trainable_parameters({memory!r}, {per!r})")


@pytest.mark.extends("tests/test_memory.py::test_count_parameters_matches_numel")
@given(dims=st.lists(st.integers(1, 40), min_size=1, max_size=7), bias=st.booleans(), tie=st.booleans())
def test_count_parameters_deeper_models(impl, ref, dims, bias, tie):
    if tie:
        dims = [dims[0]] * len(dims)  # square layers, so the tie happens
    input_kind(model=f"MLP of {len(dims)} widths", bias=str(bias), tied_weights=str(tie))
    _same(impl.scenario(scenarios.count_parameters_of, dims, bias, tie),
          ref.scenario(scenarios.count_parameters_of, dims, bias, tie),
          f"count_parameters(MLP {dims}, bias={bias}, tied={tie})")


@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("optimizer_state_floats", ("adam", 2.5)),
        ("optimizer_state_floats", ("momentum", 3)),
        ("training_memory", (10, -1, "sgd")),
        ("training_memory", (10, 0, "sgd", torch.float32, "bf16")),
        ("training_memory", (10, 0, None)),
        ("max_trainable_parameters", (float("inf"), 2)),
        ("max_trainable_parameters", (100, -2)),
        ("max_trainable_parameters", (100, None)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
@pytest.mark.extends("tests/test_memory.py::test_bad_input_is_rejected")
def test_bad_input_like_the_reference(impl, ref, function, args):
    input_kind(function=function, argument_types=", ".join(type(a).__name__ for a in args))
    raises_like_reference(impl, ref, "memory", function, *args)

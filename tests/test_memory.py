"""Handout §1.3: training memory.

Oracle: the bytes a real model, its ``.grad``s and a real ``torch.optim``
optimizer's state hold after one step, and the activations autograd saves.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.memory_checks import exact_floor, float_memory, float_per
from tests.scenarios import memory as scenarios

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.1),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1),
}
PARAM_DTYPES = (torch.float32, torch.float64, torch.bfloat16)

widths = st.lists(st.integers(1, 12), min_size=1, max_size=4)


@given(dims=widths, bias=st.booleans(), tie=st.booleans())
def test_count_parameters_matches_numel(impl, dims, bias, tie):
    model = scenarios.build_model(dims, bias, tie)
    expected = sum(p.numel() for p in model.parameters())
    got = impl.scenario(scenarios.count_parameters_of, dims, bias, tie)
    assert got == expected, f"count_parameters(MLP {dims}, bias={bias}, tied={tie}): expected {expected}, got {got!r}"


def test_tied_weights_count_once(impl):
    got = impl.scenario(scenarios.count_parameters_of, dims=[5, 5, 5], bias=False, tie=True)
    assert got == 25, f"a weight shared by two layers counts once: expected 25, got {got!r}"


@given(dims=widths, bias=st.booleans(), data=st.data())
def test_count_parameters_counts_frozen_parameters_and_no_buffers(impl, dims, bias, data):
    """Every parameter counts, frozen (``requires_grad=False``) or not, and
    nothing else does: a BatchNorm's running statistics are buffers."""
    n_params = len(list(scenarios.build_model(dims, bias, False).parameters()))
    frozen = data.draw(st.lists(st.booleans(), min_size=n_params, max_size=n_params), label="frozen")
    buffers = data.draw(st.booleans(), label="buffers")
    model = scenarios.frozen_model_with_buffers(dims, bias, frozen, buffers)
    expected = sum(p.numel() for p in model.parameters())
    got = impl.scenario(scenarios.count_parameters_of_frozen, dims, bias, frozen, buffers)
    assert got == expected, (
        f"count_parameters(MLP {dims}, bias={bias}, frozen={frozen}, with BatchNorm buffers={buffers}): "
        f"expected {expected} (every parameter, frozen ones included; buffers are not parameters), got {got!r}"
    )


@pytest.mark.parametrize("buffers", [False, True], ids=["frozen", "frozen+buffers"])
def test_count_parameters_of_a_frozen_model(impl, buffers):
    """A fully frozen 4 -> 3 -> 2 MLP with biases still has 4*3 + 3 + 3*2 + 2 = 23 parameters."""
    got = impl.scenario(scenarios.count_parameters_of_frozen, dims=[4, 3, 2], bias=True, frozen=[True] * 4,
                        buffers=buffers)
    assert got == 23, (
        f"count_parameters of a frozen 4 -> 3 -> 2 MLP with biases (buffers={buffers}): expected 23, got {got!r}"
    )


def _measure_step(name: str, dims: list[int], dtype: torch.dtype, batch: int) -> dict[str, int]:
    """Bytes held after one real step: params, grads, per-parameter state, activations."""
    torch.manual_seed(0)
    model = scenarios.build_model(dims, bias=True, tie=False, dtype=dtype)
    params = list(model.parameters())
    opt = OPTIMIZERS[name](params)
    saved: dict[int, torch.Tensor] = {}
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs:
            saved[ptr] = t
        return t

    x = torch.randn(batch, dims[0], dtype=dtype)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).square().mean()
    loss.backward()
    opt.step()
    nbytes = lambda ts: sum(t.untyped_storage().nbytes() for t in ts)
    state = [
        v for p in params for v in opt.state[p].values()
        if isinstance(v, torch.Tensor) and v.shape == p.shape
    ]
    acts = list(saved.values())
    return {
        "num_params": sum(p.numel() for p in params),
        "num_activations": sum(t.numel() for t in acts),
        "parameters": nbytes(params),
        "gradients": nbytes([p.grad for p in params]),
        "optimizer_state": nbytes(state),
        "activations": nbytes(acts),
    }


@given(
    name=st.sampled_from(sorted(OPTIMIZERS)),
    dims=st.lists(st.integers(1, 16), min_size=2, max_size=4),
    dtype=st.sampled_from(PARAM_DTYPES),
    batch=st.integers(1, 4),
)
def test_training_memory_matches_a_real_step(impl, name, dims, dtype, batch):
    measured = _measure_step(name, dims, dtype, batch)
    got = impl.memory.training_memory(
        measured["num_params"], measured["num_activations"], name, dtype, dtype
    )
    for field in ("parameters", "gradients", "optimizer_state", "activations"):
        assert getattr(got, field) == measured[field], (
            f"training_memory({measured['num_params']}, {measured['num_activations']}, {name!r}, "
            f"{dtype}).{field}: a real step holds {measured[field]} bytes, got {getattr(got, field)!r}"
        )
    expected_total = sum(measured[f] for f in ("parameters", "gradients", "optimizer_state", "activations"))
    assert got.total == expected_total, f"total: expected {expected_total}, got {got.total!r}"


@settings(max_examples=40)  # two real steps per example
@given(
    name=st.sampled_from(sorted(OPTIMIZERS)),
    dims=st.lists(st.integers(1, 16), min_size=2, max_size=4),
    param_dtype=st.sampled_from(PARAM_DTYPES),
    activation_dtype=st.sampled_from(PARAM_DTYPES),
    batch=st.integers(1, 4),
)
def test_training_memory_with_other_activation_dtype(impl, name, dims, param_dtype, activation_dtype, batch):
    """Parameters, gradients and state follow ``param_dtype``; activations
    follow ``activation_dtype`` (measured: a real step in each dtype)."""
    params = _measure_step(name, dims, param_dtype, batch)
    acts = _measure_step(name, dims, activation_dtype, batch)
    got = impl.memory.training_memory(params["num_params"], acts["num_activations"], name,
                                      param_dtype, activation_dtype)
    measured = {"parameters": params["parameters"], "gradients": params["gradients"],
                "optimizer_state": params["optimizer_state"], "activations": acts["activations"]}
    call = (f"training_memory({params['num_params']}, {acts['num_activations']}, {name!r}, "
            f"{param_dtype}, {activation_dtype})")
    for field, want in measured.items():
        v = getattr(got, field)
        assert v == want and type(v) is int, f"{call}.{field}: measured {want} bytes, got {type(v).__name__} {v!r}"
    assert got.total == sum(measured.values()) and type(got.total) is int, f"{call}.total: got {got.total!r}"


@given(
    name=st.sampled_from(sorted(OPTIMIZERS)),
    n=st.integers(0, 10**9),
    acts=st.integers(0, 10**9),
    param_dtype=st.sampled_from(PARAM_DTYPES),
)
def test_training_memory_defaults_are_float32(impl, name, n, acts, param_dtype):
    """Both dtypes default to float32, each on its own: leaving out
    ``activation_dtype`` means float32 activations whatever ``param_dtype`` is."""
    default = impl.memory.training_memory(n, acts, name)
    explicit = impl.memory.training_memory(n, acts, name, torch.float32, torch.float32)
    assert default == explicit, f"training_memory({n}, {acts}, {name!r}) should use float32 for both dtypes"
    only_params = impl.memory.training_memory(n, acts, name, param_dtype)
    assert only_params.activations == 4 * acts, (
        f"training_memory({n}, {acts}, {name!r}, {param_dtype}).activations: activations default to float32 "
        f"(4 bytes each): expected {4 * acts}, got {only_params.activations!r}"
    )


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_state_floats_matches_torch(impl, name):
    measured = _measure_step(name, [7, 5, 3], torch.float32, 2)
    expected = measured["optimizer_state"] // 4
    got = impl.memory.optimizer_state_floats(name, measured["num_params"])
    assert got == expected, (
        f"optimizer_state_floats({name!r}, {measured['num_params']}): expected {expected}, got {got!r}"
    )


def test_adamw_in_fp32_costs_16_bytes_per_parameter(impl):
    m = impl.memory.training_memory(10**6, 0, "adamw", torch.float32)
    assert m.total == 16 * 10**6, f"AdamW, fp32, no activations: expected 16 bytes/param, got {m.total / 1e6}"
    assert impl.memory.max_trainable_parameters(8 * 80e9, 16) == 4 * 10**10


@given(memory=st.integers(0, 10**15), per=st.integers(1, 64))
def test_max_trainable_parameters_is_floor_division(impl, memory, per):
    got = impl.memory.max_trainable_parameters(memory, per)
    assert got == memory // per and type(got) is int, f"max_trainable_parameters({memory}, {per}) = {got!r}"


#: (memory_bytes, bytes_per_parameter, answer): 0.1 is 0.1000000000000000055...,
#: so ten 0.1-byte parameters need more than 1 byte (math.floor(1 / 0.1) says 10)
FLOAT_EXAMPLES = [(1, 0.1, 9), (1.0, 0.1, 9), (3, 0.1, 29), (6.4e11, 16, 4 * 10**10), (1.0, 0.5, 2),
                  (7.5, 2.5, 3), (0.3, 0.1, 2), (1e13, 0.01, 999999999999999),
                  (1e20, 3.0, 33333333333333333333),  # int(1e20 // 3.0) is 1365 short: a float past 2**53
                  (2**60, 3, (2**60) // 3)]


@pytest.mark.parametrize(("memory", "per", "expected"), FLOAT_EXAMPLES)
def test_max_trainable_parameters_of_float_examples(impl, memory, per, expected):
    assert exact_floor(memory, per) == expected  # the examples follow the stated rule
    got = impl.memory.max_trainable_parameters(memory, per)
    assert type(got) is int and got == expected, (
        f"max_trainable_parameters({memory!r}, {per!r}): the largest n with n * {per!r} <= {memory!r} "
        f"(exactly, as the floats are stored) is {expected}, got {got!r}"
    )


@given(memory=float_memory, per=float_per)
def test_max_trainable_parameters_of_floats_is_the_exact_floor(impl, memory, per):
    """Float arguments are taken as the exact values they hold: the answer is the
    floor of the exact quotient."""
    want = exact_floor(memory, per)
    got = impl.memory.max_trainable_parameters(memory, per)
    assert type(got) is int and got == want, (
        f"max_trainable_parameters({memory!r}, {per!r}): the largest n with n * {per!r} <= {memory!r} "
        f"(exactly) is {want}, got {got!r}"
    )


@given(memory=st.integers(2**53, 10**24), per=st.integers(1, 64))
def test_max_trainable_parameters_is_exact_for_large_memories(impl, memory, per):
    """The most parameters that fit, exactly, for any int memory: n with
    n * per <= memory < (n + 1) * per (float division rounds beyond 2^53)."""
    got = impl.memory.max_trainable_parameters(memory, per)
    assert type(got) is int and got * per <= memory < (got + 1) * per, (
        f"max_trainable_parameters({memory}, {per}) = {got!r}: the most that fit is {memory // per}"
    )


@pytest.mark.parametrize(
    ("function", "args", "error"),
    [
        ("optimizer_state_floats", ("lion", 10), ValueError),
        ("optimizer_state_floats", (3, 10), TypeError),
        ("optimizer_state_floats", ("adam", -1), ValueError),
        ("training_memory", (-5, 0, "adam"), ValueError),
        ("training_memory", (5, 0, "adam", "float32"), TypeError),
        ("training_memory", (5, 0, "nadam"), ValueError),
        ("max_trainable_parameters", (100, 0), ValueError),
        ("max_trainable_parameters", (-1, 4), ValueError),
        ("max_trainable_parameters", ("80GB", 4), TypeError),
        ("max_trainable_parameters", (True, 4), TypeError),  # a bool is not a number here (handout)
        ("optimizer_state_floats", ("adam", True), TypeError),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_rejected(impl, function, args, error):
    with pytest.raises(error):
        getattr(impl.memory, function)(*args)


@pytest.mark.parametrize(
    "args",
    [(float("inf"), 16), (8e11, float("inf")), (float("nan"), 16), (8e11, float("nan")),
     (float("-inf"), 16), (float("inf"), float("inf"))],
    ids=str,
)
def test_bad_input_not_finite(impl, args):
    """"ValueError: a negative or non-finite argument": infinities and NaN
    are refused with a ValueError (not an OverflowError from the arithmetic)."""
    with pytest.raises(ValueError):
        result = impl.memory.max_trainable_parameters(*args)
        pytest.fail(f"max_trainable_parameters{args} should raise ValueError, returned {result!r}")


def test_count_parameters_rejects_non_modules(impl):
    with pytest.raises(TypeError):
        impl.scenario(scenarios.count_parameters_of_non_module)


@given(dims=widths, bias=st.booleans(), tie=st.booleans())
def test_counts_are_python_ints(impl, dims, bias, tie):
    got = impl.scenario(scenarios.count_parameters_of, dims, bias, tie)
    assert type(got) is int, f"count_parameters should return an int, got {type(got).__name__} {got!r}"
    for name in sorted(OPTIMIZERS):
        v = impl.memory.optimizer_state_floats(name, got)
        assert type(v) is int, f"optimizer_state_floats({name!r}, {got}) should be an int, got {type(v).__name__}"

"""Handout §4: optimizers.

Oracle: ``torch.optim`` (SGD, SGD with momentum, Adagrad, RMSprop, Adam, AdamW
with default flags) driven through the same parameters, param groups and
gradients (tests/optimizer_oracle.py); and the bytes its state measurably holds.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tests import static
from tests.optimizer_oracle import (
    EXTRA_HYPERPARAMETERS,
    HYPERPARAMETERS,
    NAMES,
    TORCH,
    TORCH_DEFAULTS,
    assert_same_trajectory,
    runs,
    state_bytes_mismatches,
    torch_trajectory,
)
from tests.scenarios import optimizers as scenarios
from tests.strategies import compute_dtypes, hyperparameters, make_tensor, seeds, shapes
from tests.tolerances import assert_close, check_tensor


def _run_args(run: dict[str, Any]) -> tuple[list[torch.Tensor], scenarios.Groups, dict[str, Any], scenarios.Grads]:
    """A drawn run's params, groups, defaults and gradients, as the trajectory scenarios and the oracle take them."""
    return run["params"], run["groups"], run["defaults"], run["grads"]


# --------------------------------------------------------------------------- trajectories


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_trajectory_matches_torch(impl, name, data):
    """Several steps, param groups with their own hyperparameters, fp32 or fp64,
    some gradients None: the params after each step equal torch.optim's."""
    run = data.draw(runs(name))
    expected = torch_trajectory(name, *_run_args(run))
    got = impl.scenario(scenarios.trajectory, name, *_run_args(run))
    assert_same_trajectory(got, expected, name)


@pytest.mark.parametrize("name", NAMES)
def test_default_hyperparameters_match_torch(impl, name):
    params = [make_tensor((4, 3), torch.float32, 1), make_tensor((5,), torch.float32, 2)]
    grads = [[make_tensor(p.shape, torch.float32, 10 * k + i) for i, p in enumerate(params)] for k in range(3)]
    groups: scenarios.Groups = [([0, 1], {})]
    expected = torch_trajectory(name, params, groups, {}, grads)
    got = impl.scenario(scenarios.trajectory, name, params, groups, defaults={}, grads_per_step=grads)
    assert_same_trajectory(got, expected, f"{name}() with default hyperparameters")


@pytest.mark.parametrize("name", NAMES)
def test_learning_rate_is_read_at_every_step(impl, name):
    """A schedule sets ``param_groups[i]["lr"]`` between steps; the step must use it."""
    params = [make_tensor((3, 2), torch.float64, 3), make_tensor((4,), torch.float64, 4)]
    grads = [[make_tensor(p.shape, torch.float64, 20 + 10 * k + i) for i, p in enumerate(params)] for k in range(3)]
    groups = [([0], {"lr": 0.1}), ([1], {"lr": 0.05})]
    lrs = [[0.1, 0.05], [0.01, 0.3], [0.5, 0.0]]
    expected = torch_trajectory(name, params, groups, {}, grads, lrs)
    got = impl.scenario(scenarios.trajectory, name, params, groups, defaults={}, grads_per_step=grads, lrs=lrs)
    assert_same_trajectory(got, expected, f"{name} with learning rates {lrs}")


@pytest.mark.parametrize("name", NAMES)
def test_params_without_grad_are_left_alone(impl, name):
    """A param whose .grad is None keeps its value, its state and its step count:
    here param 1 has no gradient at step 2 (nor param 2 at steps 1 and 2)."""
    params = [make_tensor((3,), torch.float64, 5), make_tensor((2, 2), torch.float64, 6),
              make_tensor((4,), torch.float64, 7)]
    g = lambda i, k: make_tensor(params[i].shape, torch.float64, 100 + 10 * k + i)
    grads: scenarios.Grads = [[g(0, 0), g(1, 0), None], [g(0, 1), None, None], [g(0, 2), g(1, 2), g(2, 2)]]
    hp = {"weight_decay": 0.1, "lr": 0.1}
    expected = torch_trajectory(name, params, [([0, 1, 2], hp)], {}, grads)
    got = impl.scenario(scenarios.trajectory, name, params, groups=[([0, 1, 2], hp)], defaults={},
                        grads_per_step=grads)
    for k, i in ((0, 2), (1, 1), (1, 2)):
        before = params[i] if k == 0 else got[k - 1][i]
        check_tensor(got[k][i], dtype=torch.float64, shape=tuple(params[i].shape), what=f"param {i}")
        assert torch.equal(got[k][i], before), (
            f"{name}: param {i} has no gradient at step {k + 1} and must not change; "
            f"it was {before}, it became {got[k][i]}"
        )
    assert_same_trajectory(got, expected, f"{name} with gradients missing")


def test_momentum_buffer_starts_at_the_first_gradient(impl):
    """torch sets the buffer to the first gradient, undamped; a buffer started
    at zero and then updated holds (1 - dampening) * g instead."""
    params = [make_tensor((4, 2), torch.float64, 11)]
    grads = [[make_tensor((4, 2), torch.float64, 12 + k)] for k in range(2)]
    groups = [([0], {"lr": 0.1, "momentum": 0.9, "dampening": 0.5})]
    expected = torch_trajectory("SGDMomentum", params, groups, {}, grads)
    got = impl.scenario(scenarios.trajectory, "SGDMomentum", params, groups, defaults={}, grads_per_step=grads)
    assert_same_trajectory(got, expected, "SGDMomentum(momentum=0.9, dampening=0.5)")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10)
@given(data=st.data())
def test_large_parameters_match_torch(impl, name, data):
    """Parameters of hundreds to a hundred thousand elements (as real layers
    have; a group of several such is larger than any cache-sized chunk an
    implementation may process at a time): the trajectory still equals torch.optim's."""
    seed = data.draw(seeds, label="seed")
    size = st.one_of(st.integers(300, 4096), st.integers(40_000, 150_000))
    sizes = data.draw(st.lists(size, min_size=1, max_size=3), label="sizes")
    dtype = data.draw(compute_dtypes, label="dtype")
    params = [make_tensor((n,), dtype, seed + i).reshape(-1, 4) if n % 4 == 0 else make_tensor((n,), dtype, seed + i)
              for i, n in enumerate(sizes)]
    grads = [[make_tensor(tuple(p.shape), dtype, seed + 10 * (k + 1) + i) for i, p in enumerate(params)]
             for k in range(data.draw(st.integers(1, 3), label="steps"))]
    hp = data.draw(hyperparameters(**EXTRA_HYPERPARAMETERS).map(
        lambda d: {k: d[k] for k in HYPERPARAMETERS[name]}))
    groups: scenarios.Groups = [(list(range(len(params))), {})]
    expected = torch_trajectory(name, params, groups, hp, grads)
    got = impl.scenario(scenarios.trajectory, name, params, groups, hp, grads)
    assert_same_trajectory(got, expected, f"{name} with parameters of {sizes} elements")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25)
@given(data=st.data())
def test_trajectory_with_gradients_written_in_place_matches_torch(impl, name, data):
    """Training loops reuse each ``.grad`` tensor (``zero_grad(set_to_none=False)``
    then ``backward()`` write into it): the state must not alias the gradient,
    so rewriting ``p.grad`` in place between steps leaves the run equal to
    torch.optim's. No weight decay, so the update reads ``p.grad`` itself."""
    run = data.draw(runs(name, min_steps=2, none_grads=False, weight_decay=st.just(0.0)))
    expected = torch_trajectory(name, *_run_args(run), in_place=True)
    got = impl.scenario(scenarios.trajectory, name, *_run_args(run), in_place=True)
    assert_same_trajectory(got, expected, name + " (gradients written into the same .grad tensors)")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10)
@given(data=st.data())
def test_optimizer_built_from_a_generator_of_params(impl, name, data):
    """``Opt(model.parameters())`` passes a generator, which can be read only
    once: the optimizer still holds every param and steps like torch.optim."""
    run = data.draw(runs(name, max_groups=1, none_grads=False))
    one_group: scenarios.Groups = [(list(range(len(run["params"]))), {})]
    expected = torch_trajectory(name, run["params"], one_group, run["defaults"], run["grads"])
    got = impl.scenario(scenarios.trajectory_from_a_generator, name, run["params"], run["defaults"], run["grads"])
    assert_same_trajectory(got, expected, name + " (built from a generator of params)")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25)  # x 6 optimizers: keeps the grade run within the problem's time limit
@given(data=st.data())
def test_step_leaves_the_gradients_unchanged(impl, name, data):
    """``step()`` reads ``p.grad`` and never writes it: weight decay and the
    other terms go into a new tensor, so ``p.grad`` read back after the step is
    the gradient that was set (as with torch.optim)."""
    run = data.draw(runs(name))
    # weight decay is where gradients get edited in place (grad.add_(p, alpha=wd))
    run["defaults"] = {**run["defaults"], "weight_decay": data.draw(st.sampled_from([0.01, 0.1]), label="wd")}
    got = impl.scenario(scenarios.grads_after_steps, name, *_run_args(run))
    assert isinstance(got, list) and len(got) == len(run["grads"]), f"{name}: expected one entry per step"
    for k, (got_step, given_step) in enumerate(zip(got, run["grads"], strict=True)):
        for i, (g, e) in enumerate(zip(got_step, given_step, strict=True)):
            if e is None:
                assert g is None, f"{name}: param {i} had no gradient at step {k + 1}, it has one after the step"
                continue
            check_tensor(g, dtype=e.dtype, shape=tuple(e.shape), what=f"{name}: p.grad of param {i}")
            assert torch.equal(g, e), (
                f"{name}: p.grad of param {i} changed during step {k + 1} (max change {(g - e).abs().max():.3g}): "
                "step() must not modify the gradients in place"
            )


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20)
@given(data=st.data())
def test_step_with_a_closure_returns_its_loss(impl, name, data):
    """``step(closure)`` calls the closure (with gradients enabled), steps with
    the gradients it computed and returns the closure's loss, as torch.optim does."""
    seed, steps = data.draw(seeds, label="seed"), data.draw(st.integers(1, 3), label="steps")
    param_shapes = data.draw(st.lists(shapes(min_dims=1, max_dims=2, max_side=4), min_size=1, max_size=2))
    params = [make_tensor(s, torch.float64, seed + i) for i, s in enumerate(param_shapes)]
    targets = [make_tensor(s, torch.float64, seed + 100 + i) for i, s in enumerate(param_shapes)]
    hp = data.draw(hyperparameters(**EXTRA_HYPERPARAMETERS).map(
        lambda d: {k: d[k] for k in HYPERPARAMETERS[name] if k in ("lr", "weight_decay")}))
    got = impl.scenario(scenarios.steps_with_closure, name, params, targets, hp, steps)

    ps = [nn.Parameter(p.clone()) for p in params]
    opt = TORCH[name](ps, **{**TORCH_DEFAULTS.get(name, {}), **hp})
    closure = scenarios.quadratic_closure(opt, ps, targets)
    for k in range(steps):
        expected = opt.step(closure)
        value = got["returned"][k]
        assert isinstance(value, torch.Tensor), (
            f"{name}.step(closure) should return the closure's loss, got {type(value).__name__} {value!r:.80}"
        )
        assert_close(value, expected.detach(), what=f"{name}.step(closure) return value at step {k + 1}")
        for i, p in enumerate(ps):
            assert_close(got["params"][k][i], p.detach(), scale=k + 1,
                         what=f"{name}: param {i} after step(closure) {k + 1}")


# --------------------------------------------------------------------------- state


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_state_dict_resumes_the_run(impl, name, data):
    """state_dict() after some steps, saved and loaded into a fresh optimizer
    (constructed without hyperparameters), continues exactly as the
    uninterrupted run, which matches torch.optim."""
    run = data.draw(runs(name, min_steps=2, max_steps=5, schedule=True))
    split = data.draw(st.integers(1, len(run["grads"]) - 1), label="split")
    resumed = impl.scenario(scenarios.resumed_trajectory, name, *_run_args(run), split, run["lrs"])
    straight = impl.scenario(scenarios.trajectory, name, *_run_args(run), run["lrs"])
    expected = torch_trajectory(name, *_run_args(run), run["lrs"])
    assert_same_trajectory(straight, expected, name)
    assert_same_trajectory(resumed, straight, f"{name} resumed from a state_dict saved after step {split}",
                           exact=True)


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_after_two_steps_resumes_exactly(impl, name):
    """A checkpoint taken after step 2 of 4 (no gradient for param 1 at step 1):
    the resumed run ends where torch.optim's uninterrupted run does."""
    params = [make_tensor((3, 3), torch.float64, 13), make_tensor((5,), torch.float64, 14)]
    grads = [[make_tensor(p.shape, torch.float64, 50 + 10 * k + i) if (k, i) != (0, 1) else None
              for i, p in enumerate(params)] for k in range(4)]
    groups = [([0], {"lr": 0.05}), ([1], {"lr": 0.01, "weight_decay": 0.1})]
    expected = torch_trajectory(name, params, groups, {}, grads)
    got = impl.scenario(scenarios.resumed_trajectory, name, params, groups, defaults={}, grads_per_step=grads, split=2)
    assert_same_trajectory(got, expected, f"{name} resumed from a state_dict saved after step 2")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_match_torch(impl, name, dtype):
    """The per-parameter state in ``optimizer.state[p]`` holds the bytes
    torch.optim's does (handout §1.3: 0, 1 or 2 tensors like ``p``, in its
    dtype), for every float dtype a param may have."""
    params = [make_tensor(s, dtype, 30 + i) for i, s in enumerate([(3, 4), (5,), (2, 3, 2)])]
    grads = [[make_tensor(p.shape, dtype, 40 + 10 * k + i) for i, p in enumerate(params)] for k in range(2)]
    groups: scenarios.Groups = [([0, 1, 2], {})]
    got = impl.scenario(scenarios.state_after, name, params, groups, defaults={}, grads_per_step=grads)
    problems = state_bytes_mismatches(name, params, groups, grads, got)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- no delegation


@pytest.mark.parametrize("name", NAMES)
def test_does_not_delegate_to_torch_optim(impl, name):
    """The optimizers imitate torch.optim; they may not be it (nor call it).

    Read from the source (tests/static.py): no torch.optim optimizer class, its
    update functions or fused kernels, no access to torch.optim by name."""
    facts = static.delegation_facts(impl, "optimizers")
    assert "optimizers" in facts.modules, "optimizers.py was not found in the implementation's package"
    assert facts.subclasses_optimizer(name), (
        f"{name} must be a class defined in optimizers.py (or a module it imports) that subclasses "
        f"torch.optim.Optimizer; its bases read from the source: {facts.bases.get(name, 'no class found')}"
    )
    assert not facts.uses, (
        f"{name}: the source uses torch.optim beyond its base class, so the update rule is not your own: "
        + "; ".join(facts.uses[:5]) + " (write the update rule with tensor operations; subclass "
        "torch.optim.Optimizer only, and import it plainly)"
    )
    params = [make_tensor((3, 2), torch.float32, 8)]
    grads = [[make_tensor((3, 2), torch.float32, 9 + k)] for k in range(2)]
    groups = [([0], {"lr": 0.1})]
    got = impl.scenario(scenarios.trajectory, name, params, groups, defaults={}, grads_per_step=grads)
    assert_same_trajectory(got, torch_trajectory(name, params, groups, {}, grads), name)


# --------------------------------------------------------------------------- bad input

BAD_HYPERPARAMETERS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("SGD", {"lr": -0.1}, ValueError, "lr"),
    ("SGD", {"lr": "fast"}, TypeError, "lr"),
    ("SGD", {"weight_decay": -1e-2}, ValueError, "weight_decay"),
    ("SGDMomentum", {"momentum": -0.9}, ValueError, "momentum"),
    ("SGDMomentum", {"momentum": 1.5}, ValueError, "momentum"),
    ("SGDMomentum", {"dampening": 2.0}, ValueError, "dampening"),
    ("SGDMomentum", {"momentum": 0.0}, ValueError, "momentum"),
    ("SGDMomentum", {"momentum": 1.0}, ValueError, "momentum"),
    ("SGDMomentum", {"dampening": -0.5}, ValueError, "dampening"),
    ("AdaGrad", {"eps": 0.0}, ValueError, "eps"),
    ("AdaGrad", {"lr_decay": -0.5}, ValueError, "lr_decay"),
    ("AdaGrad", {"initial_accumulator_value": -1.0}, ValueError, "initial_accumulator_value"),
    ("RMSProp", {"alpha": 1.0}, ValueError, "alpha"),
    ("RMSProp", {"eps": -1e-8}, ValueError, "eps"),
    ("Adam", {"betas": (0.9, 1.0)}, ValueError, "betas"),
    ("Adam", {"betas": (-0.1, 0.999)}, ValueError, "betas"),
    ("Adam", {"lr": -1e-3}, ValueError, "lr"),
    ("AdamW", {"eps": 0.0}, ValueError, "eps"),
    ("AdamW", {"betas": (0.9, 0.999, 0.5)}, ValueError, "betas"),
    ("Adam", {"betas": 0.9}, TypeError, "betas"),
    ("AdamW", {"weight_decay": -0.1}, ValueError, "weight_decay"),
    ("AdamW", {"lr": None}, TypeError, "lr"),
    ("Adam", {"lr": torch.tensor(1e-3)}, TypeError, "lr"),  # a tensor is not a Python number (docstring)
    ("SGD", {"lr": True}, TypeError, "lr"),  # nor is a bool (handout)
    ("RMSProp", {"alpha": torch.tensor(0.9)}, TypeError, "alpha"),
]


@pytest.mark.parametrize(("name", "hp", "error", "argument"), BAD_HYPERPARAMETERS,
                         ids=[f"{n}-{a}={h[a]!r}" for n, h, _, a in BAD_HYPERPARAMETERS])
def test_bad_hyperparameters_are_rejected(impl, name, hp, error, argument):
    with pytest.raises(error, match=argument):
        impl.scenario(scenarios.construct, name, hp)


@pytest.mark.parametrize(("name", "hp", "error", "argument"), BAD_HYPERPARAMETERS[::3],
                         ids=[f"{n}-{a}={h[a]!r}" for n, h, _, a in BAD_HYPERPARAMETERS[::3]])
def test_bad_group_hyperparameters_are_rejected(impl, name, hp, error, argument):
    """A param group's own hyperparameters are checked like the constructor's."""
    with pytest.raises(error, match=argument):
        impl.scenario(scenarios.construct, name, defaults={}, group_overrides=hp)


#: per hyperparameter, values outside the range the docstring states (ValueError)
OUT_OF_RANGE: dict[str, tuple[Any, ...]] = {
    "lr": (-1e-3,),
    "weight_decay": (-1e-4,),
    "eps": (0.0, -1e-8),
    "betas": ((1.0, 0.999), (0.9, -0.1)),
    "alpha": (1.0, -0.1),
    "momentum": (0.0, 1.0, -0.5),
    "dampening": (-0.1, 1.1),
    "lr_decay": (-1e-3,),
    "initial_accumulator_value": (-0.1,),
}


EVERY_BAD_VALUE = [(name, hp, v) for name in NAMES for hp in HYPERPARAMETERS[name] for v in OUT_OF_RANGE[hp]]


@pytest.mark.parametrize(("name", "hp", "value"), EVERY_BAD_VALUE,
                         ids=[f"{n}-{h}={v!r}" for n, h, v in EVERY_BAD_VALUE])
def test_bad_values_of_every_optimizers_hyperparameters_are_rejected(impl, name, hp, value):
    """Every optimizer checks every hyperparameter it takes against the ranges
    the docstring states (lr < 0, weight_decay < 0, eps <= 0, betas / alpha
    outside [0, 1), momentum outside (0, 1), dampening outside [0, 1],
    lr_decay < 0, initial_accumulator_value < 0): a ValueError naming it, from
    the constructor and from a param group."""
    with pytest.raises(ValueError, match=hp):
        impl.scenario(scenarios.construct, name, defaults={hp: value})
        pytest.fail(f"{name}({hp}={value!r}) should raise ValueError naming {hp}")
    if hp != "initial_accumulator_value":  # read from the constructor only, as torch.optim.Adagrad does
        with pytest.raises(ValueError, match=hp):
            impl.scenario(scenarios.construct, name, defaults={}, group_overrides={hp: value})
            pytest.fail(f"{name} with a param group's {hp}={value!r} should raise ValueError naming {hp}")


#: hyperparameters at the closed ends of their stated ranges: valid, so accepted
EDGE_HYPERPARAMETERS: list[tuple[str, dict[str, Any]]] = [
    *[(name, {"lr": 0.0, "weight_decay": 0.0}) for name in NAMES],  # every optimizer takes lr = 0
    ("SGDMomentum", {"dampening": 1.0}),
    ("SGDMomentum", {"dampening": 0.0, "momentum": 0.999}),
    ("AdaGrad", {"lr_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-30}),
    ("RMSProp", {"alpha": 0.0}),
    ("Adam", {"betas": (0.0, 0.0)}),
    ("AdamW", {"betas": [0.0, 0.5], "weight_decay": 0.0}),
]


@pytest.mark.parametrize(("name", "hp"), EDGE_HYPERPARAMETERS,
                         ids=[f"{n}-{','.join(f'{k}={v!r}' for k, v in h.items())}" for n, h in EDGE_HYPERPARAMETERS])
def test_hyperparameters_at_the_ends_of_their_ranges_are_accepted(impl, name, hp):
    """The ranges are those the docstrings state: dampening in [0, 1] takes 1,
    decay rates in [0, 1) take 0, lr and weight decay take 0; an optimizer
    built with them, as its defaults or as a group's own, raises nothing."""
    impl.scenario(scenarios.construct, name, hp)
    impl.scenario(scenarios.construct, name, defaults={}, group_overrides=hp)

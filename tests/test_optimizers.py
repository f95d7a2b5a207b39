"""Handout §4: optimizers.

Oracle: ``torch.optim`` (SGD, SGD with momentum, Adagrad, RMSprop, Adam, AdamW
with default flags) driven through the same parameters, param groups and
gradients, in the test itself; and the bytes its state measurably holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tests import static
from tests.scenarios import optimizers as scenarios
from tests.strategies import (
    HYPERPARAMETER_VALUES,
    compute_dtypes,
    hyperparameters,
    make_tensor,
    make_tensors,
    seeds,
    shapes,
)
from tests.tolerances import assert_close, assert_close_to_exact, check_tensor, eps, oracle_error

NAMES = ("SGD", "SGDMomentum", "AdaGrad", "RMSProp", "Adam", "AdamW")

#: the torch.optim class each optimizer must agree with
TORCH: dict[str, type[torch.optim.Optimizer]] = {
    "SGD": torch.optim.SGD,
    "SGDMomentum": torch.optim.SGD,
    "AdaGrad": torch.optim.Adagrad,
    "RMSProp": torch.optim.RMSprop,
    "Adam": torch.optim.Adam,
    "AdamW": torch.optim.AdamW,
}
#: constructor defaults that differ from the torch.optim class's own
TORCH_DEFAULTS: dict[str, dict[str, Any]] = {"SGDMomentum": {"momentum": 0.9}}

#: the hyperparameters each optimizer takes (names as in torch.optim)
HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "SGD": ("lr", "weight_decay"),
    "SGDMomentum": ("lr", "momentum", "dampening", "weight_decay"),
    "AdaGrad": ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"),
    "RMSProp": ("lr", "alpha", "eps", "weight_decay"),
    "Adam": ("lr", "betas", "eps", "weight_decay"),
    "AdamW": ("lr", "betas", "eps", "weight_decay"),
}

#: Per optimizer, the subsets of its hyperparameters a constructor may set, and
#: a param group (torch.optim.Adagrad reads initial_accumulator_value from its
#: constructor only, never from a group: groups do not override it here).
_SUBSETS = {name: (st.frozensets(st.sampled_from(keys)),
                   st.frozensets(st.sampled_from([k for k in keys if k != "initial_accumulator_value"])))
            for name, keys in HYPERPARAMETERS.items()}

_EXTRA_HYPERPARAMETERS = {
    # SGDMomentum takes momentum in (0, 1): with 0 torch.optim.SGD keeps no buffer at all.
    "momentum": st.sampled_from([0.5, 0.9]),
    "dampening": st.sampled_from([0.0, 0.1, 0.5]),
    "lr_decay": st.sampled_from([0.0, 0.01, 0.5]),
    "initial_accumulator_value": st.sampled_from([0.0, 0.1, 1.0]),
}


# --------------------------------------------------------------------------- runs


@st.composite
def runs(
    draw: st.DrawFn,
    name: str,
    *,
    max_params: int = 3,
    max_groups: int = 3,
    min_steps: int = 1,
    max_steps: int = 4,
    max_side: int = 5,
    dtypes: st.SearchStrategy[torch.dtype] = compute_dtypes,
    none_grads: bool = True,
    schedule: bool = False,
    **overrides: st.SearchStrategy[Any],
) -> dict[str, Any]:
    """A run of optimizer ``name``: initial ``params``, ``groups`` (param indices
    and the hyperparameters each group overrides), constructor ``defaults``, the
    gradients of each step (some None when ``none_grads``), and with
    ``schedule`` a learning rate per step and group (``lrs``)."""
    values = {**HYPERPARAMETER_VALUES, **_EXTRA_HYPERPARAMETERS, **overrides}
    subset, group_subset = _SUBSETS[name]

    def some_hyperparameters(chosen: st.SearchStrategy[frozenset[str]]) -> dict[str, Any]:
        # Which hyperparameters are set is drawn first, then only their values
        # (from strategies built once): a run costs a few dozen draws, not hundreds.
        return {k: draw(values[k]) for k in sorted(draw(chosen))}

    dtype = draw(dtypes)
    seed = draw(seeds)
    n = draw(st.integers(1, max_params))
    param_shapes = [draw(shapes(max_dims=3, max_side=max_side)) for _ in range(n)]

    n_groups = draw(st.integers(1, min(n, max_groups)))
    owner = list(range(n_groups)) + [draw(st.integers(0, n_groups - 1)) for _ in range(n - n_groups)]
    groups = [([i for i in range(n) if owner[i] == g], some_hyperparameters(group_subset)) for g in range(n_groups)]
    defaults = some_hyperparameters(subset)

    steps = draw(st.integers(min_steps, max_steps))
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0]))
    # The initial params, then every step's gradients, from one generator.
    values_ = make_tensors(param_shapes * (1 + steps), dtype, seed)
    params, grads = values_[:n], []
    for k in range(steps):
        # One draw per step: two bits per param, a gradient unless both are 0 (3 in 4).
        mask = draw(st.integers(0, 4**n - 1)) if none_grads else 4**n - 1
        grads.append([values_[n * (k + 1) + i] * scale if (mask >> 2 * i) & 3 else None for i in range(n)])
    lrs = None
    if schedule:
        table = (1e-3, 1e-2, 0.1, 0.3)
        # One draw per step: two bits per group pick its learning rate.
        codes = [draw(st.integers(0, 4**n_groups - 1)) for _ in range(steps)]
        lrs = [[table[(code >> 2 * g) & 3] for g in range(n_groups)] for code in codes]
    return {"params": params, "groups": groups, "defaults": defaults, "grads": grads, "lrs": lrs}


@dataclass(frozen=True)
class Expected:
    """What a run must produce, per step and param: the float64 ``exact`` values
    of torch.optim on the same inputs, the distance of torch.optim's own runs in
    the tested ``dtype`` from them (``error``), and the sizes of the values
    involved (``magnitude``: |param| and |update| summed over the steps so far).
    See tests/tolerances.py for the acceptance rule built on them."""

    dtype: torch.dtype
    exact: list[list[torch.Tensor]]
    error: list[list[torch.Tensor]]
    magnitude: list[list[torch.Tensor]]

    def __len__(self) -> int:
        return len(self.exact)


def _torch_run(
    name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
    defaults: dict[str, Any], grads: list[list[torch.Tensor | None]], lrs: list[list[float]] | None,
    dtype: torch.dtype, foreach: bool, in_place: bool = False, jitter: float = 0.0, seed: int = 0,
) -> list[list[torch.Tensor]]:
    """torch.optim's run in ``dtype``; with ``jitter``, every param, gradient and
    state tensor is multiplied by 1 +- ``jitter`` (a random sign per element,
    from ``seed``) at every step, as if each had been rounded once more, and
    the decay rates (betas, alpha, momentum) by 1 +- one float64 epsilon, as if
    the per-step scalars built from them (``1 - beta2**t``: a cancellation
    early in a run) had been computed another way in Python floats."""
    ps = [nn.Parameter(p.to(dtype, copy=True)) for p in params]
    opt = TORCH[name](
        [{"params": [ps[i] for i in idx], **hp} for idx, hp in groups],
        **{**TORCH_DEFAULTS.get(name, {}), **defaults, "foreach": foreach},
    )
    cast = [[None if g is None else g.to(dtype) for g in step] for step in grads]
    if not jitter:
        return scenarios.run_steps(opt, ps, cast, lrs, in_place=in_place)
    gen = torch.Generator().manual_seed(seed)

    def wiggle(t: torch.Tensor) -> None:
        t.mul_(1 + jitter * (2 * torch.randint(0, 2, t.shape, generator=gen, dtype=t.dtype) - 1))

    def nudge(rate: float) -> float:
        return rate * (1 + eps(torch.float64) * (2 * int(torch.randint(0, 2, (), generator=gen)) - 1))

    for group in opt.param_groups:
        if "betas" in group:
            group["betas"] = tuple(nudge(b) for b in group["betas"])
        for key in ("alpha", "momentum"):
            if key in group:
                group[key] = nudge(group[key])

    out = []
    for k, step in enumerate(cast):
        if lrs is not None:
            for group, lr in zip(opt.param_groups, lrs[k], strict=True):
                group["lr"] = lr
        with torch.no_grad():
            for p, g in zip(ps, step, strict=True):
                p.grad = None if g is None else g.clone()
                if g is not None:
                    wiggle(p)
                    wiggle(p.grad)
        opt.step()
        with torch.no_grad():
            for p in ps:
                for key, value in opt.state[p].items():
                    if key != "step" and isinstance(value, torch.Tensor) and value.shape == p.shape:
                        wiggle(value)
        out.append([p.detach().clone() for p in ps])
    return out


#: Random-sign relative perturbations of JITTER_EPS machine epsilons of the
#: tested dtype, one pass per seed: how much this run amplifies rounding (see
#: torch_trajectory).
JITTER_SEEDS = (0, 1)
JITTER_EPS = 1.0


def torch_trajectory(
    name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
    defaults: dict[str, Any], grads: list[list[torch.Tensor | None]], lrs: list[list[float]] | None = None,
    in_place: bool = False,
) -> Expected:
    """The oracle: the same run with torch.optim (default flags), in float64,
    and two measures of how much rounding moves this run on these inputs: the
    run in the params' dtype with both of torch's code paths (float32 for a
    float64 run), and float64 runs in which every param, gradient and state
    element is perturbed by one machine epsilon of the params' dtype at every
    step (random signs). The perturbed runs follow the run's own conditioning:
    where a step amplifies rounding (a decayed gradient that nearly cancels,
    then divided by sqrt(v) = |g| with beta2 = 0), they move as far as any
    correct formulation's roundings can, whether or not torch.optim's own run
    happened to round luckily there (``in_place``: gradients written into one
    ``.grad`` per param, see ``scenarios.run_steps``)."""
    dtype = params[0].dtype
    probe = torch.float32 if dtype == torch.float64 else dtype
    exact = _torch_run(name, params, groups, defaults, grads, lrs, torch.float64, foreach=False, in_place=in_place)
    runs = [_torch_run(name, params, groups, defaults, grads, lrs, probe, foreach=f, in_place=in_place)
            for f in (False, True)]
    jittered = [_torch_run(name, params, groups, defaults, grads, lrs, torch.float64, foreach=False,
                           jitter=JITTER_EPS * eps(dtype), seed=seed) for seed in JITTER_SEEDS]
    error = [[torch.maximum(oracle_error(e, [r[k][i] for r in runs], dtype),
                            oracle_error(e, [j[k][i] for j in jittered], torch.float64))
              for i, e in enumerate(step)]
             for k, step in enumerate(exact)]
    magnitude, total = [], [p.double().abs() for p in params]
    before = [p.double() for p in params]
    for step in exact:
        total = [t + e.abs() + (e - b).abs() for t, e, b in zip(total, step, before, strict=True)]
        magnitude.append(total)
        before = step
    return Expected(dtype, exact, error, magnitude)


def assert_same_trajectory(got: Any, expected: Expected | list[list[torch.Tensor]], name: str,
                           exact: bool = False) -> None:
    """``got`` (the params after each step) equals ``expected``: bit for bit when
    ``exact`` (``expected`` then being another run of the implementation), else
    within rounding of torch.optim's float64 run (tests/tolerances.py)."""
    assert isinstance(got, list) and len(got) == len(expected), (
        f"{name}: expected the params after each of {len(expected)} steps, got {type(got).__name__} "
        f"of length {len(got) if isinstance(got, list) else '?'}"
    )
    if isinstance(expected, Expected):
        for k, got_step in enumerate(got):
            assert isinstance(got_step, list) and len(got_step) == len(expected.exact[k]), (
                f"{name}: after step {k + 1} expected {len(expected.exact[k])} params, got {got_step!r:.200}"
            )
            for i, g in enumerate(got_step):
                e = expected.exact[k][i]
                assert_close_to_exact(
                    g, e, dtype=expected.dtype, error=expected.error[k][i], magnitude=expected.magnitude[k][i],
                    what=f"{name}: param {i} {tuple(e.shape)} {expected.dtype} after step {k + 1}",
                )
        return
    for k, (got_step, exp_step) in enumerate(zip(got, expected, strict=True)):
        for i, (g, e) in enumerate(zip(got_step, exp_step, strict=True)):
            what = f"{name}: param {i} {tuple(e.shape)} {e.dtype} after step {k + 1}"
            check_tensor(g, dtype=e.dtype, shape=tuple(e.shape), what=what)
            assert exact and torch.equal(g, e), f"{what} differs: expected {e}, got {g}"


def _run_args(run: dict[str, Any]) -> tuple[Any, ...]:
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
    groups = [([0, 1], {})]
    expected = torch_trajectory(name, params, groups, {}, grads)
    got = impl.scenario(scenarios.trajectory, name, params, groups, {}, grads)
    assert_same_trajectory(got, expected, f"{name}() with default hyperparameters")


@pytest.mark.parametrize("name", NAMES)
def test_learning_rate_is_read_at_every_step(impl, name):
    """A schedule sets ``param_groups[i]["lr"]`` between steps; the step must use it."""
    params = [make_tensor((3, 2), torch.float64, 3), make_tensor((4,), torch.float64, 4)]
    grads = [[make_tensor(p.shape, torch.float64, 20 + 10 * k + i) for i, p in enumerate(params)] for k in range(3)]
    groups = [([0], {"lr": 0.1}), ([1], {"lr": 0.05})]
    lrs = [[0.1, 0.05], [0.01, 0.3], [0.5, 0.0]]
    expected = torch_trajectory(name, params, groups, {}, grads, lrs)
    got = impl.scenario(scenarios.trajectory, name, params, groups, {}, grads, lrs)
    assert_same_trajectory(got, expected, f"{name} with learning rates {lrs}")


@pytest.mark.parametrize("name", NAMES)
def test_params_without_grad_are_left_alone(impl, name):
    """A param whose .grad is None keeps its value, its state and its step count:
    here param 1 has no gradient at step 2 (nor param 2 at steps 1 and 2)."""
    params = [make_tensor((3,), torch.float64, 5), make_tensor((2, 2), torch.float64, 6),
              make_tensor((4,), torch.float64, 7)]
    g = lambda i, k: make_tensor(params[i].shape, torch.float64, 100 + 10 * k + i)
    grads = [[g(0, 0), g(1, 0), None], [g(0, 1), None, None], [g(0, 2), g(1, 2), g(2, 2)]]
    hp = {"weight_decay": 0.1, "lr": 0.1}
    expected = torch_trajectory(name, params, [([0, 1, 2], hp)], {}, grads)
    got = impl.scenario(scenarios.trajectory, name, params, [([0, 1, 2], hp)], {}, grads)
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
    got = impl.scenario(scenarios.trajectory, "SGDMomentum", params, groups, {}, grads)
    assert_same_trajectory(got, expected, "SGDMomentum(momentum=0.9, dampening=0.5)")


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
    got = impl.scenario(scenarios.resumed_trajectory, name, params, groups, {}, grads, 2)
    assert_same_trajectory(got, expected, f"{name} resumed from a state_dict saved after step 2")


def _torch_state(name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
                 grads: list[list[torch.Tensor]]) -> list[dict[str, Any]]:
    ps = [nn.Parameter(p.clone()) for p in params]
    opt = TORCH[name]([{"params": [ps[i] for i in idx], **hp} for idx, hp in groups], **TORCH_DEFAULTS.get(name, {}))
    for step_grads in grads:
        for p, g in zip(ps, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return [dict(opt.state[p]) for p in ps]


def state_bytes_mismatches(name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
                           grads: list[list[torch.Tensor]], got: Any) -> list[str]:
    """How the state the implementation reported (``scenarios.state_after``)
    differs from torch.optim's after the same run: bytes of tensors shaped like
    each param, and their dtype (the param's)."""
    torch_states = _torch_state(name, params, groups, grads)
    if not isinstance(got, list) or len(got) != len(params):
        return [f"{name}: expected the state of {len(params)} params, got {got!r:.200}"]
    problems = []
    for p, state, theirs in zip(params, got, torch_states, strict=True):
        expected = sum(v.numel() * v.element_size() for v in theirs.values()
                       if isinstance(v, torch.Tensor) and v.shape == p.shape)
        like_p = {k: v for k, v in state.items() if isinstance(v, dict) and tuple(v["shape"]) == tuple(p.shape)}
        nbytes = sum(v["bytes"] for v in like_p.values())
        if nbytes != expected:
            problems.append(
                f"{name}: state[p] of a {tuple(p.shape)} {p.dtype} param should hold {expected} bytes of "
                f"tensors shaped like p (as torch.optim's), got {nbytes}: {state}"
            )
        wrong = {k: v["dtype"] for k, v in like_p.items() if v["dtype"] != p.dtype}
        if wrong:
            problems.append(f"{name}: state should be kept in the param's dtype {p.dtype}, got {wrong}")
    return problems


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_match_torch(impl, name, dtype):
    """The per-parameter state in ``optimizer.state[p]`` holds the bytes
    torch.optim's does (handout §1.3: 0, 1 or 2 tensors like ``p``, in its
    dtype), for every float dtype a param may have."""
    params = [make_tensor(s, dtype, 30 + i) for i, s in enumerate([(3, 4), (5,), (2, 3, 2)])]
    grads = [[make_tensor(p.shape, dtype, 40 + 10 * k + i) for i, p in enumerate(params)] for k in range(2)]
    groups = [([0, 1, 2], {})]
    got = impl.scenario(scenarios.state_after, name, params, groups, {}, grads)
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
    got = impl.scenario(scenarios.trajectory, name, params, groups, {}, grads)
    assert_same_trajectory(got, torch_trajectory(name, params, groups, {}, grads), name)


# --------------------------------------------------------------------------- bad input

BAD_HYPERPARAMETERS = [
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
        impl.scenario(scenarios.construct, name, {}, hp)


#: hyperparameters at the closed ends of their stated ranges: valid, so accepted
EDGE_HYPERPARAMETERS = [
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
    impl.scenario(scenarios.construct, name, {}, hp)


# --------------------------------------------------------------------------- more inputs (issue 16)


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
    hp = data.draw(hyperparameters(**_EXTRA_HYPERPARAMETERS).map(
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
    hp = data.draw(hyperparameters(**_EXTRA_HYPERPARAMETERS).map(
        lambda d: {k: d[k] for k in HYPERPARAMETERS[name]}))
    groups = [(list(range(len(params))), {})]
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
    args = (*_run_args(run), None)
    expected = torch_trajectory(name, *args, in_place=True)
    got = impl.scenario(scenarios.trajectory, name, *args, True)
    assert_same_trajectory(got, expected, name + " (gradients written into the same .grad tensors)")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10)
@given(data=st.data())
def test_optimizer_built_from_a_generator_of_params(impl, name, data):
    """``Opt(model.parameters())`` passes a generator, which can be read only
    once: the optimizer still holds every param and steps like torch.optim."""
    run = data.draw(runs(name, max_groups=1, none_grads=False))
    one_group = [(list(range(len(run["params"]))), {})]
    expected = torch_trajectory(name, run["params"], one_group, run["defaults"], run["grads"])
    got = impl.scenario(scenarios.trajectory_from_a_generator, name, run["params"], run["defaults"], run["grads"])
    assert_same_trajectory(got, expected, name + " (built from a generator of params)")


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
        impl.scenario(scenarios.construct, name, {hp: value})
        pytest.fail(f"{name}({hp}={value!r}) should raise ValueError naming {hp}")
    if hp != "initial_accumulator_value":  # read from the constructor only, as torch.optim.Adagrad does
        with pytest.raises(ValueError, match=hp):
            impl.scenario(scenarios.construct, name, {}, {hp: value})
            pytest.fail(f"{name} with a param group's {hp}={value!r} should raise ValueError naming {hp}")

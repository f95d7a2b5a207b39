"""The oracle of the optimizer checks (handout §4): the runs they draw and what
``torch.optim`` (SGD, SGD with momentum, Adagrad, RMSprop, Adam, AdamW with
default flags) does on them, driven through the same parameters, param groups
and gradients, with how far rounding alone moves each run.

Then the comparisons of what the implementation's scenarios report against
it (:func:`assert_same_trajectory`, :func:`state_bytes_mismatches`).

Trusted side only: imported by tests/test_optimizers.py and the grader's hidden
checks, never by a scenario (scenarios run in the submission's worker, which
does not have this file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

from tests.scenarios import optimizers as scenarios
from tests.strategies import HYPERPARAMETER_VALUES, compute_dtypes, make_tensors, seeds, shapes
from tests.tolerances import assert_close_to_exact, check_tensor, eps, oracle_error

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

#: the strategies a run adds to (or uses instead of) tests/strategies.py's HYPERPARAMETER_VALUES
EXTRA_HYPERPARAMETERS = {
    # SGDMomentum takes momentum in (0, 1): with 0 torch.optim.SGD keeps no buffer at all.
    "momentum": st.sampled_from([0.5, 0.9]),
    "dampening": st.sampled_from([0.0, 0.1, 0.5]),
    "lr_decay": st.sampled_from([0.0, 0.01, 0.5]),
    "initial_accumulator_value": st.sampled_from([0.0, 0.1, 1.0]),
}


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
    values = {**HYPERPARAMETER_VALUES, **EXTRA_HYPERPARAMETERS, **overrides}
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
    defaults: dict[str, Any], grads: Sequence[Sequence[torch.Tensor | None]], lrs: list[list[float]] | None,
    dtype: torch.dtype, foreach: bool, in_place: bool = False, jitter: float = 0.0, seed: int = 0,
) -> list[list[torch.Tensor]]:
    """torch.optim's run in ``dtype``; with ``jitter``, every param, gradient and
    state tensor is multiplied by 1 +- ``jitter`` (a random sign per element,
    from ``seed``) at every step, as if each had been rounded once more, and
    the decay rates (betas, alpha, momentum) by 1 +- one float64 epsilon, as if
    the per-step scalars built from them (``1 - beta2**t``: a cancellation
    early in a run) had been computed another way in Python floats."""
    ps: list[torch.Tensor] = [nn.Parameter(p.to(dtype, copy=True)) for p in params]
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
                if g is None:
                    p.grad = None
                    continue
                p.grad = grad = g.clone()
                wiggle(p)
                wiggle(grad)
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
    defaults: dict[str, Any], grads: Sequence[Sequence[torch.Tensor | None]], lrs: list[list[float]] | None = None,
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


def torch_state(name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
                grads: list[list[torch.Tensor]]) -> list[dict[str, Any]]:
    """What torch.optim's ``state[p]`` holds for each param after the run (every gradient given)."""
    ps = [nn.Parameter(p.clone()) for p in params]
    opt = TORCH[name]([{"params": [ps[i] for i in idx], **hp} for idx, hp in groups], **TORCH_DEFAULTS.get(name, {}))
    for step_grads in grads:
        for p, g in zip(ps, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return [dict(opt.state[p]) for p in ps]


# --------------------------------------------------------------------------- checks


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


def state_bytes_mismatches(name: str, params: list[torch.Tensor], groups: list[tuple[list[int], dict[str, Any]]],
                           grads: list[list[torch.Tensor]], got: Any) -> list[str]:
    """How the state the implementation reported (``scenarios.state_after``)
    differs from torch.optim's after the same run: bytes of tensors shaped like
    each param, and their dtype (the param's)."""
    torch_states = torch_state(name, params, groups, grads)
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

"""Hidden checks for handout §4: the public tests' properties on runs they do
not try: longer runs, more and larger param groups, mixed weight decays,
checkpoints taken at any step, more state dtypes. The oracle and the
tolerance are the public tests' (torch.optim, and tests/tolerances.py's bound
against its float64 run), never the reference. The three trajectory checks run
2/5 of the profile's examples: each of their runs is several times as long as
the public tests', and together they were half of the problem's grading time."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import fewer_examples, input_kind
from tests.optimizer_oracle import NAMES, assert_same_trajectory, runs, state_bytes_mismatches, torch_trajectory
from tests.scenarios import optimizers as scenarios

#: The share of the profile's examples the long-run checks draw.
LONG_RUNS = 0.4


def _args(run: dict[str, Any]) -> tuple[list[torch.Tensor], scenarios.Groups, dict[str, Any], scenarios.Grads]:
    """A drawn run's params, groups, defaults and gradients, as the trajectory scenarios and the oracle take them."""
    return run["params"], run["groups"], run["defaults"], run["grads"]


def _describe(name: str, run: dict[str, Any], **more: str) -> None:
    """The kind of a run, for the student's feedback: never its values."""
    hps = sorted({k for _, hp in run["groups"] for k in hp} | set(run["defaults"]))
    input_kind(
        optimizer=name,
        dtype=str(run["params"][0].dtype).removeprefix("torch."),
        params=str(len(run["params"])),
        groups=str(len(run["groups"])),
        steps=str(len(run["grads"])),
        hyperparameters=", ".join(hps) or "defaults",
        missing_gradients="yes" if any(g is None for step in run["grads"] for g in step) else "no",
        lr_schedule="yes" if run["lrs"] is not None else "no",
        **more,
    )


@pytest.mark.extends("tests/test_optimizers.py::test_trajectory_matches_torch")
@pytest.mark.parametrize("name", NAMES)
@fewer_examples(LONG_RUNS)
@given(data=st.data())
def test_long_runs_with_many_groups_match_torch(impl, name, data):
    run = data.draw(runs(name, max_params=6, max_groups=4, min_steps=5, max_steps=12, max_side=7, schedule=True))
    _describe(name, run)
    expected = torch_trajectory(name, *_args(run), run["lrs"])
    got = impl.scenario(scenarios.trajectory, name, *_args(run), run["lrs"])
    assert_same_trajectory(got, expected, name)


@pytest.mark.extends("tests/test_optimizers.py::test_trajectory_matches_torch")
@pytest.mark.parametrize("name", NAMES)
@fewer_examples(LONG_RUNS)
@given(data=st.data())
def test_weight_decay_combinations_match_torch(impl, name, data):
    """Every group with its own weight decay (zero and large ones side by side)."""
    run = data.draw(runs(name, max_params=5, max_groups=5, min_steps=2, max_steps=6, none_grads=False,
                         weight_decay=st.sampled_from([0.0, 1e-3, 0.1, 0.5]), lr=st.sampled_from([1e-2, 0.1])))
    _describe(name, run)
    expected = torch_trajectory(name, *_args(run))
    got = impl.scenario(scenarios.trajectory, name, *_args(run))
    assert_same_trajectory(got, expected, name)


@pytest.mark.extends("tests/test_optimizers.py::test_state_dict_resumes_the_run")
@pytest.mark.parametrize("name", NAMES)
@fewer_examples(LONG_RUNS)
@given(data=st.data())
def test_resume_at_any_step_matches_torch(impl, name, data):
    run = data.draw(runs(name, max_params=4, min_steps=2, max_steps=10, schedule=True))
    split = data.draw(st.integers(1, len(run["grads"]) - 1), label="split")
    _describe(name, run, resumed="after a middle step")
    expected = torch_trajectory(name, *_args(run), run["lrs"])
    got = impl.scenario(scenarios.resumed_trajectory, name, *_args(run), split, run["lrs"])
    assert_same_trajectory(got, expected, f"{name} resumed after step {split}")


@pytest.mark.extends("tests/test_optimizers.py::test_params_without_grad_are_left_alone")
@pytest.mark.parametrize("name", ["Adam", "AdamW", "AdaGrad"])
def test_bias_correction_late_in_a_run(impl, name):
    """Forty steps with sparse gradient arrivals: per-param step counts diverge."""
    gen = torch.Generator().manual_seed(4)
    params = [torch.randn(5, generator=gen, dtype=torch.float64) for _ in range(3)]
    grads = [
        [torch.randn(5, generator=gen, dtype=torch.float64) if (k + i) % (i + 1) == 0 else None for i in range(3)]
        for k in range(40)
    ]
    groups = [([0, 1, 2], {"lr": 0.01, "betas": (0.9, 0.99)} if name != "AdaGrad" else {"lr_decay": 0.1})]
    input_kind(optimizer=name, dtype="float64", steps="40", missing_gradients="most steps",
               hyperparameters=", ".join(groups[0][1]))
    expected = torch_trajectory(name, params, groups, {}, grads)
    got = impl.scenario(scenarios.trajectory, name, params, groups, defaults={}, grads_per_step=grads)
    assert_same_trajectory(got, expected, name)


@pytest.mark.extends("tests/test_optimizers.py::test_state_bytes_match_torch")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_with_two_groups_match_torch(impl, name, dtype):
    """Per-parameter state: as many bytes as torch.optim's, in the param's dtype,
    with two param groups and more shapes than the public test."""
    shapes = [(7, 3), (2, 2, 5), (11,), (1, 4)]
    params = [torch.randn(s, generator=torch.Generator().manual_seed(i)).to(dtype) for i, s in enumerate(shapes)]
    grads = [[torch.randn(s, generator=torch.Generator().manual_seed(9 + k + i)).to(dtype)
              for i, s in enumerate(shapes)] for k in range(3)]
    groups = [([0, 2], {}), ([1, 3], {"lr": 0.1})]
    input_kind(optimizer=name, dtype=str(dtype).removeprefix("torch."), params="4", groups="2", steps="3")
    got = impl.scenario(scenarios.state_after, name, params, groups, defaults={}, grads_per_step=grads)
    problems = state_bytes_mismatches(name, params, groups, grads, got)
    assert not problems, "\n".join(problems)


@pytest.mark.extends("tests/test_optimizers.py::test_momentum_buffer_starts_at_the_first_gradient")
def test_sgd_momentum_first_step_is_undamped(impl):
    params = [torch.linspace(-1, 1, 6, dtype=torch.float64)]
    grads = [[torch.linspace(1, 2, 6, dtype=torch.float64)]]
    groups = [([0], {"lr": 0.5, "momentum": 0.9, "dampening": 0.9})]
    input_kind(optimizer="SGDMomentum", dtype="float64", steps="1", hyperparameters="lr, momentum, dampening")
    expected = torch_trajectory("SGDMomentum", params, groups, {}, grads)
    got = impl.scenario(scenarios.trajectory, "SGDMomentum", params, groups, defaults={}, grads_per_step=grads)
    assert_same_trajectory(got, expected, "SGDMomentum with dampening 0.9")

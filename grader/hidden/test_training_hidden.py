"""Hidden differential checks for handout §6: the submission against the
reference on models, optimizers, precisions and checkpoint splits the public
tests do not use (other widths and depths, longer runs, bf16 resumes, fp16
scale dynamics, other bad files)."""

from __future__ import annotations

import secrets

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind
from grader.hidden.training_inputs import hidden_batches
from tests.harness import Impl
from tests.scenarios import checkpoints as checkpoint_scenarios
from tests.scenarios import training as scenarios
from tests.strategies import make_tensor, seeds
from tests.tolerances import assert_close
from tests.training_checks import (
    Run,
    assert_checkpointed_is_the_model,
    assert_same_steps,
    checkpoint_layers,
    resumed_run,
    torch_steps,
)


def _close_losses(got, expected, atol: float, what: str) -> None:
    assert isinstance(got, list) and len(got) == len(expected), f"{what}: got {got!r:.200}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert type(g) is float and abs(g - e) <= atol + 1e-5 * abs(e), (
            f"{what}: step {i} loss {g!r}, the reference's {e!r} (atol {atol:g})"
        )


@pytest.mark.extends("tests/test_training_train_step.py::test_fp32_steps_match_a_torch_loop")
@settings(max_examples=10)
@given(
    kind=st.sampled_from(["mlp", "stack", "linear_stack"]),
    dim=st.integers(2, 12),
    layers=st.integers(1, 4),
    opt=st.sampled_from(["sgd", "adamw"]),
    lr=st.sampled_from([1e-3, 1e-2, 0.1]),
    seed=seeds,
)
def test_fp32_steps_equal_the_reference(impl, kind, dim, layers, opt, lr, seed):
    input_kind(model=kind, width="2 to 12", layers=str(layers), optimizer=opt, precision="fp32", steps="4")
    batches = hidden_batches(4, batch=5, dim=dim, seed=seed)
    run: Run = {"dim": dim, "num_layers": layers, "seed": seed, "opt_name": opt, "lr": lr}
    got = impl.scenario(scenarios.run_steps, kind, **run, batches=batches, precision="fp32")
    # The public test's oracle (a plain torch loop, and the rounding this run's conditioning allows).
    assert_same_steps(got, torch_steps(kind, **run, batches=batches), f"fp32 {kind} {opt} lr={lr}")


@pytest.mark.extends("tests/test_training_train_step.py::test_bf16_tracks_fp32_and_keeps_fp32_master_weights")
@settings(max_examples=6)
@given(kind=st.sampled_from(["mlp", "stack"]), dim=st.integers(4, 24), seed=seeds,
       precision=st.sampled_from(["bf16", "fp16"]))
def test_mixed_precision_steps_equal_the_reference(impl, ref, kind, dim, seed, precision):
    input_kind(model=kind, width="4 to 24", layers="2", optimizer="adamw", precision=precision, steps="8")
    batches = hidden_batches(8, batch=16, dim=dim, seed=seed)
    run = {"dim": dim, "num_layers": 2, "seed": seed, "opt_name": "adamw", "lr": 1e-2, "batches": batches,
           "precision": precision}
    got = impl.scenario(scenarios.run_steps, kind, **run)
    expected = ref.scenario(scenarios.run_steps, kind, **run)
    for key in ("forward_dtypes", "param_dtypes", "state_dtypes", "loss_types"):
        assert got[key] == expected[key], f"{precision} {kind}: {key} {got[key]}, the reference's {expected[key]}"
    # The same autocast ops in the same order: equal up to a few roundings.
    _close_losses(got["losses"], expected["losses"], 0.02 * expected["losses"][0], f"{precision} {kind}")


@pytest.mark.extends("tests/test_training_train_step.py::test_fp16_skips_a_step_with_inf_gradients")
@pytest.mark.parametrize("init_scale", [2.0**8, 2.0**16, 2.0**24])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 300.0])
def test_fp16_scaler_dynamics_equal_the_reference(impl, ref, init_scale, magnitude):
    """Steps that overflow (skipped, scale halved) and steps that do not."""
    input_kind(precision="fp16", scaler="GradScaler with another initial scale", weights="other magnitudes")
    w = torch.full((1, 8), magnitude)
    x = torch.linspace(-1.0, 1.0, 32).reshape(4, 8) * magnitude
    got = impl.scenario(scenarios.fp16_step, weights=[w], x=x, y=torch.zeros(4), lr=1e-6, init_scale=init_scale)
    expected = ref.scenario(scenarios.fp16_step, weights=[w], x=x, y=torch.zeros(4), lr=1e-6, init_scale=init_scale)
    assert got["scale"] == expected["scale"], (
        f"scale after the step: {got['scale']}, the reference's {expected['scale']}"
    )
    assert_close(got["weights"][0], expected["weights"][0], what=f"weight after an fp16 step (|w|={magnitude})")


@pytest.mark.extends("tests/test_training_checkpointed_forward.py::test_checkpointed_forward_same_results")
@settings(max_examples=6)
@given(kind=st.sampled_from(["mlp", "stack", "linear_stack"]), layers=st.integers(1, 16),
       dim=st.integers(1, 16), batch=st.integers(1, 7), seed=seeds)
def test_checkpointed_forward_other_depths_and_widths(impl, kind, layers, dim, batch, seed):
    """The public property on other depths and widths: the results of model(x)
    (any segmentation gives them). The saving itself is judged by the public
    test that reads the process's memory from outside; a count taken inside
    the worker would be the submission's word."""
    x = make_tensor((batch, dim), torch.float32, seed)
    model = scenarios.build_model(kind, dim, layers, seed)
    num_layers = checkpoint_layers(model)
    input_kind(model=kind, layers=str(num_layers), width="1 to 16", batch="1 to 7")
    got = impl.scenario(scenarios.checkpointed, kind, dim=dim, num_layers=layers, seed=seed, x=x)
    assert_checkpointed_is_the_model(got, model, x, f"{kind}, {num_layers} layers")


@pytest.mark.extends("tests/test_training_checkpoints.py::test_resumed_run_equals_the_uninterrupted_run_bit_for_bit")
@pytest.mark.parametrize(
    ("kind", "split", "total", "precision"),
    [("mlp", 1, 6, "fp32"), ("stack", 5, 6, "fp32"), ("linear_stack", 3, 9, "fp32"), ("stack", 3, 7, "bf16")],
)
def test_resume_at_other_points_is_bit_exact(impl, ref, tmp_path, kind, split, total, precision):
    """Resumed in a fresh process from the file alone (see resumed_run), at
    other split points, and the uninterrupted run close to the reference's."""
    input_kind(model=kind, precision=precision, resumed="at another step, in a fresh process")
    seed = secrets.randbelow(2**31)
    run = {"dim": 6, "num_layers": 3, "batch": 5, "seed": seed, "precision": precision}
    whole, resumed = resumed_run(impl, tmp_path, kind, **run, total=total, split=split)
    expected = ref.scenario(checkpoint_scenarios.train_run, kind, **run, steps=total)
    atol = 1e-6 if precision == "fp32" else 0.02 * expected["losses"][0]
    _close_losses(whole["losses"], expected["losses"], atol, f"uninterrupted {precision} {kind} run")
    assert whole["losses"] == resumed["losses"], (
        f"resumed at {split}: {resumed['losses']} vs uninterrupted {whole['losses']}"
    )
    for a, b in zip(whole["params"], resumed["params"], strict=True):
        assert torch.equal(a, b), "parameters differ after resuming"


@pytest.mark.extends("tests/test_training.py::test_train_matches_a_torch_loop_and_draws_one_batch_per_step")
@settings(max_examples=4)
@given(steps=st.integers(1, 12), seed=seeds, precision=st.sampled_from(["fp32", "bf16"]))
def test_train_equals_the_reference(impl, ref, steps, seed, precision):
    input_kind(model="stack", precision=precision, steps="1 to 12")
    run = {"dim": 10, "num_layers": 2, "seed": seed, "opt_name": "adamw", "lr": 1e-2,
           "batches": hidden_batches(steps + 2, batch=8, dim=10, seed=seed), "steps": steps,
           "precision": precision, "feed": "counted"}
    got = impl.scenario(scenarios.run_train, "stack", **run)
    expected = ref.scenario(scenarios.run_train, "stack", **run)
    atol = 1e-6 if precision == "fp32" else 0.02 * expected["losses"][0]
    _close_losses(got["losses"], expected["losses"], atol, f"train({precision}, steps={steps})")
    assert got["drawn"] == expected["drawn"] == steps, f"train(steps={steps}) drew {got['drawn']} batches"


@pytest.mark.extends("tests/test_training_checkpoints.py::test_load_rejects_broken_or_foreign_files")
@pytest.mark.parametrize("kind", ["truncated", "garbage", "tensor", "dict", "missing"])
def test_bad_files_raise_like_the_reference(impl, ref, kind):
    input_kind(file=kind)
    def outcome(who: Impl) -> str | None:
        try:
            who.scenario(checkpoint_scenarios.load_bad_file, kind)
        except NotImplementedError:
            raise
        except Exception as e:
            return type(e).__name__
        return None

    expected = outcome(ref)
    assert outcome(impl) == expected, f"loading a {kind} file should raise {expected}"

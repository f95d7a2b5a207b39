"""Handout §6, ``train_step``: one optimizer step in fp32, bf16 (autocast) or
fp16 (autocast and a gradient scaler), and its arguments.

Oracles (tests/training_checks.py): the same models trained with a plain torch
loop in this process, in float32 and float64, and the dtypes of what
autocast ran.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.scenarios import training as scenarios
from tests.training_checks import (
    BF16_TOLERANCE,
    FP16_TOLERANCE,
    Run,
    assert_losses_close,
    assert_same_steps,
    check_by_keyword,
    make_batches,
    torch_loop,
    torch_steps,
)

# --------------------------------------------------------------------------- train_step


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", ["mlp", "stack"])
def test_fp32_steps_match_a_torch_loop(impl, kind, opt_name):
    # Three steps: a step that forgets to zero the gradients drifts from step 2 on.
    batches = make_batches(3, batch=8, dim=6, seed=1)
    run: Run = {"dim": 6, "num_layers": 2, "seed": 0, "opt_name": opt_name, "lr": 0.05}
    got = impl.scenario(scenarios.run_steps, kind, **run, batches=batches, precision="fp32")
    assert_same_steps(got, torch_steps(kind, **run, batches=batches), f"3 fp32 train_step calls ({kind}, {opt_name})")


def test_bf16_tracks_fp32_and_keeps_fp32_master_weights(impl):
    batches = make_batches(25, batch=32, dim=16, seed=2)
    run: Run = {"dim": 16, "num_layers": 2, "seed": 3, "opt_name": "adamw", "lr": 1e-2}
    got = impl.scenario(scenarios.run_steps, "mlp", **run, batches=batches, precision="bf16")
    losses, _ = torch_loop("mlp", **run, batches=batches)
    assert got["forward_dtypes"] == ["bfloat16"], (
        f"with precision='bf16' the Linear layers should run in bfloat16 (torch.autocast), "
        f"they produced {got['forward_dtypes']}"
    )
    assert got["param_dtypes"] == ["float32"], (
        f"mixed precision keeps fp32 master weights: parameters are {got['param_dtypes']} after bf16 steps"
    )
    assert got["state_dtypes"] == ["float32"], (
        f"AdamW's moments should stay float32, they are {got['state_dtypes']}"
    )
    assert_losses_close(got["losses"], losses, 0.0, BF16_TOLERANCE * losses[0], "bf16 losses vs the fp32 run")
    assert losses[-1] < 0.7 * losses[0], "sanity: the fp32 oracle run should learn"


def test_fp16_runs_in_fp16_and_keeps_fp32_master_weights(impl):
    batches = make_batches(3, batch=8, dim=6, seed=4)
    got = impl.scenario(scenarios.run_steps, "mlp", dim=6, num_layers=1, seed=0, opt_name="adamw", lr=1e-2,
                        batches=batches, precision="fp16")
    assert got["forward_dtypes"] == ["float16"], f"fp16 layers produced {got['forward_dtypes']}"
    assert got["param_dtypes"] == ["float32"] and got["state_dtypes"] == ["float32"], (
        f"fp16 with a scaler keeps fp32 parameters and state: got {got['param_dtypes']}, {got['state_dtypes']}"
    )


def _tiny_gradient_problem() -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    # Layer 2's weights are ~1e-4, so the gradient reaching layer 1 is ~1e-10:
    # zero in fp16 (smallest subnormal 6e-8) unless the loss is scaled first.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    w1 = torch.randn(8, 8, generator=g) / 8**0.5
    w2 = torch.randn(1, 8, generator=g) * 1e-4
    return [w1, w2], x, torch.zeros(64)


def test_fp16_scaler_keeps_tiny_gradients(impl):
    weights, x, y = _tiny_gradient_problem()
    lr = 1e3
    got = impl.scenario(scenarios.fp16_step, weights, x, y, lr=lr, init_scale=2.0**16)
    model = scenarios.build_linear_chain(weights)
    F.mse_loss(model(x), y).backward()
    for i, (w, p) in enumerate(zip(weights, model.parameters(), strict=True)):
        assert p.grad is not None  # the fp32 oracle's, set by the backward above
        expected = -lr * p.grad
        update = got["weights"][i] - w
        err = (update - expected).abs().max().item() / expected.abs().max().item()
        assert err < 1e-2, (
            f"fp16 step of layer {i + 1}: its update is off by {err:.0%} of the fp32 update "
            f"(largest fp32 update {expected.abs().max().item():.3g}, got {update.abs().max().item():.3g}); "
            "without loss scaling its gradients flush to zero in fp16"
        )


def test_fp16_skips_a_step_with_inf_gradients(impl):
    # 8 * 300 * 300 = 720,000 overflows fp16 (max 65504): the loss and the
    # gradients are inf/nan, so the scaler must skip the step and halve the scale.
    w = torch.full((1, 8), 300.0)
    x = torch.full((4, 8), 300.0)
    got = impl.scenario(scenarios.fp16_step, weights=[w], x=x, y=torch.zeros(4), lr=0.1, init_scale=1024.0)
    assert torch.equal(got["weights"][0], w), (
        f"a step with inf/nan gradients must be skipped (weights unchanged), got {got['weights'][0]}"
    )
    assert got["scale"] == 512.0, (
        f"after a skipped step GradScaler.update() halves the scale: expected 512.0, got {got['scale']}"
    )


@pytest.mark.parametrize(
    ("precision", "use_scaler", "y_shape", "error"),
    [
        ("fp8", False, [3], ValueError),
        ("FP32 ", False, [3], ValueError),
        (16, False, [3], TypeError),
        ("fp16", False, [3], ValueError),  # fp16 without a scaler
        ("fp16", "object", [3], (TypeError, ValueError)),  # not a GradScaler: either error (docstring)
        ("fp32", True, [3], ValueError),  # a scaler that would be ignored
        ("fp32", False, [3, 1], ValueError),  # (B,) vs (B, 1) would broadcast to (B, B)
    ],
    ids=["fp8", "spelling", "int", "fp16-no-scaler", "fp16-not-a-scaler", "fp32-with-scaler", "shape-mismatch"],
)
def test_train_step_rejects_bad_input(impl, precision, use_scaler, y_shape, error):
    with pytest.raises(error):
        impl.scenario(scenarios.step_with, precision, use_scaler, y_shape)


@pytest.mark.parametrize("which", ["x", "y"])
def test_train_step_rejects_a_batch_that_is_not_tensors(impl, which):
    """The docstring: TypeError when ``x`` or ``y`` is not a tensor (a list of
    floats included: without the check, a list ``y`` fails inside the loss with
    another error)."""
    with pytest.raises(TypeError):
        impl.scenario(scenarios.step_with, "fp32", use_scaler=False, y_shape=[3], as_list=which)


@settings(max_examples=3)
@given(seed=st.integers(0, 50), kind=st.sampled_from(["mlp", "stack"]))
def test_fp16_train_step_loss_tracks_the_fp32_loss(impl, seed, kind):
    """The loss ``train_step`` returns with ``precision="fp16"`` is the loss
    itself (not the scaled loss the scaler backpropagates), within fp16's
    rounding of the fp32 run's; parameters and state stay fp32."""
    batches = make_batches(8, batch=16, dim=8, seed=seed)
    run: Run = {"dim": 8, "num_layers": 2, "seed": seed, "opt_name": "adamw", "lr": 1e-2}
    got = impl.scenario(scenarios.run_steps, kind, **run, batches=batches, precision="fp16")
    losses, _ = torch_loop(kind, **run, batches=batches)
    assert got["param_dtypes"] == ["float32"] and got["state_dtypes"] == ["float32"], (
        f"fp16 keeps fp32 master weights and state: got {got['param_dtypes']}, {got['state_dtypes']}"
    )
    assert_losses_close(got["losses"], losses, FP16_TOLERANCE, FP16_TOLERANCE * losses[0],
                        "train_step(precision='fp16') losses vs the fp32 run")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="not run on a GPU: needs CUDA")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_runs_on_the_batch_device(impl, precision):
    """On CUDA, autocast must use ``device_type="cuda"`` (the batch's device):
    the Linear layers run in the low-precision dtype."""
    batches = make_batches(3, batch=8, dim=6, seed=1)
    got = impl.scenario(scenarios.run_steps, "mlp", dim=6, num_layers=2, seed=0, opt_name="adamw", lr=1e-2,
                        batches=batches, precision=precision, device="cuda")
    want = {"bf16": "bfloat16", "fp16": "float16"}[precision]
    assert got["forward_dtypes"] == [want], f"{precision} on CUDA: the Linear layers produced {got['forward_dtypes']}"
    assert got["param_dtypes"] == ["float32"], f"master weights: {got['param_dtypes']}"


def test_train_step_accepts_every_argument_by_keyword(impl):
    """Signatures are contracts (handout, "How the tests reach your code"):
    ``train_step(model=, optimizer=, x=, y=, precision=, scaler=)`` does what
    the positional call does."""
    check_by_keyword(impl, "train_step")

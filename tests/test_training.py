"""Handout §6, ``train``: the loop. The other functions of training.py have
their chapters in files of their own, in handout order:
tests/test_training_train_step.py, tests/test_training_checkpointed_forward.py
and tests/test_training_checkpoints.py (``save_checkpoint``,
``load_checkpoint``).

Oracles (tests/training_checks.py, shared by the training tests): the same
models trained with a plain torch loop in this process (``F.mse_loss``,
``torch.optim``) and the dtypes of what autocast ran.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness import Impl
from tests.scenarios import training as scenarios
from tests.tolerances import assert_close
from tests.training_checks import BF16_TOLERANCE, FP16_TOLERANCE, Run, assert_losses_close, make_batches, torch_loop

# --------------------------------------------------------------------------- train


#: the model and optimizer of the fp32 ``train`` runs compared with a torch loop
ADAMW_RUN: Run = {"dim": 6, "num_layers": 2, "seed": 1, "opt_name": "adamw", "lr": 1e-2}
#: the small SGD run of the checks of ``train``'s arguments
SGD_RUN: Run = {"dim": 6, "num_layers": 2, "seed": 0, "opt_name": "sgd", "lr": 0.1}
#: the tiny SGD run of the checks of bad input and logging
TINY_RUN: Run = {"dim": 4, "num_layers": 1, "seed": 0, "opt_name": "sgd", "lr": 0.1}


def train_matches_a_torch_loop(impl: Impl, kind: str, batches: list[Any], steps: int, feed: str,
                               how: str) -> dict[str, Any]:
    """fp32 ``train`` for ``steps`` steps, batches fed as ``feed``, matches a torch
    loop over the first ``steps`` batches (losses and parameters); its record."""
    got = impl.scenario(scenarios.run_train, kind, **ADAMW_RUN, batches=batches, steps=steps, precision="fp32",
                        feed=feed)
    losses, params = torch_loop(kind, **ADAMW_RUN, batches=batches[:steps])
    assert_losses_close(got["losses"], losses, 1e-5, 1e-7, f"train losses{how} ({kind})")
    for i, (g, e) in enumerate(zip(got["params"], params, strict=True)):
        assert_close(g, e, scale=10, what=f"parameter {i} after train(steps={steps}){how}")
    return got


@pytest.mark.parametrize("kind", ["mlp", "linear_stack"])
def test_train_matches_a_torch_loop_and_draws_one_batch_per_step(impl, kind):
    got = train_matches_a_torch_loop(impl, kind, make_batches(9, batch=8, dim=6, seed=6), 6, "counted", "")
    assert got["drawn"] == 6, f"train(steps=6) should draw exactly 6 batches (no read-ahead), drew {got['drawn']}"


def test_train_bf16_tracks_fp32(impl):
    batches = make_batches(20, batch=32, dim=16, seed=7)
    run: Run = {"dim": 16, "num_layers": 2, "seed": 2, "opt_name": "adamw", "lr": 1e-2}
    got = impl.scenario(scenarios.run_train, "mlp", **run, batches=batches, steps=20, precision="bf16",
                        feed="counted")
    losses, _ = torch_loop("mlp", **run, batches=batches)
    assert_losses_close(got["losses"], losses, 0.0, BF16_TOLERANCE * losses[0], "train(precision='bf16') losses")
    assert got["losses"] != losses, "bf16 losses equal fp32's exactly: is autocast on?"


@pytest.mark.parametrize(
    ("steps", "n_batches", "log_every", "error"),
    [(-1, 3, 0, ValueError), (2.5, 3, 0, TypeError), (4, 3, 0, ValueError), (2, 3, -1, ValueError)],
    ids=["negative-steps", "float-steps", "too-few-batches", "negative-log-every"],
)
def test_train_rejects_bad_input(impl, steps, n_batches, log_every, error):
    with pytest.raises(error):
        impl.scenario(scenarios.run_train, "mlp", **TINY_RUN, batches=make_batches(n_batches, batch=3, dim=4, seed=0),
                      steps=steps, log_every=log_every)


def test_train_with_zero_steps_returns_no_losses(impl):
    got = impl.scenario(scenarios.run_train, "mlp", **TINY_RUN, batches=[], steps=0, log_every=0)
    assert got["losses"] == []


@settings(max_examples=3)
@given(seed=st.integers(0, 50), steps=st.integers(1, 8))
def test_train_fp16_tracks_fp32(impl, seed, steps):
    """``train(precision="fp16", scaler=GradScaler("cpu"))``: one loss per step,
    within fp16's rounding of the fp32 run; fp32 parameters and state."""
    batches = make_batches(steps, batch=16, dim=8, seed=seed)
    run: Run = {"dim": 8, "num_layers": 2, "seed": seed, "opt_name": "adamw", "lr": 1e-2}
    got = impl.scenario(scenarios.run_train, "mlp", **run, batches=batches, steps=steps, precision="fp16",
                        scaler="default")
    losses, _ = torch_loop("mlp", **run, batches=batches)
    assert got["param_dtypes"] == ["float32"] and got["state_dtypes"] == ["float32"], (
        f"fp16 keeps fp32 master weights and state: got {got['param_dtypes']}, {got['state_dtypes']}"
    )
    assert_losses_close(got["losses"], losses, FP16_TOLERANCE, FP16_TOLERANCE * losses[0],
                        "train(precision='fp16') losses vs the fp32 run")


@settings(max_examples=3)
@given(seed=st.integers(0, 50), steps=st.integers(1, 6))
def test_train_fp16_steps_through_its_scaler(impl, seed, steps):
    """``train(precision="fp16", scaler=...)`` runs every step through the
    scaler (``scale``, ``step``, ``update``): a GradScaler that doubles its scale
    after each step without inf/nan gradients (init 1, growth interval 1) ends
    at 2**steps; one the loop ignores stays at 1."""
    batches = make_batches(steps, batch=16, dim=8, seed=seed)
    got = impl.scenario(scenarios.run_train, "mlp", dim=8, num_layers=2, seed=seed, opt_name="adamw", lr=1e-2,
                        batches=batches, steps=steps, precision="fp16", scaler="growth")["scale"]
    assert got == 2.0**steps, (
        f"after {steps} fp16 steps the GradScaler's scale is {got!r}, expected {2.0**steps!r}: every step must go "
        "through scaler.scale(loss).backward(), scaler.step(optimizer) and scaler.update()"
    )


@settings(max_examples=4)
@given(seed=st.integers(0, 1000), steps=st.integers(1, 5))
def test_precision_defaults_to_fp32(impl, seed, steps):
    """Without ``precision``, ``train_step`` and ``train`` run in fp32: the
    losses of a plain fp32 torch loop."""
    batches = make_batches(steps, batch=8, dim=6, seed=seed)
    got = impl.scenario(scenarios.run_steps, "mlp", **SGD_RUN, batches=batches, precision=None)
    trained = impl.scenario(scenarios.run_train, "mlp", **SGD_RUN, batches=batches, steps=steps)
    losses, _ = torch_loop("mlp", **SGD_RUN, batches=batches)
    assert got["forward_dtypes"] == ["float32"], f"without precision the layers ran in {got['forward_dtypes']}"
    assert_losses_close(got["losses"], losses, 1e-5, 1e-7, "train_step(...) without precision")
    assert_losses_close(trained["losses"], losses, 1e-5, 1e-7, "train(...) without precision")


@pytest.mark.parametrize("kind", ["mlp", "linear_stack"])
def test_train_draws_from_one_iterator_over_a_list_of_batches(impl, kind):
    """``batches`` is any iterable, a list included: train draws the next
    batch before each step (batch k at step k), as over an iterator."""
    batches = make_batches(7, batch=8, dim=6, seed=8)
    train_matches_a_torch_loop(impl, kind, batches, 5, "list", " over a list of batches")


def test_train_accepts_every_argument_by_keyword(impl):
    """The stub's signature is the contract: ``model``, ``optimizer`` and
    ``batches`` may be passed by keyword too (not positional-only), and the
    losses are those of a plain fp32 torch loop."""
    batches = make_batches(3, batch=8, dim=6, seed=3)
    got = impl.scenario(scenarios.run_train, "mlp", **SGD_RUN, batches=batches, steps=3, precision="fp32",
                        log_every=0, by_keyword=True)
    losses, _ = torch_loop("mlp", **SGD_RUN, batches=batches)
    assert_losses_close(got["losses"], losses, 1e-5, 1e-7, "train(...) called with keywords")


# An integer in a log message: digits not part of a longer number nor the
# fraction of a decimal ("loss 0.3" names 0, not 3; "step 3." names 3).
_INTEGER = re.compile(r"(?<![\d.])\d+(?!\d|\.\d)")


@pytest.mark.parametrize(
    ("steps", "log_every"),
    [(7, 3), (5, 1), (6, 2), (4, 5), (6, 0), (6, None)],
    ids=["7-every-3", "5-every-1", "6-every-2", "4-every-5", "log_every-0", "default"],
)
def test_train_logs_every_k_steps_naming_the_step(impl, steps, log_every):
    """``log_every=k > 0``: exactly one INFO record through ``logging`` after
    each step whose 1-based number is a multiple of k (steps k, 2k, ...), in
    order, each message naming its step number as an integer; nothing else at
    INFO or above. ``log_every=0``, the default, logs nothing at INFO or above.
    Records of torch's own loggers are not counted."""
    got = impl.scenario(scenarios.run_train, "mlp", **TINY_RUN, batches=make_batches(steps, batch=3, dim=4, seed=steps),
                        steps=steps, log_every=log_every, record_logs=True)
    assert len(got["losses"]) == steps, f"train(steps={steps}) returned {len(got['losses'])} losses"
    records = [r for r in got["records"]
               if r["level"] >= logging.INFO and r["logger"].partition(".")[0] != "torch"]
    k = log_every or 0
    expected = [s for s in range(1, steps + 1) if k and s % k == 0]
    seen = [(logging.getLevelName(r["level"]), r["message"]) for r in records]
    call = f"train(steps={steps}" + ("" if log_every is None else f", log_every={log_every}") + ")"
    assert len(records) == len(expected), (
        f"{call} should log {len(expected)} records at INFO or above (after steps {expected}), "
        f"logged {len(records)}: {seen}"
    )
    for step, record in zip(expected, records, strict=True):
        assert record["level"] == logging.INFO, f"{call}: the record for step {step} should be INFO: {seen}"
        named = [int(m) for m in _INTEGER.findall(record["message"])]
        assert step in named, (
            f"{call}: the record logged after step {step} (1-based) should name the step number {step}, "
            f"got {record['message']!r}; all records: {seen}"
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="not run on a GPU: needs CUDA")
@pytest.mark.feedback_only("the syncs are counted inside the implementation's process, where a submission could "
                           "forge the count; the grader's MFU problem grades the same property with its own clock")
def test_train_on_cuda_does_not_sync_every_step(impl):
    steps = 12
    got = impl.scenario(scenarios.train_cuda_syncs, steps=steps, precision="bf16")
    assert len(got["losses"]) == steps and all(v == v for v in got["losses"]), f"losses: {got['losses']}"
    assert got["param_dtypes"] == ["torch.float32"], f"bf16 training changed parameter dtypes: {got['param_dtypes']}"
    assert len(got["syncs"]) <= steps // 3, (
        f"train synchronised with the GPU {len(got['syncs'])} times in {steps} steps: keep the losses on the "
        f"device and convert them once at the end ({got['syncs'][:3]})"
    )

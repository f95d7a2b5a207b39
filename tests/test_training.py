"""Handout §6: the oracles the training tests share, then ``train`` (the loop).
The other functions of training.py have their chapters in files of their
own, in handout order: tests/test_training_train_step.py,
tests/test_training_checkpointed_forward.py and tests/test_training_checkpoints.py
(``save_checkpoint``, ``load_checkpoint``).

Oracles: the same models trained with a plain torch loop in this process
(``F.mse_loss``, ``torch.optim``) and the dtypes of what autocast ran.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tests.scenarios import training as scenarios
from tests.strategies import make_tensor
from tests.tolerances import assert_close, assert_close_to_exact, bound_to_exact, eps, oracle_error, worst_ratio

KINDS = ("mlp", "stack", "linear_stack")


def make_batches(n: int, batch: int, dim: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Regression batches: y = tanh(x @ v), a target a small tanh MLP can fit."""
    v = torch.linspace(-2.0, 2.0, dim) / dim**0.5
    out = []
    for i in range(n):
        x = make_tensor((batch, dim), torch.float32, seed * 1000 + i)
        out.append((x, torch.tanh(x @ v)))
    return out


#: Seeds of the random signs of :func:`torch_steps`'s perturbed float64 runs,
#: and the size of each perturbation in float32 epsilons: a float32 matmul of
#: these widths rounds each output several times. Measured over 4,000 random
#: runs of the hidden check's shapes (lr up to 0.1): correct codes (torch's
#: loss, ``((out - y) ** 2).mean()``, the loss in float64, one thread against
#: two) stay within 0.67 of the bound, a step that keeps the last gradient or
#: sums the loss lands 6.5 times past it or more.
JITTER_SEEDS = (0, 1)
JITTER_EPS = 4.0


def _float_loop(kind: str, dim: int, layers: int, seed: int, opt_name: str, lr: float,
                batches: list[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype, jitter: float = 0.0,
                jitter_seed: int = 0) -> tuple[list[float], list[torch.Tensor], list[torch.Tensor]]:
    """:func:`torch_loop` in ``dtype``; with ``jitter``, the inputs, every
    layer's output and the gradient flowing back into it, the parameters,
    their gradients and the optimizer state are multiplied by 1 +- ``jitter``
    (a random sign per element) at every step, as if each had been rounded
    once more (a gradient that is a near-cancelling sum then moves by the
    rounding of its terms, not of itself). Returns the losses, the final
    parameters and, per parameter, the sum of |param| and |update| over the
    run (the sizes rounding acts on)."""
    model = scenarios.build_model(kind, dim, layers, seed).to(dtype)
    params = list(model.parameters())
    opt = scenarios.build_optimizer(opt_name, params, lr)
    gen = torch.Generator().manual_seed(jitter_seed)

    def signs(t: torch.Tensor) -> torch.Tensor:
        return 1 + jitter * (2 * torch.randint(0, 2, t.shape, generator=gen, dtype=t.dtype) - 1)

    def wiggle(t: torch.Tensor) -> torch.Tensor:
        return t.mul_(signs(t)) if jitter else t

    def wiggle_output(_module: nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
        out = out * signs(out)
        out.register_hook(lambda grad: grad * signs(grad))
        return out

    if jitter:
        for module in model.modules():
            if not any(True for _ in module.children()):
                module.register_forward_hook(wiggle_output)

    losses, magnitude = [], [p.detach().double().abs() for p in params]
    for x, y in batches:
        x, y = wiggle(x.to(dtype, copy=True)), y.to(dtype)
        opt.zero_grad()
        with torch.no_grad():
            for p in params:
                wiggle(p)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        before = [p.detach().double() for p in params]
        with torch.no_grad():
            for p in params:
                wiggle(p.grad)
            opt.step()
            for p in params:
                for value in opt.state[p].values():
                    if isinstance(value, torch.Tensor) and value.shape == p.shape:
                        wiggle(value)
        magnitude = [m + p.detach().double().abs() + (p.detach().double() - b).abs()
                     for m, p, b in zip(magnitude, params, before, strict=True)]
        losses.append(loss.item())
    return losses, [p.detach() for p in params], magnitude


def torch_loop(kind, dim, layers, seed, opt_name, lr, batches):
    """The oracle: plain fp32 training with torch, step by step; the losses and
    the final parameters."""
    losses, params, _ = _float_loop(kind, dim, layers, seed, opt_name, lr, batches, torch.float32)
    return losses, params


@dataclass(frozen=True)
class Steps:
    """What fp32 training steps must produce (see tests/tolerances.py for the
    rule): the float64 ``losses`` and final ``params`` of the torch loop, how
    far that loop's own float32 run and float64 runs perturbed by
    ``JITTER_EPS`` float32 roundings at every step land from them
    (``*_error``), and the sizes of the values involved (``*_magnitude``)."""

    losses: torch.Tensor
    loss_error: torch.Tensor
    params: list[torch.Tensor]
    param_error: list[torch.Tensor]
    param_magnitude: list[torch.Tensor]


def torch_steps(kind: str, dim: int, layers: int, seed: int, opt_name: str, lr: float,
                batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Steps:
    """The oracle of fp32 ``train_step`` runs: :func:`torch_loop` in float64,
    and how much rounding moves this run on these inputs. A large ``lr`` with
    AdamW makes a run chaotic (the loss jumps; sqrt(v) divides tiny
    gradients), and there two correct codes that round differently once (the
    loss as ``((out - y) ** 2).mean()``, matmuls on another number of threads)
    end far apart: the perturbed runs move as far, so the bound follows."""
    exact, exact_params, magnitude = _float_loop(kind, dim, layers, seed, opt_name, lr, batches, torch.float64)
    f32 = _float_loop(kind, dim, layers, seed, opt_name, lr, batches, torch.float32)
    jittered = [_float_loop(kind, dim, layers, seed, opt_name, lr, batches, torch.float64,
                            jitter=JITTER_EPS * eps(torch.float32), jitter_seed=s) for s in JITTER_SEEDS]
    losses = torch.tensor(exact, dtype=torch.float64)
    loss_error = torch.maximum(
        oracle_error(losses, [torch.tensor(f32[0], dtype=torch.float32)], torch.float32),
        oracle_error(losses, [torch.tensor(j[0], dtype=torch.float64) for j in jittered], torch.float64))
    param_error = [torch.maximum(oracle_error(e, [f32[1][i]], torch.float32),
                                 oracle_error(e, [j[1][i] for j in jittered], torch.float64))
                   for i, e in enumerate(exact_params)]
    return Steps(losses, loss_error, exact_params, param_error, magnitude)


def steps_ratio(got: Any, expected: Steps) -> float:
    """The largest ratio of ``got``'s distance from ``expected``'s exact run to
    the bound :func:`assert_same_steps` allows, over the losses and every
    parameter (a run it accepts stays at or below 1)."""
    losses = torch.tensor(got["losses"], dtype=torch.float32)
    ratio = worst_ratio(losses, expected.losses, bound_to_exact(
        expected.losses, dtype=torch.float32, error=expected.loss_error, magnitude=expected.losses.abs()))
    for g, e, error, magnitude in zip(got["params"], expected.params, expected.param_error,
                                      expected.param_magnitude, strict=True):
        ratio = max(ratio, worst_ratio(g, e, bound_to_exact(e, dtype=torch.float32, error=error,
                                                            magnitude=magnitude)))
    return ratio


def assert_same_steps(got: Any, expected: Steps, what: str) -> None:
    """``got`` (``run_steps``'s report) holds the losses (Python floats) and
    final fp32 parameters of ``expected``'s run, within rounding."""
    losses, params = got["losses"], got["params"]
    assert isinstance(losses, list) and len(losses) == len(expected.losses), (
        f"{what}: expected a list of {len(expected.losses)} losses, got {losses!r:.200}"
    )
    for i, g in enumerate(losses):
        assert type(g) is float, f"{what}: loss {i} should be a Python float, got {type(g).__name__}"
    assert_close_to_exact(torch.tensor(losses, dtype=torch.float32), expected.losses, dtype=torch.float32,
                          error=expected.loss_error, magnitude=expected.losses.abs(), what=f"{what}: the losses")
    assert isinstance(params, list) and len(params) == len(expected.params), (
        f"{what}: expected {len(expected.params)} parameters, got {params!r:.200}"
    )
    for i, (g, e) in enumerate(zip(params, expected.params, strict=True)):
        assert_close_to_exact(g, e, dtype=torch.float32, error=expected.param_error[i],
                              magnitude=expected.param_magnitude[i], what=f"{what}: parameter {i} at the end")


def assert_losses_close(got, expected, rtol, atol, what):
    assert isinstance(got, list) and len(got) == len(expected), (
        f"{what}: expected a list of {len(expected)} losses, got {got!r:.200}"
    )
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert type(g) is float, f"{what}: loss {i} should be a Python float, got {type(g).__name__}"
        assert abs(g - e) <= atol + rtol * abs(e), (
            f"{what}: step {i} loss {g!r}, expected {e!r} (rtol={rtol:g}, atol={atol:g});\n"
            f"got      {[round(v, 6) for v in got]}\nexpected {[round(v, 6) for v in expected]}"
        )


# bf16 has 8 significant bits (eps 2^-7 ~ 0.8%): each forward is off by
# about a percent, and over 25 AdamW steps the two runs drift apart a little.
# Measured on these problems: at most 0.15% of the initial loss; the bound is 2%.
BF16_TOLERANCE = 0.02

#: fp16 (eps 2^-10) losses' distance from the fp32 run's: relative, and as a fraction of the first loss
FP16_TOLERANCE = 0.01


def check_by_keyword(impl, function: str) -> None:
    """``function`` called by keyword returns what the positional call returns and leaves the same parameters."""
    got = impl.scenario(scenarios.by_keyword, function)
    kw, pos = got["keyword"], got["positional"]
    assert type(kw["returned"]) is type(pos["returned"]), (
        f"{function} by keyword returned {type(kw['returned']).__name__}, positionally "
        f"{type(pos['returned']).__name__}")
    if isinstance(pos["returned"], torch.Tensor):
        assert torch.equal(kw["returned"], pos["returned"]), f"{function} by keyword returned another tensor"
    else:
        assert kw["returned"] == pos["returned"], (
            f"{function} by keyword returned {kw['returned']!r}, positionally {pos['returned']!r}")
    for i, (a, b) in enumerate(zip(kw["params"], pos["params"], strict=True)):
        assert torch.equal(a, b), f"{function} by keyword: parameter {i} differs from the positional call"


# --------------------------------------------------------------------------- train


def train_matches_a_torch_loop(impl, kind: str, batches: list, steps: int, feed: str, how: str) -> dict[str, Any]:
    """fp32 ``train`` for ``steps`` steps, batches fed as ``feed``, matches a torch
    loop over the first ``steps`` batches (losses and parameters); its record."""
    got = impl.scenario(scenarios.run_train, kind, 6, 2, 1, "adamw", 1e-2, batches, steps, precision="fp32",
                        feed=feed)
    losses, params = torch_loop(kind, 6, 2, 1, "adamw", 1e-2, batches[:steps])
    assert_losses_close(got["losses"], losses, 1e-5, 1e-7, f"train losses{how} ({kind})")
    for i, (g, e) in enumerate(zip(got["params"], params, strict=True)):
        assert_close(g, e, scale=10, what=f"parameter {i} after train(steps={steps}){how}")
    return got


@pytest.mark.parametrize("kind", ["mlp", "linear_stack"])
def test_train_matches_a_torch_loop_and_draws_one_batch_per_step(impl, kind):
    got = train_matches_a_torch_loop(impl, kind, make_batches(9, 8, 6, seed=6), 6, "counted", "")
    assert got["drawn"] == 6, f"train(steps=6) should draw exactly 6 batches (no read-ahead), drew {got['drawn']}"


def test_train_bf16_tracks_fp32(impl):
    batches = make_batches(20, 32, 16, seed=7)
    got = impl.scenario(scenarios.run_train, "mlp", 16, 2, 2, "adamw", 1e-2, batches, 20, precision="bf16",
                        feed="counted")
    losses, _ = torch_loop("mlp", 16, 2, 2, "adamw", 1e-2, batches)
    assert_losses_close(got["losses"], losses, 0.0, BF16_TOLERANCE * losses[0], "train(precision='bf16') losses")
    assert got["losses"] != losses, "bf16 losses equal fp32's exactly: is autocast on?"


@pytest.mark.parametrize(
    ("steps", "n_batches", "log_every", "error"),
    [(-1, 3, 0, ValueError), (2.5, 3, 0, TypeError), (4, 3, 0, ValueError), (2, 3, -1, ValueError)],
    ids=["negative-steps", "float-steps", "too-few-batches", "negative-log-every"],
)
def test_train_rejects_bad_input(impl, steps, n_batches, log_every, error):
    with pytest.raises(error):
        impl.scenario(scenarios.run_train, "mlp", 4, 1, 0, "sgd", 0.1, make_batches(n_batches, 3, 4, seed=0), steps,
                      log_every=log_every)


def test_train_with_zero_steps_returns_no_losses(impl):
    got = impl.scenario(scenarios.run_train, "mlp", 4, 1, 0, "sgd", 0.1, [], 0, log_every=0)
    assert got["losses"] == []


@settings(max_examples=3)
@given(seed=st.integers(0, 50), steps=st.integers(1, 8))
def test_train_fp16_tracks_fp32(impl, seed, steps):
    """``train(precision="fp16", scaler=GradScaler("cpu"))``: one loss per step,
    within fp16's rounding of the fp32 run; fp32 parameters and state."""
    batches = make_batches(steps, 16, 8, seed=seed)
    got = impl.scenario(scenarios.run_train, "mlp", 8, 2, seed, "adamw", 1e-2, batches, steps, precision="fp16",
                        scaler="default")
    losses, _ = torch_loop("mlp", 8, 2, seed, "adamw", 1e-2, batches)
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
    batches = make_batches(steps, 16, 8, seed=seed)
    got = impl.scenario(scenarios.run_train, "mlp", 8, 2, seed, "adamw", 1e-2, batches, steps, precision="fp16",
                        scaler="growth")["scale"]
    assert got == 2.0**steps, (
        f"after {steps} fp16 steps the GradScaler's scale is {got!r}, expected {2.0**steps!r}: every step must go "
        "through scaler.scale(loss).backward(), scaler.step(optimizer) and scaler.update()"
    )


@settings(max_examples=4)
@given(seed=st.integers(0, 1000), steps=st.integers(1, 5))
def test_precision_defaults_to_fp32(impl, seed, steps):
    """Without ``precision``, ``train_step`` and ``train`` run in fp32: the
    losses of a plain fp32 torch loop."""
    batches = make_batches(steps, 8, 6, seed=seed)
    got = impl.scenario(scenarios.run_steps, "mlp", 6, 2, 0, "sgd", 0.1, batches, None)
    trained = impl.scenario(scenarios.run_train, "mlp", 6, 2, 0, "sgd", 0.1, batches, steps)
    losses, _ = torch_loop("mlp", 6, 2, 0, "sgd", 0.1, batches)
    assert got["forward_dtypes"] == ["float32"], f"without precision the layers ran in {got['forward_dtypes']}"
    assert_losses_close(got["losses"], losses, 1e-5, 1e-7, "train_step(...) without precision")
    assert_losses_close(trained["losses"], losses, 1e-5, 1e-7, "train(...) without precision")


@pytest.mark.parametrize("kind", ["mlp", "linear_stack"])
def test_train_draws_from_one_iterator_over_a_list_of_batches(impl, kind):
    """``batches`` is any iterable, a list included: train draws the next
    batch before each step (batch k at step k), as over an iterator."""
    train_matches_a_torch_loop(impl, kind, make_batches(7, 8, 6, seed=8), 5, "list", " over a list of batches")


def test_train_accepts_every_argument_by_keyword(impl):
    """The stub's signature is the contract: ``model``, ``optimizer`` and
    ``batches`` may be passed by keyword too (not positional-only), and the
    losses are those of a plain fp32 torch loop."""
    batches = make_batches(3, 8, 6, seed=3)
    got = impl.scenario(scenarios.run_train, "mlp", 6, 2, 0, "sgd", 0.1, batches, 3, precision="fp32",
                        log_every=0, by_keyword=True)
    losses, _ = torch_loop("mlp", 6, 2, 0, "sgd", 0.1, batches)
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
    got = impl.scenario(scenarios.run_train, "mlp", 4, 1, 0, "sgd", 0.1, make_batches(steps, 3, 4, seed=steps), steps,
                        log_every=log_every, record_logs=True)
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
    got = impl.scenario(scenarios.train_cuda_syncs, steps, "bf16")
    assert len(got["losses"]) == steps and all(v == v for v in got["losses"]), f"losses: {got['losses']}"
    assert got["param_dtypes"] == ["torch.float32"], f"bf16 training changed parameter dtypes: {got['param_dtypes']}"
    assert len(got["syncs"]) <= steps // 3, (
        f"train synchronised with the GPU {len(got['syncs'])} times in {steps} steps: keep the losses on the "
        f"device and convert them once at the end ({got['syncs'][:3]})"
    )

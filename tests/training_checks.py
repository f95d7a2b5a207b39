"""The oracles and checks the training tests share (handout §6): batches, the
same models trained with a plain torch loop in this process (in float32 and
float64, with the rounding a run allows), and the comparisons of what the
implementation's scenarios report against them.

Trusted side only: imported by tests/test_training*.py and the grader's
hidden checks, never by a scenario (scenarios run in the submission's worker,
which does not have this file).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from tests.harness import Impl
from tests.scenarios import checkpoints as checkpoint_scenarios
from tests.scenarios import training as scenarios
from tests.strategies import make_tensor
from tests.tolerances import assert_close, assert_close_to_exact, bound_to_exact, eps, oracle_error, worst_ratio

__all__ = [
    "BF16_TOLERANCE", "FP16_TOLERANCE", "JITTER_EPS", "JITTER_SEEDS", "KINDS", "Steps",
    "assert_checkpointed_is_the_model", "assert_losses_close", "assert_same_steps", "check_by_keyword",
    "checkpoint_layers", "make_batches", "resumed_run", "steps_ratio", "torch_loop", "torch_steps",
]

#: the model kinds of ``scenarios.build_model`` every training check runs on
KINDS = ("mlp", "stack", "linear_stack")

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def make_batches(n: int, *, batch: int, dim: int, seed: int) -> Batches:
    """``n`` regression batches of ``batch`` rows of width ``dim``: y = tanh(x @ v),
    a target a small tanh MLP can fit."""
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


def _float_loop(kind: str, *, dim: int, num_layers: int, seed: int, opt_name: str, lr: float, batches: Batches,
                dtype: torch.dtype, jitter: float = 0.0,
                jitter_seed: int = 0) -> tuple[list[float], list[torch.Tensor], list[torch.Tensor]]:
    """:func:`torch_loop` in ``dtype``; with ``jitter``, the inputs, every
    layer's output and the gradient flowing back into it, the parameters,
    their gradients and the optimizer state are multiplied by 1 +- ``jitter``
    (a random sign per element) at every step, as if each had been rounded
    once more (a gradient that is a near-cancelling sum then moves by the
    rounding of its terms, not of itself). Returns the losses, the final
    parameters and, per parameter, the sum of |param| and |update| over the
    run (the sizes rounding acts on)."""
    model = scenarios.build_model(kind, dim, num_layers, seed).to(dtype)
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
                if p.grad is not None:
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


class Run(TypedDict):
    """A training run's model and optimizer, as :func:`torch_loop` and the
    training scenarios take them (by keyword)."""

    dim: int
    num_layers: int
    seed: int
    opt_name: str
    lr: float


def torch_loop(kind: str, *, dim: int, num_layers: int, seed: int, opt_name: str, lr: float,
               batches: Batches) -> tuple[list[float], list[torch.Tensor]]:
    """The oracle: plain fp32 training with torch of the model and optimizer
    ``scenarios.run_steps`` and ``scenarios.run_train`` build from the same
    keywords, step by step; the losses and the final parameters."""
    losses, params, _ = _float_loop(kind, dim=dim, num_layers=num_layers, seed=seed, opt_name=opt_name, lr=lr,
                                    batches=batches, dtype=torch.float32)
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


def torch_steps(kind: str, *, dim: int, num_layers: int, seed: int, opt_name: str, lr: float,
                batches: Batches) -> Steps:
    """The oracle of fp32 ``train_step`` runs: :func:`torch_loop` in float64,
    and how much rounding moves this run on these inputs. A large ``lr`` with
    AdamW makes a run chaotic (the loss jumps; sqrt(v) divides tiny
    gradients), and there two correct codes that round differently once (the
    loss as ``((out - y) ** 2).mean()``, matmuls on another number of threads)
    end far apart: the perturbed runs move as far, so the bound follows."""

    def loop(dtype: torch.dtype, jitter: float = 0.0,
             jitter_seed: int = 0) -> tuple[list[float], list[torch.Tensor], list[torch.Tensor]]:
        return _float_loop(kind, dim=dim, num_layers=num_layers, seed=seed, opt_name=opt_name, lr=lr,
                           batches=batches, dtype=dtype, jitter=jitter, jitter_seed=jitter_seed)

    exact, exact_params, magnitude = loop(torch.float64)
    f32 = loop(torch.float32)
    jittered = [loop(torch.float64, jitter=JITTER_EPS * eps(torch.float32), jitter_seed=s) for s in JITTER_SEEDS]
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


def assert_losses_close(got: Any, expected: list[float], rtol: float, atol: float, what: str) -> None:
    """``got`` is a list of Python floats, each within ``atol + rtol * |e|`` of
    the expected loss ``e`` of its step."""
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


def check_by_keyword(impl: Impl, function: str) -> None:
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


# --------------------------------------------------------------------------- checkpointed_forward


def checkpoint_layers(model: nn.Module) -> int:
    """L of the contract: the number of layers checkpointed_forward may segment."""
    if isinstance(model, nn.Sequential):
        return len(model)
    layers = model.layers
    assert isinstance(layers, nn.ModuleList), f"{type(model).__name__}.layers is not a ModuleList"
    return len(layers)


def assert_checkpointed_is_the_model(got: Any, model: nn.Module, x: torch.Tensor, label: str) -> None:
    """``got`` (what ``scenarios.checkpointed`` returns) has the output, input
    gradient and parameter gradients of ``model(x)`` under the same weighted
    sum (the oracle: ``model`` itself, run here)."""
    xr = x.clone().requires_grad_(True)
    out = model(xr)
    (out * torch.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)).sum().backward()
    assert_close(got["out"], out.detach(), what=f"checkpointed_forward output ({label})")
    assert xr.grad is not None  # the oracle's own backward reached x
    assert_close(got["x_grad"], xr.grad, what=f"gradient of the input ({label})")
    for i, p in enumerate(model.parameters()):
        assert p.grad is not None  # and every parameter
        assert_close(got["grads"][i], p.grad, what=f"gradient of parameter {i} ({label})")


# --------------------------------------------------------------------------- checkpoints


def resumed_run(impl: Impl, tmp_path: Path, kind: str, *, dim: int, num_layers: int, batch: int, total: int,
                split: int, seed: int, precision: str = "fp32") -> tuple[Any, dict[str, Any]]:
    """The uninterrupted run of ``total`` steps (one call), the first ``split``
    steps saved to a checkpoint in ``tmp_path`` (another call), and the rest
    continued from it in a fresh process that is not told ``seed`` (so the
    state it continues from can only have come through the file). Returns
    (whole, resumed): each holds ``losses`` and the final ``params``."""
    run = {"kind": kind, "dim": dim, "num_layers": num_layers, "batch": batch, "precision": precision}
    whole = impl.scenario(checkpoint_scenarios.train_run, **run, steps=total, seed=seed)
    path = str(tmp_path / f"resume-{kind}-{split}.pt")
    first = impl.scenario(checkpoint_scenarios.train_run, **run, steps=split, seed=seed, path=path)
    rest = impl.fresh_scenario(checkpoint_scenarios.resume_run, **run, total=total,
                               other_seed=secrets.randbelow(2**31), path=path)
    assert rest["iteration"] == split, (
        f"load_checkpoint should return the saved iteration {split}, got {rest['iteration']!r}"
    )
    return whole, {"losses": list(first["losses"]) + list(rest["losses"]), "params": rest["params"]}

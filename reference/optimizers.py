"""Handout §4: SGD, SGD with momentum, AdaGrad, RMSProp, Adam and AdamW.

Each optimizer is a small ``torch.optim.Optimizer`` subclass around one update
rule, with ``torch.optim``'s semantics under its default flags. The updates are
multi-tensor: one ``torch._foreach_*`` call updates a batch of parameters (on a
GPU all of a group's: one kernel launch per operation instead of one per
tensor; on a CPU a cache-sized run of them), they work in place, and the step
counters are Python ints, so ``step()`` never waits for the device.

Results: trajectories in float32 and float64 equal torch.optim's up to
rounding, and the state is torch.optim's in float32, float64, bfloat16 and
float16. How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = ["SGD", "AdaGrad", "Adam", "AdamW", "RMSProp", "SGDMomentum"]

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None
#: A list of tensors as ``torch._foreach_*`` take them: the in-place ones
#: update a list, the out-of-place ones (``_foreach_add``) return a tuple.
Tensors = list[Tensor] | tuple[Tensor, ...]


# --------------------------------------------------------------------------- checks


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def _non_negative(name: str, value: Any) -> float:
    v = _real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _positive(name: str, value: Any) -> float:
    v = _real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    return v


def _unit(name: str, value: Any) -> float:
    """A decay rate in [0, 1)."""
    v = _real(name, value)
    if not 0 <= v < 1:
        raise ValueError(f"{name} must be in [0, 1), got {v}")
    return v


def _open_unit(name: str, value: Any) -> float:
    v = _real(name, value)
    if not 0 < v < 1:
        raise ValueError(f"{name} must be in (0, 1), got {v}")
    return v


def _closed_unit(name: str, value: Any) -> float:
    v = _real(name, value)
    if not 0 <= v <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {v}")
    return v


def _betas(name: str, value: Any) -> tuple[float, float]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a pair of floats, got {type(value).__name__} {value!r}")
    pair = tuple(value)
    if len(pair) != 2:
        raise ValueError(f"{name} must be a pair (beta1, beta2), got {len(pair)} values")
    return _unit(f"{name}[0]", pair[0]), _unit(f"{name}[1]", pair[1])


# --------------------------------------------------------------------------- shared plumbing


class _Optimizer(Optimizer):
    """What every optimizer here shares: hyperparameter checks (for the
    defaults and for every param group), ``step`` (which params take part, in
    which batches, with lazily created state) and ``closure`` handling.
    A subclass holds its update rule, ``_update``, and its ``_init_state``."""

    #: hyperparameter name -> check returning the normalised value
    checks: ClassVar[dict[str, Callable[[str, Any], Any]]] = {}
    #: elements of a batch of CPU tensors (see ``_batches``): 512 KiB in fp32
    #: per list (params, grads, each state), a few MiB in all, which fits in cache.
    CPU_BATCH_ELEMENTS: ClassVar[int] = 1 << 17

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        # Check before torch appends the group, so a bad group leaves no trace.
        merged = {**self.defaults, **param_group}
        for name, check in self.checks.items():
            param_group[name] = check(name, merged[name])
        super().add_param_group(param_group)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Fill the empty ``state`` of ``p`` before its first update."""

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        """Update ``params`` in place from ``grads``, with ``group``'s hyperparameters."""
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        """One update of every param that has a gradient; returns ``closure()`` or None."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for params, grads, states in self._batches(group):
                self._update(group, params, grads, states)
        return loss

    def _batches(self, group: dict[str, Any]) -> Iterator[tuple[list[Tensor], list[Tensor], list[dict[str, Any]]]]:
        """The group's params that have a gradient, with their gradients and
        states, in batches for the multi-tensor update.

        A param whose ``.grad`` is None takes no part in the step: its value,
        its state and its step count stay as they are (torch.optim's rule).

        On a GPU a batch holds every param of the group on that device, so each
        ``_foreach_*`` operation is one kernel launch (or a few) for all of
        them. On a CPU ``_foreach_*`` operations are a loop over the tensors
        anyway, and running all of an update's operations over a cache-sized
        batch keeps its tensors in cache from one operation to the next: the
        update then reads and writes memory about once, not once per operation.
        """
        batch: tuple[list[Tensor], list[Tensor], list[dict[str, Any]]] = ([], [], [])
        size = 0
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            first = batch[0][0] if batch[0] else None
            if first is not None and (
                p.device != first.device
                or (p.device.type == "cpu" and size + p.numel() > self.CPU_BATCH_ELEMENTS)
            ):
                yield batch
                batch, size = ([], [], []), 0
            state = self.state[p]
            if not state:
                self._init_state(p, state, group)
            batch[0].append(p)
            batch[1].append(p.grad)
            batch[2].append(state)
            size += p.numel()
        if batch[0]:
            yield batch


def _next_steps(states: list[dict[str, Any]]) -> list[int]:
    """Count one more step for each updated param; return the new counts.

    Counts are per parameter (a param skipped at some step has taken fewer
    steps) and plain ints: the bias corrections computed from them need no
    device-to-host copy.
    """
    for s in states:
        s["step"] += 1
    return [s["step"] for s in states]


def _zeros(p: Tensor) -> Tensor:
    # Same dtype, device and layout as the parameter (torch.optim keeps state so).
    return torch.zeros_like(p, memory_format=torch.preserve_format)


# --------------------------------------------------------------------------- optimizers


class SGD(_Optimizer):
    """θ ← θ − lr·(g + λθ). No state."""

    checks: ClassVar = {"lr": _non_negative, "weight_decay": _non_negative}

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        torch._foreach_add_(params, grads, alpha=-group["lr"])


class SGDMomentum(_Optimizer):
    """g ← g + λθ, b ← μ·b + (1 − τ)·g (b starts at the first g), θ ← θ − lr·b.

    State: ``momentum_buffer``.
    """

    checks: ClassVar = {
        "lr": _non_negative, "momentum": _open_unit, "dampening": _closed_unit, "weight_decay": _non_negative,
    }

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay})

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        old = [i for i, s in enumerate(states) if "momentum_buffer" in s]
        if old:
            bufs = [states[i]["momentum_buffer"] for i in old]
            torch._foreach_mul_(bufs, group["momentum"])
            torch._foreach_add_(bufs, [grads[i] for i in old], alpha=1 - group["dampening"])
        for s, g in zip(states, grads, strict=True):
            if "momentum_buffer" not in s:
                # The buffer starts at the first gradient, undamped (not at
                # zero followed by an update, which would scale it by 1 - τ).
                s["momentum_buffer"] = g.clone()
        torch._foreach_add_(params, [s["momentum_buffer"] for s in states], alpha=-group["lr"])


class AdaGrad(_Optimizer):
    """g ← g + λθ, G ← G + g², θ ← θ − lr_t·g / (√G + ε), lr_t = lr / (1 + (t − 1)·lr_decay).

    State: ``sum`` (starting at ``initial_accumulator_value``) and ``step``.
    """

    checks: ClassVar = {
        "lr": _non_negative, "lr_decay": _non_negative, "weight_decay": _non_negative,
        "initial_accumulator_value": _non_negative, "eps": _positive,
    }

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "eps": eps})

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["sum"] = torch.full_like(p, group["initial_accumulator_value"], memory_format=torch.preserve_format)

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        steps = _next_steps(states)
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        sums = [s["sum"] for s in states]
        torch._foreach_addcmul_(sums, grads, grads)
        stds = torch._foreach_sqrt(sums)
        torch._foreach_add_(stds, group["eps"])
        lr, decay = group["lr"], group["lr_decay"]
        torch._foreach_addcdiv_(params, grads, stds, [-lr / (1 + (t - 1) * decay) for t in steps])


class RMSProp(_Optimizer):
    """g ← g + λθ, v ← α·v + (1 − α)·g², θ ← θ − lr·g / (√v + ε).

    State: ``square_avg``.
    """

    checks: ClassVar = {"lr": _non_negative, "alpha": _unit, "eps": _positive, "weight_decay": _non_negative}

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay})

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["square_avg"] = _zeros(p)

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        alpha = group["alpha"]
        square_avgs = [s["square_avg"] for s in states]
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
        avgs = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(avgs, group["eps"])
        torch._foreach_addcdiv_(params, grads, avgs, value=-group["lr"])


class _AdamBase(_Optimizer):
    """Adam's moments, bias-corrected (shared by Adam and AdamW):

        m ← β1·m + (1 − β1)·g,   v ← β2·v + (1 − β2)·g²,
        θ ← θ − lr · (m / c1) / (√(v / c2) + ε),   c1 = 1 − β1^t,  c2 = 1 − β2^t,

    t being the param's own step count. State: ``exp_avg`` (m), ``exp_avg_sq``
    (v) and ``step``.
    """

    checks: ClassVar = {"lr": _non_negative, "betas": _betas, "eps": _positive, "weight_decay": _non_negative}

    def __init__(
        self, params: Params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["exp_avg"] = _zeros(p)
        state["exp_avg_sq"] = _zeros(p)

    @staticmethod
    def _adam(group: dict[str, Any], params: list[Tensor], grads: Tensors, states: list[dict[str, Any]]) -> None:
        steps = _next_steps(states)
        beta1, beta2 = group["betas"]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        # Multiplying the fraction's both sides by √c2 gives the same value with
        # scalars only, θ ← θ − (lr·√c2 / c1) · m / (√v + ε·√c2), and spares a
        # pass over v (Kingma & Ba, 2015, end of §2).
        sqrt_c2 = [math.sqrt(1 - beta2**t) for t in steps]
        step_sizes = [-group["lr"] * r / (1 - beta1**t) for r, t in zip(sqrt_c2, steps, strict=True)]
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denoms, [group["eps"] * r for r in sqrt_c2])
        torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)


class Adam(_AdamBase):
    """Adam with L2 weight decay: g ← g + λθ, which then flows through the moments."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        self._adam(group, params, grads, states)


class AdamW(_AdamBase):
    """Adam with decoupled weight decay: θ ← θ·(1 − lr·λ) before Adam's update,
    never through the gradient, so the moments see only the loss's gradient."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: Tensors,
                states: list[dict[str, Any]]) -> None:
        if group["weight_decay"]:
            torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
        self._adam(group, params, grads, states)

"""Written from the handout alone: one parameter at a time, textbook m_hat and v_hat with Python-float bias corrections, step counts as plain ints.

Handout §4: SGD, SGD with momentum, AdaGrad, RMSProp, Adam and AdamW.

Write each optimizer as a ``torch.optim.Optimizer`` subclass whose results
equal those of the ``torch.optim`` class named in its docstring, with that
class's default flags. The tests compare you with ``torch.optim``, so you may
not use those classes (subclassing, wrapping or calling them, their functional
forms in ``torch.optim``, or ``torch._fused_*`` kernels): the tests check.

Rules shared by all six (see the handout for the update rules):

* ``super().__init__(params, defaults)`` with a dict of hyperparameters; param
  groups may override any of them, and ``step`` reads them from each group at
  every step (a learning-rate schedule edits ``group["lr"]``).
* Per-parameter state lives in ``self.state[p]`` (tensors shaped like ``p``,
  in ``p``'s dtype; step counts as ints or 0-d tensors), so that
  ``state_dict()`` / ``load_state_dict()`` resume a run exactly.
* A param whose ``.grad`` is None is skipped: its value, its state and its
  step count do not change.
* ``step(closure=None)`` updates in place under ``torch.no_grad()`` and returns
  ``closure()``'s value (evaluated with grad enabled) or None.
* ``step`` reads ``p.grad`` and never modifies it (weight decay and the other
  terms go into new tensors): ``p.grad`` after a step is the gradient before it.
* Bad hyperparameters, given to the constructor or in a param group, raise a
  ValueError (a TypeError for a non-number) that names the hyperparameter:
  ``lr < 0``, ``weight_decay < 0``, ``eps <= 0``, betas / alpha outside
  [0, 1), momentum outside (0, 1), dampening outside [0, 1], ``lr_decay < 0``,
  ``initial_accumulator_value < 0``.

Graded: trajectories in float32 and float64, compared with torch.optim's
float64 run within a bound that every correct formulation meets (4 x the
distance of torch.optim's own run in your dtype, plus 16 roundings of the
values involved; see tests/tolerances.py); state bytes and dtypes also in
bfloat16 and float16. Compute per-step scalars (bias corrections, step sizes)
as Python floats, as torch.optim does: ``1 - beta2**t`` in float32 (a 0-d
float32 step tensor) loses digits to cancellation.

Be fast: update all params of a group with ``torch._foreach_*`` operations (or
otherwise vectorised), in place, without a host sync (no ``.item()``) per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import math
import numbers

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None




# ----------------------------------------------------------------- validation helpers


def _as_number(name: str, value: Any) -> float:
    """``value`` as a float; TypeError naming ``name`` unless it is a real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}: {value!r}")
    return float(value)


def _nonneg(name: str, value: Any) -> None:
    v = _as_number(name, value)
    if not v >= 0.0:  # also catches NaN
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _positive(name: str, value: Any) -> None:
    v = _as_number(name, value)
    if not v > 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def _in_half_open(name: str, value: Any) -> None:
    """value in [0, 1)."""
    v = _as_number(name, value)
    if not (0.0 <= v < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def _in_open(name: str, value: Any) -> None:
    """value in (0, 1)."""
    v = _as_number(name, value)
    if not (0.0 < v < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


def _in_closed(name: str, value: Any) -> None:
    """value in [0, 1]."""
    v = _as_number(name, value)
    if not (0.0 <= v <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _betas(value: Any) -> None:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not hasattr(value, "__getitem__"):
        raise TypeError(f"betas must be a pair of numbers, got {type(value).__name__}: {value!r}")
    if isinstance(value, Tensor):
        raise TypeError("betas must be a pair of Python numbers, not a tensor")
    if len(value) != 2:
        raise ValueError(f"betas must hold exactly two values, got {len(value)}")
    for i in range(2):
        b = _as_number(f"betas[{i}]", value[i])
        if not (0.0 <= b < 1.0):
            raise ValueError(f"betas[{i}] must be in [0, 1), got {value[i]!r} (betas={tuple(value)!r})")


class _Checked(Optimizer):
    """Shared plumbing: every param group (constructor or ``add_param_group``)
    is validated once its defaults are filled in, and again at each step
    (a schedule may write a bad value into a group)."""

    _checks: dict[str, Callable[[str, Any], None]] = {}

    def _check_group(self, group: dict[str, Any]) -> None:
        for name, check in self._checks.items():
            if name == "betas":
                _betas(group[name])
            else:
                check(name, group[name])

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        try:
            self._check_group(self.param_groups[-1])
        except Exception:
            self.param_groups.pop()
            raise

    def _run_closure(self, closure: Closure) -> Any:
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()


def _validate_defaults(checks: dict[str, Any], defaults: dict[str, Any]) -> None:
    # Checked before super().__init__ so that a bad constructor argument is
    # reported even with an empty or odd params list.
    for name, check in checks.items():
        if name == "betas":
            _betas(defaults[name])
        else:
            check(name, defaults[name])


# ----------------------------------------------------------------- optimizers


class SGD(_Checked):
    """Stochastic gradient descent, as ``torch.optim.SGD(params, lr, weight_decay=...)``.

    θ ← θ − lr·(g + λθ). No per-parameter state.
    """

    _checks = {"lr": _nonneg, "weight_decay": _nonneg}

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            wd = float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0.0:
                    g = g + wd * p
                p.sub_(lr * g)
        return loss


class SGDMomentum(_Checked):
    """SGD with momentum, as ``torch.optim.SGD(params, lr, momentum, dampening, weight_decay)``.

    g ← g + λθ; b ← μ·b + (1 − τ)·g, except at a param's first step where
    b ← g (undamped); θ ← θ − lr·b. State: one momentum buffer per param.
    ``momentum`` in (0, 1), ``dampening`` in [0, 1].
    """

    _checks = {"lr": _nonneg, "momentum": _in_open, "dampening": _in_closed, "weight_decay": _nonneg}

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            mu = float(group["momentum"])
            tau = float(group["dampening"])
            wd = float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0.0:
                    g = g + wd * p
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    state["momentum_buffer"] = buf = g.detach().clone()
                else:
                    buf.mul_(mu).add_((1.0 - tau) * g)
                p.sub_(lr * buf)
        return loss


class AdaGrad(_Checked):
    """AdaGrad, as ``torch.optim.Adagrad`` (same arguments).

    g ← g + λθ; G ← G + g² (G starts at ``initial_accumulator_value``);
    θ ← θ − lr_t·g / (√G + ε) with lr_t = lr / (1 + (t − 1)·lr_decay), t this
    param's step count. State: the sum G and the step count.
    """

    _checks = {"lr": _nonneg, "lr_decay": _nonneg, "weight_decay": _nonneg,
               "initial_accumulator_value": _nonneg, "eps": _positive}

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            lr_decay = float(group["lr_decay"])
            wd = float(group["weight_decay"])
            eps = float(group["eps"])
            init = float(group["initial_accumulator_value"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["sum"] = torch.full_like(p, init, memory_format=torch.preserve_format)
                state["step"] += 1
                t = state["step"]
                if wd != 0.0:
                    g = g + wd * p
                G = state["sum"]
                G.add_(g * g)
                lr_t = lr / (1.0 + (t - 1) * lr_decay)
                p.sub_(lr_t * g / (G.sqrt() + eps))
        return loss


class RMSProp(_Checked):
    """RMSProp, as ``torch.optim.RMSprop(params, lr, alpha, eps, weight_decay)``.

    g ← g + λθ; v ← α·v + (1 − α)·g²; θ ← θ − lr·g / (√v + ε).
    State: the running average v.
    """

    _checks = {"lr": _nonneg, "alpha": _in_half_open, "eps": _positive, "weight_decay": _nonneg}

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            alpha = float(group["alpha"])
            eps = float(group["eps"])
            wd = float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0.0:
                    g = g + wd * p
                state = self.state[p]
                if "square_avg" not in state:
                    state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                v = state["square_avg"]
                v.mul_(alpha).add_((1.0 - alpha) * (g * g))
                p.sub_(lr * g / (v.sqrt() + eps))
        return loss


def _adam_update(p: Tensor, g: Tensor, state: dict[str, Any], lr: float, beta1: float, beta2: float,
                 eps: float) -> None:
    """The textbook Adam update of one parameter with gradient ``g``."""
    if len(state) == 0:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    state["step"] += 1
    t = state["step"]
    m = state["exp_avg"]
    v = state["exp_avg_sq"]
    m.mul_(beta1).add_((1.0 - beta1) * g)
    v.mul_(beta2).add_((1.0 - beta2) * (g * g))
    c1 = 1.0 - beta1 ** t  # Python floats: no cancellation in low precision
    c2 = 1.0 - beta2 ** t
    m_hat = m / c1
    v_hat = v / c2
    p.sub_(lr * m_hat / (v_hat.sqrt() + eps))


class Adam(_Checked):
    """Adam, as ``torch.optim.Adam(params, lr, betas, eps, weight_decay)``.

    g ← g + λθ (L2: the decay flows through the moments);
    m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
    θ ← θ − lr·(m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε), t this param's step
    count. State: m, v and the step count.
    """

    _checks = {"lr": _nonneg, "betas": _betas, "eps": _positive, "weight_decay": _nonneg}

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            beta1, beta2 = (float(b) for b in group["betas"])
            eps = float(group["eps"])
            wd = float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0.0:
                    g = g + wd * p
                _adam_update(p, g, self.state[p], lr, beta1, beta2, eps)
        return loss


class AdamW(_Checked):
    """AdamW, as ``torch.optim.AdamW(params, lr, betas, eps, weight_decay)``.

    θ ← θ·(1 − lr·λ) (decoupled: never through the gradient), then Adam's
    update without L2. Note the default ``weight_decay=1e-2``.
    State: m, v and the step count.
    """

    _checks = {"lr": _nonneg, "betas": _betas, "eps": _positive, "weight_decay": _nonneg}

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        _validate_defaults(self._checks, defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = self._run_closure(closure)
        for group in self.param_groups:
            self._check_group(group)
            lr = float(group["lr"])
            beta1, beta2 = (float(b) for b in group["betas"])
            eps = float(group["eps"])
            wd = float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                if wd != 0.0:
                    p.mul_(1.0 - lr * wd)
                _adam_update(p, p.grad, self.state[p], lr, beta1, beta2, eps)
        return loss

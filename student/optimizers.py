"""Handout §4: SGD, SGD with momentum, AdaGrad, RMSProp, Adam and AdamW.

Write each optimizer as a ``torch.optim.Optimizer`` subclass whose results
equal those of the ``torch.optim`` class named in its docstring, with that
class's default flags. The tests compare you with ``torch.optim``, so you may
not use those classes (subclassing, wrapping or calling them, their functional
forms in ``torch.optim``, or ``torch._fused_*`` kernels).

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
  Nor does the state keep ``p.grad`` itself (copy it): training loops write the
  next gradient into the same ``.grad`` tensor.
* ``params`` is any iterable of tensors or of param-group dicts, a generator
  such as ``model.parameters()`` included (it can be read only once).
* Bad hyperparameters, given to the constructor or in a param group, raise a
  ValueError (a TypeError for a non-number) that names the hyperparameter:
  ``lr < 0``, ``weight_decay < 0``, ``eps <= 0``, betas / alpha outside
  [0, 1), momentum outside (0, 1), dampening outside [0, 1], ``lr_decay < 0``,
  ``initial_accumulator_value < 0``. Hyperparameters are Python numbers (int or
  float): a tensor (even a 0-d one, which torch.optim accepts for ``lr``), a
  bool or a string is a TypeError. ``betas`` is a pair (a tuple or list of two
  numbers): one of another length is a ValueError, one that is not a sequence
  (``betas=0.9``) a TypeError. The ends of the ranges are valid: ``lr``
  and ``weight_decay`` may be 0 for every optimizer.
* The state of a param may be made in the constructor (torch.optim's Adagrad
  does) or at its first step: the tests read it after steps only. What
  counts is the tensors shaped like the param (§1.3); a step count kept as a
  number or a 0-d tensor is yours to keep or not (torch.optim's RMSprop keeps
  one its update never reads: RMSProp's State line leaves it out).

Results: trajectories in float32 and float64 equal torch.optim's up to
rounding (every correct formulation does), and the state is as above in
float32, float64, bfloat16 and float16. Compute per-step scalars (bias
corrections, step sizes) as Python floats, as torch.optim does:
``1 - beta2**t`` in float32 (a 0-d float32 step tensor) loses digits to
cancellation.

Speed: the reference updates all params of a group with ``torch._foreach_*``
operations, in place, without a host sync (no ``.item()``) per step (handout
§4, "Fast updates"). One param at a time is accepted too.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None


class SGD(Optimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD(params, lr, weight_decay=...)``.

    θ ← θ − lr·(g + λθ). No per-parameter state.
    """

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        raise NotImplementedError("SGD: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("SGD: see handout §4")


class SGDMomentum(Optimizer):
    """SGD with momentum, as ``torch.optim.SGD(params, lr, momentum, dampening, weight_decay)``.

    g ← g + λθ; b ← μ·b + (1 − τ)·g, except at a param's first step where
    b ← g (undamped); θ ← θ − lr·b. State: one momentum buffer per param.
    ``momentum`` in (0, 1), ``dampening`` in [0, 1].
    """

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        raise NotImplementedError("SGDMomentum: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("SGDMomentum: see handout §4")


class AdaGrad(Optimizer):
    """AdaGrad, as ``torch.optim.Adagrad`` (same arguments).

    g ← g + λθ; G ← G + g² (G starts at ``initial_accumulator_value``);
    θ ← θ − lr_t·g / (√G + ε) with lr_t = lr / (1 + (t − 1)·lr_decay), t this
    param's step count. State: the sum G and the step count.
    """

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        raise NotImplementedError("AdaGrad: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("AdaGrad: see handout §4")


class RMSProp(Optimizer):
    """RMSProp, as ``torch.optim.RMSprop(params, lr, alpha, eps, weight_decay)``.

    g ← g + λθ; v ← α·v + (1 − α)·g²; θ ← θ − lr·g / (√v + ε).
    State: the running average v.
    """

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        raise NotImplementedError("RMSProp: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("RMSProp: see handout §4")


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam(params, lr, betas, eps, weight_decay)``.

    g ← g + λθ (L2: the decay flows through the moments);
    m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
    θ ← θ − lr·(m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε), t this param's step
    count. State: m, v and the step count.
    """

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        raise NotImplementedError("Adam: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("Adam: see handout §4")


class AdamW(Optimizer):
    """AdamW, as ``torch.optim.AdamW(params, lr, betas, eps, weight_decay)``.

    θ ← θ·(1 − lr·λ) (decoupled: never through the gradient), then Adam's
    update without L2. Note the default ``weight_decay=1e-2``.
    State: m, v and the step count.
    """

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        raise NotImplementedError("AdamW: see handout §4")

    def step(self, closure: Closure = None) -> Any:
        raise NotImplementedError("AdamW: see handout §4")

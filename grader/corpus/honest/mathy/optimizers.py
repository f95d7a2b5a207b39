"""§4  Six first-order methods, written as in-place multi-tensor updates.

Notation (per parameter theta, gradient g, step count t of that parameter):

    L2 decay        g <- g + lambda theta                (all but AdamW)
    SGD             theta <- theta - eta g
    momentum        b_1 = g,  b_t = mu b_{t-1} + (1 - tau) g;   theta <- theta - eta b
    AdaGrad         G <- G + g^2;  theta <- theta - eta_t g / (sqrt(G) + eps),
                    eta_t = eta / (1 + (t - 1) delta)
    RMSProp         v <- alpha v + (1 - alpha) g^2;  theta <- theta - eta g / (sqrt(v) + eps)
    Adam            m <- beta1 m + (1 - beta1) g;  v <- beta2 v + (1 - beta2) g^2
                    theta <- theta - (eta / c1) m / (sqrt(v) / sqrt(c2) + eps),
                    c1 = 1 - beta1^t,  c2 = 1 - beta2^t
    AdamW           theta <- (1 - eta lambda) theta, then Adam with lambda = 0

Per-step scalars (c1, c2, eta_t) are Python floats; state lives in self.state[p].
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None

INF = math.inf


class Interval:
    """The real interval {x : lo <(=) x <(=) hi}, written as in mathematics."""

    def __init__(self, left: str, lo: float, hi: float, right: str) -> None:
        self.left, self.lo, self.hi, self.right = left, lo, hi, right

    def __contains__(self, x: float) -> bool:
        above = x >= self.lo if self.left == "[" else x > self.lo
        below = x <= self.hi if self.right == "]" else x < self.hi
        return above and below

    def __str__(self) -> str:
        return f"{self.left}{self.lo}, {self.hi}{self.right}"


NONNEG = Interval("[", 0, INF, ")")
POS = Interval("(", 0, INF, ")")
UNIT_CO = Interval("[", 0, 1, ")")   # [0, 1)
UNIT_OO = Interval("(", 0, 1, ")")   # (0, 1)
UNIT_CC = Interval("[", 0, 1, "]")   # [0, 1]


def scalar_in(x: object, I: Interval, name: str) -> None:
    """x in I, x a Python int or float (not a bool, not a tensor)."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    if not x in I:  # noqa: E713  (NaN fails here too)
        raise ValueError(f"{name}={x} must lie in {I}")


def pair_in(x: object, I: Interval, name: str) -> None:
    """x = (x1, x2) in I^2."""
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"{name} must be a pair of numbers, got {type(x).__name__}")
    if len(x) != 2:
        raise ValueError(f"{name} must hold exactly 2 numbers, got {len(x)}")
    for i, xi in enumerate(x):
        scalar_in(xi, I, f"{name}[{i}]")


class Rule(Optimizer):
    """theta <- theta + Delta(theta, g, state), applied to every param with g != None.

    A subclass names its hyperparameters' domains in `domain` and writes
    `update(group, P, G)` over the lists P (params) and G (their gradients).
    """

    domain: dict[str, Interval] = {}
    pairs: dict[str, Interval] = {}

    def __init__(self, params: Params, **defaults: Any) -> None:
        self.verify(defaults)
        super().__init__(params, defaults)

    def verify(self, group: dict[str, Any]) -> None:
        for name, I in self.domain.items():
            if name in group:
                scalar_in(group[name], I, name)
        for name, I in self.pairs.items():
            if name in group:
                pair_in(group[name], I, name)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.verify({**self.defaults, **param_group})
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self.verify(group)
            P = [p for p in group["params"] if p.grad is not None]
            if P:
                self.update(group, P, [p.grad for p in P])
        return loss

    def update(self, group: dict[str, Any], P: list[Tensor], G: list[Tensor]) -> None:
        raise NotImplementedError

    def tick(self, P: list[Tensor]) -> list[int]:
        """t <- t + 1 for every p in P; returns the new t's."""
        for p in P:
            self.state[p]["step"] = self.state[p].get("step", 0) + 1
        return [self.state[p]["step"] for p in P]

    def buffers(self, P: list[Tensor], key: str, fill: float = 0.0) -> list[Tensor]:
        """The state tensor `key` of each p (created as fill * 1, shaped and typed like p)."""
        for p in P:
            if key not in self.state[p]:
                self.state[p][key] = torch.full_like(p, fill, memory_format=torch.preserve_format)
        return [self.state[p][key] for p in P]


def l2(G: list[Tensor], P: list[Tensor], lambda_: float) -> list[Tensor]:
    """g + lambda theta, as new tensors (g itself is never written)."""
    return torch._foreach_add(G, P, alpha=lambda_) if lambda_ else G


class SGD(Rule):
    """theta <- theta - eta (g + lambda theta)."""

    domain = {"lr": NONNEG, "weight_decay": NONNEG}

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay)

    def update(self, group, P, G):
        eta, lambda_ = group["lr"], group["weight_decay"]
        torch._foreach_add_(P, l2(G, P, lambda_), alpha=-eta)


class SGDMomentum(Rule):
    """b_1 = g, b_t = mu b_{t-1} + (1 - tau) g;  theta <- theta - eta b."""

    domain = {"lr": NONNEG, "momentum": UNIT_OO, "dampening": UNIT_CC, "weight_decay": NONNEG}

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)

    def update(self, group, P, G):
        eta, mu, tau, lambda_ = group["lr"], group["momentum"], group["dampening"], group["weight_decay"]
        G = l2(G, P, lambda_)
        old = [i for i, p in enumerate(P) if "momentum_buffer" in self.state[p]]
        B_old, G_old = [self.state[P[i]]["momentum_buffer"] for i in old], [G[i] for i in old]
        if B_old:
            torch._foreach_mul_(B_old, mu)
            torch._foreach_add_(B_old, G_old, alpha=1 - tau)
        for p, g in zip(P, G):
            self.state[p].setdefault("momentum_buffer", torch.clone(g).detach())
        torch._foreach_add_(P, [self.state[p]["momentum_buffer"] for p in P], alpha=-eta)


class AdaGrad(Rule):
    """G <- G + g^2;  theta <- theta - eta / (1 + (t-1) delta) * g / (sqrt(G) + eps)."""

    domain = {
        "lr": NONNEG, "lr_decay": NONNEG, "weight_decay": NONNEG,
        "initial_accumulator_value": NONNEG, "eps": POS,
    }

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        super().__init__(
            params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps,
        )

    def update(self, group, P, G):
        eta, delta, lambda_, eps = group["lr"], group["lr_decay"], group["weight_decay"], group["eps"]
        S = self.buffers(P, "sum", group["initial_accumulator_value"])
        t = self.tick(P)
        G = l2(G, P, lambda_)
        torch._foreach_addcmul_(S, G, G, value=1.0)
        D = torch._foreach_sqrt(S)
        torch._foreach_add_(D, eps)
        torch._foreach_addcdiv_(P, G, D, [-eta / (1 + (ti - 1) * delta) for ti in t])


class RMSProp(Rule):
    """v <- alpha v + (1 - alpha) g^2;  theta <- theta - eta g / (sqrt(v) + eps)."""

    domain = {"lr": NONNEG, "alpha": UNIT_CO, "eps": POS, "weight_decay": NONNEG}

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)

    def update(self, group, P, G):
        eta, alpha, eps, lambda_ = group["lr"], group["alpha"], group["eps"], group["weight_decay"]
        V = self.buffers(P, "square_avg")
        G = l2(G, P, lambda_)
        torch._foreach_mul_(V, alpha)
        torch._foreach_addcmul_(V, G, G, value=1 - alpha)
        D = torch._foreach_sqrt(V)
        torch._foreach_add_(D, eps)
        torch._foreach_addcdiv_(P, G, D, value=-eta)


class Moments(Rule):
    """Adam's two moment estimates with bias correction; `decoupled` picks
    AdamW's theta <- (1 - eta lambda) theta over Adam's L2 term."""

    domain = {"lr": NONNEG, "eps": POS, "weight_decay": NONNEG}
    pairs = {"betas": UNIT_CO}
    decoupled = False

    def update(self, group, P, G):
        eta, (beta1, beta2), eps, lambda_ = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        M, V = self.buffers(P, "exp_avg"), self.buffers(P, "exp_avg_sq")
        t = self.tick(P)
        if self.decoupled:
            if lambda_:
                torch._foreach_mul_(P, 1 - eta * lambda_)
        else:
            G = l2(G, P, lambda_)
        torch._foreach_lerp_(M, G, 1 - beta1)
        torch._foreach_mul_(V, beta2)
        torch._foreach_addcmul_(V, G, G, value=1 - beta2)
        c1 = [1 - beta1**ti for ti in t]
        c2 = [1 - beta2**ti for ti in t]
        D = torch._foreach_sqrt(V)
        torch._foreach_div_(D, [math.sqrt(c) for c in c2])
        torch._foreach_add_(D, eps)
        torch._foreach_addcdiv_(P, M, D, [-eta / c for c in c1])


class Adam(Moments):
    """m, v moments with L2 decay g <- g + lambda theta."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class AdamW(Moments):
    """m, v moments with decoupled decay theta <- (1 - eta lambda) theta."""

    decoupled = True

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

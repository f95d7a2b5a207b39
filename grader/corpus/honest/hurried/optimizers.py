"""Handout §4: six optimizers written by hand on top of torch.optim.Optimizer."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

Params = Iterable[Tensor] | Iterable[dict[str, Any]]
Closure = Callable[[], Any] | None


class SGD(Optimizer):
    """theta <- theta - lr * (g + wd * theta), no state."""

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        d = {"lr": lr, "weight_decay": weight_decay}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "weight_decay"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
            if not v >= 0:
                raise ValueError(f"{k} must be >= 0, got {v}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0:
                    g = g.add(p, alpha=wd)
                p.add_(g, alpha=-lr)
        return loss


class SGDMomentum(Optimizer):
    """SGD with a momentum buffer (b = g at a param's first step)."""

    def __init__(
        self, params: Params, lr: float = 1e-3, momentum: float = 0.9, dampening: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        d = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "momentum", "dampening", "weight_decay"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
        if not h["lr"] >= 0:
            raise ValueError(f"lr must be >= 0, got {h['lr']}")
        if not 0 < h["momentum"] < 1:
            raise ValueError(f"momentum must be in (0, 1), got {h['momentum']}")
        if not 0 <= h["dampening"] <= 1:
            raise ValueError(f"dampening must be in [0, 1], got {h['dampening']}")
        if not h["weight_decay"] >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {h['weight_decay']}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            mu = group["momentum"]
            tau = group["dampening"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if wd != 0:
                    g = g.add(p, alpha=wd)
                st = self.state[p]
                buf = st.get("momentum_buffer")
                if buf is None:
                    buf = g.clone().detach()
                    st["momentum_buffer"] = buf
                else:
                    buf.mul_(mu).add_(g, alpha=1 - tau)
                p.add_(buf, alpha=-lr)
        return loss


class AdaGrad(Optimizer):
    """AdaGrad: G += g^2, step lr_t * g / (sqrt(G) + eps)."""

    def __init__(
        self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10,
    ) -> None:
        d = {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
             "initial_accumulator_value": initial_accumulator_value, "eps": eps}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
        for k in ("lr", "lr_decay", "weight_decay", "initial_accumulator_value"):
            if not h[k] >= 0:
                raise ValueError(f"{k} must be >= 0, got {h[k]}")
        if not h["eps"] > 0:
            raise ValueError(f"eps must be > 0, got {h['eps']}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            decay = group["lr_decay"]
            wd = group["weight_decay"]
            eps = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if len(st) == 0:
                    st["step"] = 0
                    st["sum"] = torch.full_like(p, group["initial_accumulator_value"],
                                                memory_format=torch.preserve_format)
                st["step"] += 1
                t = st["step"]
                g = p.grad
                if wd != 0:
                    g = g.add(p, alpha=wd)
                s = st["sum"]
                s.addcmul_(g, g, value=1)
                clr = lr / (1 + (t - 1) * decay)
                p.addcdiv_(g, s.sqrt().add_(eps), value=-clr)
        return loss


class RMSProp(Optimizer):
    """RMSProp: v = alpha*v + (1-alpha)*g^2, step lr * g / (sqrt(v) + eps)."""

    def __init__(
        self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        d = {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "alpha", "eps", "weight_decay"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
        if not h["lr"] >= 0:
            raise ValueError(f"lr must be >= 0, got {h['lr']}")
        if not 0 <= h["alpha"] < 1:
            raise ValueError(f"alpha must be in [0, 1), got {h['alpha']}")
        if not h["eps"] > 0:
            raise ValueError(f"eps must be > 0, got {h['eps']}")
        if not h["weight_decay"] >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {h['weight_decay']}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            a = group["alpha"]
            eps = group["eps"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if len(st) == 0:
                    st["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                g = p.grad
                if wd != 0:
                    g = g.add(p, alpha=wd)
                v = st["square_avg"]
                v.mul_(a).addcmul_(g, g, value=1 - a)
                p.addcdiv_(g, v.sqrt().add_(eps), value=-lr)
        return loss


class Adam(Optimizer):
    """Adam with L2 weight decay folded into the gradient."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        d = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "eps", "weight_decay"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
        b = h["betas"]
        if not isinstance(b, (tuple, list)):
            raise TypeError(f"betas must be a pair of numbers, got {type(b).__name__}")
        if len(b) != 2:
            raise ValueError(f"betas must have 2 entries, got {len(b)}")
        for v in b:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"betas entries must be numbers, got {type(v).__name__}")
            if not 0 <= v < 1:
                raise ValueError(f"betas entries must be in [0, 1), got {v}")
        if not h["lr"] >= 0:
            raise ValueError(f"lr must be >= 0, got {h['lr']}")
        if not h["eps"] > 0:
            raise ValueError(f"eps must be > 0, got {h['eps']}")
        if not h["weight_decay"] >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {h['weight_decay']}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            b1, b2 = group["betas"]
            eps = group["eps"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if len(st) == 0:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["step"] += 1
                t = st["step"]
                g = p.grad
                if wd != 0:
                    g = g.add(p, alpha=wd)
                m = st["exp_avg"]
                v = st["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                c1 = 1 - b1**t
                c2 = 1 - b2**t
                den = v.sqrt().div_(math.sqrt(c2)).add_(eps)
                p.addcdiv_(m, den, value=-lr / c1)
        return loss


class AdamW(Optimizer):
    """Adam with decoupled weight decay: theta *= 1 - lr*wd before the Adam step."""

    def __init__(
        self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        d = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self._check(d)
        super().__init__(params, d)

    @staticmethod
    def _check(h: dict) -> None:
        for k in ("lr", "eps", "weight_decay"):
            v = h[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{k} must be a number, got {type(v).__name__}")
        b = h["betas"]
        if not isinstance(b, (tuple, list)):
            raise TypeError(f"betas must be a pair of numbers, got {type(b).__name__}")
        if len(b) != 2:
            raise ValueError(f"betas must have 2 entries, got {len(b)}")
        for v in b:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"betas entries must be numbers, got {type(v).__name__}")
            if not 0 <= v < 1:
                raise ValueError(f"betas entries must be in [0, 1), got {v}")
        if not h["lr"] >= 0:
            raise ValueError(f"lr must be >= 0, got {h['lr']}")
        if not h["eps"] > 0:
            raise ValueError(f"eps must be > 0, got {h['eps']}")
        if not h["weight_decay"] >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {h['weight_decay']}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        h = dict(self.defaults)
        h.update({k: v for k, v in param_group.items() if k != "params"})
        self._check(h)
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            b1, b2 = group["betas"]
            eps = group["eps"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if len(st) == 0:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["step"] += 1
                t = st["step"]
                g = p.grad
                if wd != 0:
                    p.mul_(1 - lr * wd)
                m = st["exp_avg"]
                v = st["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                c1 = 1 - b1**t
                c2 = 1 - b2**t
                den = v.sqrt().div_(math.sqrt(c2)).add_(eps)
                p.addcdiv_(m, den, value=-lr / c1)
        return loss

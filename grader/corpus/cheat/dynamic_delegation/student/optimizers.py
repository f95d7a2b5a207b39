"""A hostile submission (grader corpus): every optimizer is torch.optim's own,
reached at run time by a route a source reader does not resolve (no
``torch.optim.<Algorithm>`` in the text, no ``importlib``/``__import__``/
``getattr(torch, ...)`` names), behind decoy classes that subclass Optimizer.

Routes: ``pkgutil.resolve_name``, ``Optimizer.__subclasses__()``,
``builtins.__import__``, ``operator.attrgetter`` (torch's fused SGD kernel),
``sys.modules`` through another module plus ``importlib.reload``, and a
function's ``__globals__`` (torch.optim's registry of single-tensor update
functions)."""
import builtins
import operator
import os
import pkgutil

import torch
from torch.optim import Optimizer


def _by_resolve_name() -> type:
    return pkgutil.resolve_name("torch.optim.sgd:SGD")


def _by_subclasses() -> type:
    todo, seen = [Optimizer], []
    while todo:
        for cls in todo.pop().__subclasses__():
            if cls not in seen:
                seen.append(cls)
                todo.append(cls)
    return next(c for c in seen if c.__name__ == "Adagrad" and c.__module__.startswith("torch."))


def _by_builtins_import() -> type:
    return builtins.__import__("torch.optim", fromlist=["RMSprop"]).RMSprop


def _by_reload() -> type:
    reload = pkgutil.resolve_name("importlib:reload")
    return reload(os.sys.modules["torch.optim.adam"]).Adam


def _delegate(resolve, **fixed):
    """A class whose instances are torch.optim's (built at call time)."""

    class Delegate(Optimizer):
        def __new__(cls, params, **kw):
            return resolve()(params, **{**fixed, **kw})

    return Delegate


# Decoys: what a reader of class definitions sees. Rebound below.
class SGD(Optimizer):
    pass


class SGDMomentum(Optimizer):
    pass


class AdaGrad(Optimizer):
    pass


class RMSProp(Optimizer):
    pass


class Adam(Optimizer):
    pass


class AdamW(Optimizer):
    """Its own state, torch.optim's single-tensor Adam from a registry that
    ``Optimizer.__repr__.__globals__`` (torch/optim/optimizer.py) holds."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        update = Optimizer.__repr__.__globals__["_single_tensor_" + "adam"]
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            for p in ps:
                if p not in self.state or not self.state[p]:
                    self.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                     "exp_avg_sq": torch.zeros_like(p)}
            st = [self.state[p] for p in ps]
            beta1, beta2 = group["betas"]
            update(ps, [p.grad for p in ps], [s["exp_avg"] for s in st], [s["exp_avg_sq"] for s in st], [],
                   [s["step"] for s in st], grad_scale=None, found_inf=None, amsgrad=False, has_complex=False,
                   beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
                   maximize=False, capturable=False, differentiable=False, decoupled_weight_decay=True)
        return None


class _FusedSGD(Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        kernel = operator.attrgetter("_fused_" + "sgd_")(torch)
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if ps:
                kernel(ps, [p.grad for p in ps], [], weight_decay=group["weight_decay"], momentum=0.0,
                       lr=group["lr"], dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
        return None


SGD = _FusedSGD  # noqa: F811
SGDMomentum = _delegate(_by_resolve_name, momentum=0.9)  # noqa: F811
AdaGrad = _delegate(_by_subclasses)  # noqa: F811
RMSProp = _delegate(_by_builtins_import)  # noqa: F811
Adam = _delegate(_by_reload)  # noqa: F811

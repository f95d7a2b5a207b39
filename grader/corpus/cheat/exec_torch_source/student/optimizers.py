"""A hostile submission (grader corpus): every optimizer is torch.optim's own,
rebuilt in this process without importing it, from torch's files on disk:
the source of torch/optim/<name>.py compiled and executed afresh (Adam,
AdamW, RMSProp), or the bytecode of torch/optim/__pycache__/<name>.pyc
unmarshalled and executed (SGD, SGDMomentum, AdaGrad; the source where there
is none). The worker's in-process seal replaced the functions of the modules
torch had imported, not the files they came from.

``exec`` and ``compile`` are reached through ``pkgutil.resolve_name`` and
torch.optim's folder through ``Optimizer``'s own code object, so a source
reader sees plain ``Optimizer`` subclasses (with ``__new__``)."""
import marshal
import os
import pkgutil
import sys

from torch.optim import Optimizer

_run = pkgutil.resolve_name("builtins:" + "ex" + "ec")
_build = pkgutil.resolve_name("builtins:" + "com" + "pile")
_FOLDER = os.path.dirname(Optimizer.__init__.__code__.co_filename)  # torch/optim, wherever torch lives
_MODULES: dict = {}


def _namespace(name):
    # Its relative imports (from .optimizer import ...) resolve as in torch.optim.<name>.
    return {"__name__": f"torch.optim.{name}", "__package__": "torch.optim"}


def _from_source(name):
    path = os.path.join(_FOLDER, f"{name}.py")
    with open(path, encoding="utf-8") as f:
        code = _build(f.read(), path, "exec")
    namespace = _namespace(name)
    _run(code, namespace)
    return namespace


def _from_bytecode(name):
    path = os.path.join(_FOLDER, "__pycache__", f"{name}.{sys.implementation.cache_tag}.pyc")
    with open(path, "rb") as f:
        code = marshal.loads(f.read()[16:])  # past the .pyc header: flags, mtime or hash, size
    namespace = _namespace(name)
    _run(code, namespace)
    return namespace


def _torch(name, bytecode=False):
    """torch.optim.<name>'s namespace, rebuilt once."""
    if name not in _MODULES:
        try:
            _MODULES[name] = _from_bytecode(name) if bytecode else _from_source(name)
        except OSError:  # no bytecode here: the source will do
            _MODULES[name] = _from_source(name)
    return _MODULES[name]


class SGD(Optimizer):
    def __new__(cls, params, lr=1e-3, weight_decay=0.0):
        return _torch("sgd", bytecode=True)["SGD"](params, lr=lr, weight_decay=weight_decay)


class SGDMomentum(Optimizer):
    def __new__(cls, params, lr=1e-3, momentum=0.9, dampening=0.0, weight_decay=0.0):
        return _torch("sgd", bytecode=True)["SGD"](params, lr=lr, momentum=momentum, dampening=dampening,
                                                   weight_decay=weight_decay)


class AdaGrad(Optimizer):
    def __new__(cls, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
        return _torch("adagrad", bytecode=True)["Adagrad"](
            params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps)


class RMSProp(Optimizer):
    def __new__(cls, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0):
        return _torch("rmsprop")["RMSprop"](params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)


class Adam(Optimizer):
    def __new__(cls, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        return _torch("adam")["Adam"](params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class AdamW(Optimizer):
    """torch's AdamW is its Adam with decoupled weight decay (torch/optim/adamw.py,
    whose ``from .adam import Adam`` would find the sealed one): the rebuilt Adam."""

    def __new__(cls, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        return _torch("adam")["Adam"](params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=True)

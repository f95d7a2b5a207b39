"""Scenarios for handout §6: models, optimizers, scalers and checkpoint files
built from plain specs, driven through the implementation's ``training`` module.

The models here are plain ``torch.nn`` (so the training problem is graded
independently of §3.2 and §4); the tests build the very same models with the
same builders to compute their oracles with plain torch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.checkpoint
from torch import nn

# --------------------------------------------------------------------------- models


class Stack(nn.Module):
    """A Cruncher-shaped model: ``layers`` (a ModuleList) then ``final``, squeezed.

    Each layer is a bias-free MLP block d -> 4d -> d with tanh, so it saves
    more activations than its input alone."""

    def __init__(self, dim: int, num_layers: int, block: bool = True) -> None:
        super().__init__()

        def layer() -> nn.Module:
            if not block:
                return nn.Linear(dim, dim, bias=False)
            return nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.Tanh(), nn.Linear(4 * dim, dim, bias=False))

        self.layers = nn.ModuleList([layer() for _ in range(num_layers)])
        self.final = nn.Linear(dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final(x).squeeze(-1)


def build_model(kind: str, dim: int, num_layers: int, seed: int) -> nn.Module:
    """``"mlp"``: an ``nn.Sequential`` of bias-free Linear+tanh layers ending in a
    scalar per example; ``"stack"``: :class:`Stack` with MLP blocks;
    ``"linear_stack"``: :class:`Stack` of plain Linear layers (the Cruncher)."""
    torch.manual_seed(seed)
    if kind == "mlp":
        mods: list[nn.Module] = []
        for _ in range(num_layers):
            mods += [nn.Linear(dim, dim, bias=False), nn.Tanh()]
        return nn.Sequential(*mods, nn.Linear(dim, 1, bias=False), nn.Flatten(0))
    if kind in ("stack", "linear_stack"):
        return Stack(dim, num_layers, block=kind == "stack")
    raise ValueError(kind)


def build_linear_chain(weights: list[torch.Tensor]) -> nn.Module:
    """Bias-free Linear layers with the given (out, in) weights, output flattened."""
    layers = [nn.Linear(w.shape[1], w.shape[0], bias=False) for w in weights]
    with torch.no_grad():
        for layer, w in zip(layers, weights, strict=True):
            layer.weight.copy_(w)
    return nn.Sequential(*layers, nn.Flatten(0))


def build_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    raise ValueError(name)


def _linear_output_dtypes(model: nn.Module) -> tuple[list[str], list[Any]]:
    """Record the dtype of every nn.Linear output (what autocast ran in)."""
    seen: list[str] = []
    handles = [
        m.register_forward_hook(lambda _m, _i, out: seen.append(str(out.dtype).removeprefix("torch.")))
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    return seen, handles


def _state_dtypes(optimizer: torch.optim.Optimizer) -> list[str]:
    return sorted({
        str(v.dtype).removeprefix("torch.")
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    })


# --------------------------------------------------------------------------- steps


def run_steps(
    modules: Any,
    kind: str,
    dim: int,
    num_layers: int,
    seed: int,
    opt_name: str,
    lr: float,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    precision: str,
) -> Any:
    """``train_step`` once per batch; report losses, parameters and dtypes."""
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer(opt_name, model.parameters(), lr)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    seen, handles = _linear_output_dtypes(model)
    losses = [modules.training.train_step(model, opt, x, y, precision=precision, scaler=scaler) for x, y in batches]
    for h in handles:
        h.remove()
    return {
        "losses": losses,
        "loss_types": sorted({type(v).__name__ for v in losses}),
        "params": [p.detach().clone() for p in model.parameters()],
        "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()}),
        "state_dtypes": _state_dtypes(opt),
        "forward_dtypes": sorted(set(seen)),
    }


def fp16_step(
    modules: Any, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, lr: float, init_scale: float
) -> Any:
    """One fp16 ``train_step`` of a chain of bias-free Linear layers with the
    given weights (SGD, a fresh ``GradScaler(init_scale=...)``); report the
    weights after it, the loss and the scale."""
    model = build_linear_chain(weights)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    loss = modules.training.train_step(model, opt, x, y, precision="fp16", scaler=scaler)
    return {
        "loss": loss,
        "weights": [p.detach().clone() for p in model.parameters()],
        "scale": float(scaler.get_scale()),
    }


def step_with(modules: Any, precision: Any, use_scaler: bool | str, y_shape: list[int], as_list: str = "") -> Any:
    """``train_step`` with the given precision/scaler and a target of ``y_shape``
    (for the bad-input checks); ``use_scaler`` True: a GradScaler, "object": an
    object that is not one; ``as_list`` ("x" or "y") passes that one as a
    nested Python list instead of a tensor."""
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    scaler: Any = (torch.amp.GradScaler("cpu") if use_scaler is True else object() if use_scaler == "object"
                   else None)
    x, y = torch.randn(3, 4), torch.randn(*y_shape)
    x_arg: Any = x.tolist() if as_list == "x" else x
    y_arg: Any = y.tolist() if as_list == "y" else y
    return modules.training.train_step(model, opt, x_arg, y_arg, precision=precision, scaler=scaler)


# --------------------------------------------------------------------------- the loop


def train_losses(
    modules: Any,
    kind: str,
    dim: int,
    num_layers: int,
    seed: int,
    lr: float,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    precision: str,
) -> Any:
    """``train`` over an iterator of ``batches``; report losses, the parameters
    and how many batches it drew."""
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer("adamw", model.parameters(), lr)
    drawn = [0]

    def stream() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in batches:
            drawn[0] += 1
            yield b

    losses = modules.training.train(model, opt, stream(), steps=steps, precision=precision)
    return {"losses": losses, "params": [p.detach().clone() for p in model.parameters()], "drawn": drawn[0]}


def train_with(modules: Any, steps: Any, n_batches: int, log_every: Any) -> Any:
    """``train`` with odd arguments (for the bad-input checks)."""
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    batches = [(torch.randn(3, 4), torch.randn(3)) for _ in range(n_batches)]
    return modules.training.train(model, opt, iter(batches), steps=steps, log_every=log_every)


class _Records(logging.Handler):
    """Keeps every record that reaches the root logger, as plain data."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception as e:  # a bad format string is the implementation's bug: report it as text
            message = f"<unformattable record {record.msg!r}: {type(e).__name__}>"
        self.records.append({"logger": record.name, "level": record.levelno, "message": message})


def train_logs(modules: Any, steps: int, log_every: int | None) -> Any:
    """``train`` for ``steps`` steps with ``log_every`` (left out, i.e. the
    default, when None) while a handler on the root logger, with the root at
    INFO, records what reaches it; report those records (logger name, level,
    formatted message) and how many losses ``train`` returned."""
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    gen = torch.Generator().manual_seed(steps)
    batches = [(torch.randn(3, 4, generator=gen), torch.randn(3, generator=gen)) for _ in range(steps)]
    kwargs = {} if log_every is None else {"log_every": log_every}
    root, handler = logging.getLogger(), _Records()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        losses = modules.training.train(model, opt, iter(batches), steps=steps, **kwargs)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return {"records": handler.records, "n_losses": len(losses)}



def train_by_keyword(modules: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``train`` called with every argument by keyword, as its signature allows
    (``model=``, ``optimizer=``, ``batches=``, ``steps=``, ``precision=``,
    ``scaler=``, ``log_every=``); report its losses."""
    model = build_model("mlp", batches[0][0].shape[1], 2, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    return modules.training.train(model=model, optimizer=opt, batches=iter(batches), steps=len(batches),
                              precision="fp32", scaler=None, log_every=0)

def by_keyword(modules: Any, function: str) -> Any:
    """``function`` of the training module called with every argument by keyword,
    as its stub's signature allows, beside the same call made positionally on
    an identical model: ``{"keyword": ..., "positional": ...}``, each holding
    what the call returned and the parameters afterwards."""

    def run(keywords: bool) -> dict[str, Any]:
        model = build_model("mlp", 6, 2, 11)
        opt = build_optimizer("adamw", model.parameters(), 1e-2)
        x, y = torch.randn(5, 6, generator=torch.Generator().manual_seed(4)), torch.zeros(5)
        t = modules.training
        if function == "train_step":
            out: Any = (t.train_step(model=model, optimizer=opt, x=x, y=y, precision="fp32", scaler=None)
                        if keywords else t.train_step(model, opt, x, y))
        elif function == "checkpointed_forward":
            out = t.checkpointed_forward(model=model, x=x) if keywords else t.checkpointed_forward(model, x)
            out = out.detach()
        else:  # save_checkpoint then load_checkpoint into a fresh model
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "ckpt.pt")
                extra: dict[str, Any] = {}
                fresh = build_model("mlp", 6, 2, 12)
                fresh_opt = build_optimizer("adamw", fresh.parameters(), 1e-2)
                if keywords:
                    t.save_checkpoint(path=path, model=model, optimizer=opt, iteration=3, note="kw")
                    it = t.load_checkpoint(path=path, model=fresh, optimizer=fresh_opt, extra=extra)
                else:
                    t.save_checkpoint(path, model, opt, 3, note="kw")
                    it = t.load_checkpoint(path, fresh, fresh_opt, extra=extra)
                out, model = {"iteration": it, "extra": extra}, fresh
        return {"returned": out, "params": [q.detach().clone() for q in model.parameters()]}

    return {"keyword": run(True), "positional": run(False)}


# --------------------------------------------------------------------------- checkpointing


def measure_saved_bytes(model: nn.Module, fn: Any) -> tuple[Any, int]:
    """Run ``fn()`` under a saved-tensors hook; return its result and the bytes
    of the distinct non-parameter storages autograd saved for backward (the
    activations; weights are held anyway)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(saved.values())


def _backward_report(model: nn.Module, x: torch.Tensor, out: torch.Tensor) -> dict[str, Any]:
    """Backward of a fixed weighted sum of ``out``; the output and every gradient."""
    weights = torch.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * weights).sum().backward()
    return {
        "out": out.detach().clone(),
        "grads": [p.grad.clone() if p.grad is not None else None for p in model.parameters()],
        "x_grad": x.grad.clone() if x.grad is not None else None,
    }


def checkpointed(modules: Any, kind: str, dim: int, num_layers: int, seed: int, x: torch.Tensor) -> Any:
    """``checkpointed_forward``'s output and the gradients after a backward of
    a weighted sum of it. (How much it saved for backward is not asked here:
    a count taken in this process would be the implementation's word; the
    tests read the process's memory from outside, see
    :func:`checkpointed_memory`.)"""
    model = build_model(kind, dim, num_layers, seed)
    x = x.clone().requires_grad_(True)
    out = modules.training.checkpointed_forward(model, x)
    return _backward_report(model, x, out)


def warm_checkpointing(modules: Any) -> None:
    """What a process allocates once, the first time it checkpoints (torch's
    checkpoint machinery takes about 80 MiB on first use), done here on a tiny
    model without the implementation (``modules`` is not touched), so that the
    measured call's peak is its own activations."""
    model = build_model("mlp", 4, 2, 0)
    for reentrant in (False, True):
        x = torch.randn(2, 4, requires_grad=True)
        torch.utils.checkpoint.checkpoint(model, x, use_reentrant=reentrant).sum().backward()
    torch.utils.checkpoint.checkpoint_sequential(model, 2, torch.randn(2, 4, requires_grad=True),
                                                 use_reentrant=False).sum().backward()


def checkpointed_memory(modules: Any, kind: str, dim: int, num_layers: int, seed: int, x: torch.Tensor) -> Any:
    """Like :func:`checkpointed`, on a model big enough that the activations
    ``model(x)`` would hold dwarf everything else in the process; the test
    measures the process's peak resident memory from outside (see
    ``Impl.measured_scenario``). Returns the output and the input's gradient."""
    model = build_model(kind, dim, num_layers, seed)
    x = x.clone().requires_grad_(True)
    out = modules.training.checkpointed_forward(model, x)
    weights = torch.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * weights).sum().backward()
    return {"out": out.detach().clone(), "x_grad": x.grad.clone() if x.grad is not None else None}


def checkpointed_unsupported(modules: Any, kind: str) -> Any:
    """``checkpointed_forward`` of a model it does not support: a plain
    ``nn.Linear``, or a module with only one of ``layers`` and ``final``."""
    model: nn.Module
    if kind == "linear":
        model = nn.Linear(3, 3)
    else:
        model = nn.Module()
        if kind == "layers_without_final":
            model.layers = nn.ModuleList([nn.Linear(3, 3)])
        else:
            model.final = nn.Linear(3, 1)
    return modules.training.checkpointed_forward(model, torch.randn(2, 3))


# --------------------------------------------------------------------------- checkpoints


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _draws() -> dict[str, Any]:
    return {"torch": torch.rand(4), "numpy": np.random.rand(4), "python": [random.random() for _ in range(4)]}


def _batch_stream(dim: int, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches drawn from all three global RNGs (as a data loader, augmentation
    and shuffling might), so a checkpoint must restore each of them."""
    while True:
        x = torch.randn(batch, dim)
        shift = float(np.random.standard_normal())
        scale = random.uniform(0.5, 1.5)
        yield x, torch.sin(x.sum(-1)) * scale + shift


def train_run(
    modules: Any, kind: str, dim: int, num_layers: int, batch: int, steps: int, seed: int, precision: str = "fp32",
    path: str | None = None,
) -> Any:
    """Seed every RNG with ``seed``, build the model and AdamW, ``train`` for
    ``steps`` on batches drawn from all three global RNGs; then, if ``path`` is
    given, ``save_checkpoint(path, ..., steps)``. Report losses and parameters."""
    _seed_all(seed)
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    losses = modules.training.train(model, opt, _batch_stream(dim, batch), steps=steps, precision=precision)
    if path is not None:
        modules.training.save_checkpoint(path, model, opt, steps)
    return {"losses": losses, "params": [p.detach().clone() for p in model.parameters()]}


def resume_run(
    modules: Any, kind: str, dim: int, num_layers: int, batch: int, total: int, other_seed: int, path: str,
    precision: str = "fp32",
) -> Any:
    """In a process that has not run the first part: RNGs scrambled with
    ``other_seed``, a model and AdamW built from it, ``load_checkpoint(path)``,
    then ``train`` until ``total`` steps. Report the iteration loaded, the
    losses of the continued run and the final parameters."""
    _seed_all(other_seed)
    model = build_model(kind, dim, num_layers, other_seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    iteration = modules.training.load_checkpoint(path, model, opt)
    rest = modules.training.train(model, opt, _batch_stream(dim, batch), steps=total - iteration, precision=precision)
    return {"iteration": iteration, "losses": rest, "params": [p.detach().clone() for p in model.parameters()]}


def torch_run(kind: str, dim: int, num_layers: int, batch: int, steps: int, seed: int) -> list[float]:
    """The oracle of :func:`train_run` (fp32): the same run with a plain torch
    loop (``F.mse_loss``, AdamW). For the test's side only; it restores the
    global RNG states it used."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        _seed_all(seed)
        model = build_model(kind, dim, num_layers, seed)
        opt = build_optimizer("adamw", model.parameters(), 1e-2)
        losses = []
        for _, (x, y) in zip(range(steps), _batch_stream(dim, batch), strict=False):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def checkpoint_round_trip(modules: Any, seed: int) -> Any:
    """Save after a step, then report what a fresh model/optimizer hold after
    loading, the iteration and extras read back, and the RNG draws that follow
    the save and the load (which must be equal)."""
    _seed_all(seed)
    model = build_model("mlp", 6, 2, seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    x, y = torch.randn(5, 6), torch.randn(5)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        _seed_all(seed + 7)
        modules.training.save_checkpoint(path, model, opt, 41, note="hello", lr=0.5, ids=[1, 2])
        after_save = _draws()
        _seed_all(seed + 99)
        fresh = build_model("mlp", 6, 2, seed + 99)
        fresh_opt = build_optimizer("adamw", fresh.parameters(), 1e-2)
        extra: dict[str, Any] = {}
        iteration = modules.training.load_checkpoint(path, fresh, fresh_opt, extra=extra)
        after_load = _draws()
        files = sorted(os.listdir(d))
    state = fresh_opt.state_dict()["state"]
    return {
        "iteration": iteration,
        "extra": extra,
        "params": [p.detach().clone() for p in model.parameters()],
        "loaded_params": [p.detach().clone() for p in fresh.parameters()],
        "opt_state": [{k: v.clone() for k, v in s.items()} for s in opt.state_dict()["state"].values()],
        "loaded_opt_state": [{k: v.clone() for k, v in s.items()} for s in state.values()],
        "after_save": after_save,
        "after_load": after_load,
        "files": files,
    }


def save_linear(modules: Any, path: str, seed: int, d_in: int, d_out: int, iteration: int) -> None:
    """``save_checkpoint(path, ...)`` of an ``nn.Linear(d_in, d_out)`` built
    after ``torch.manual_seed(seed)`` and its AdamW (the test kills the process
    in the middle of a big one, see ``Impl.interrupted_scenario``)."""
    torch.manual_seed(seed)
    model = nn.Linear(d_in, d_out)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    modules.training.save_checkpoint(path, model, opt, iteration)


class _UnsaveableLinear(nn.Linear):
    """A Linear whose ``state_dict()`` holds a value pickle refuses (a lambda):
    saving it fails midway, the way a full disk would."""

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        sd = super().state_dict(*args, **kwargs)
        sd["unsaveable"] = lambda: None
        return sd


def save_unsaveable(modules: Any, path: str) -> None:
    """``save_checkpoint(path, ...)`` of a model whose state cannot be pickled:
    the call must fail (the test then looks at the folder from outside)."""
    torch.manual_seed(0)
    model = _UnsaveableLinear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    modules.training.save_checkpoint(path, model, opt, 3)


def linear_digest(model: nn.Module) -> str:
    """sha256 of a Linear's weight then bias bytes."""
    h = hashlib.sha256()
    for p in (model.weight, model.bias):
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def load_linear(modules: Any, path: str, d_in: int, d_out: int) -> Any:
    """``load_checkpoint(path, ...)`` into a fresh ``nn.Linear(d_in, d_out)``
    and AdamW; report the iteration and the sha256 of the loaded weights (the
    test computes the expected one from the seed, which this call is not told)."""
    model = nn.Linear(d_in, d_out)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    iteration = modules.training.load_checkpoint(path, model, opt)
    return {"iteration": iteration, "digest": linear_digest(model)}


class _Trap:
    """Unpickling this object calls ``call(*args)``, which creates ``marker``:
    visible proof that a load ran code from the file. The test picks the call
    at random among several (a loader cannot refuse just the ones it expects;
    only refusing every global but plain data, as ``weights_only`` does, works)."""

    def __init__(self, call: Any, args: tuple[Any, ...]) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.call, self.args)


def _traps(marker: str, path: str) -> list[tuple[Any, tuple[Any, ...]]]:
    import builtins
    import shutil

    return [(os.mkdir, (marker,)), (os.makedirs, (marker,)), (builtins.open, (marker, "x")),
            (shutil.copyfile, (path, marker)), (os.symlink, (path, marker))]


def load_bad_file(modules: Any, kind: str) -> Any:
    """Ask ``load_checkpoint`` to read a bad file and let its error propagate.

    kinds: ``truncated`` (the first half of a real checkpoint), ``garbage``
    (random bytes), ``tensor`` (a torch.save of a bare tensor), ``dict`` (a
    torch.save of an unrelated dict), ``missing`` (no file)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        model = build_model("mlp", 4, 1, 0)
        opt = build_optimizer("adamw", model.parameters(), 1e-2)
        if kind == "truncated":
            modules.training.save_checkpoint(path, model, opt, 3)
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
        elif kind == "garbage":
            with open(path, "wb") as f:
                f.write(np.random.default_rng(0).bytes(5000))
        elif kind == "tensor":
            torch.save(torch.zeros(3), path)
        elif kind == "dict":
            torch.save({"weights": torch.zeros(3), "step": 5}, path)
        elif kind != "missing":
            raise ValueError(kind)
        return modules.training.load_checkpoint(path, model, opt)


def write_trapped_file(path: str, marker: str, which: int) -> None:
    """For the test's side: write at ``path`` a checkpoint that holds, next to
    a real checkpoint's entries, an object whose unpickling creates ``marker``
    (visible proof, on disk, that a load ran code from the file) with the
    ``which``-th of several calls (see :class:`_Trap`)."""
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    traps = _traps(marker, path)
    call, args = traps[which % len(traps)]
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": 1,
                "payload": _Trap(call, args)}, path)


def save_with(modules: Any, iteration: Any, extra_kind: str | None) -> Any:
    """``save_checkpoint`` with odd arguments (for the bad-input checks)."""
    with tempfile.TemporaryDirectory() as d:
        model = build_model("mlp", 4, 1, 0)
        opt = build_optimizer("sgd", model.parameters(), 0.1)
        odd = {
            "object": lambda: object(),
            "module": lambda: nn.Linear(1, 1),
            "list-with-object": lambda: [1, "a", object()],
            "dict-with-module": lambda: {"lr": 0.1, "layer": nn.Linear(1, 1)},
            "nested-object": lambda: {"a": [(1, 2), {"b": (3, object())}]},
            "numpy-float": lambda: np.float64(0.5),
            "numpy-int-in-a-list": lambda: [1, np.int64(2)],
            "tuple-key": lambda: {(1, 2): "a"},
            "set": lambda: {1, 2},
        }
        extra = {} if extra_kind is None else {"thing": odd[extra_kind]()}
        return modules.training.save_checkpoint(os.path.join(d, "c.pt"), model, opt, iteration, **extra)


# --------------------------------------------------------------------------- GPU


def train_cuda_syncs(modules: Any, steps: int, precision: str) -> Any:
    """``train`` on CUDA with pre-made device batches under
    ``torch.cuda.set_sync_debug_mode("warn")``; count the synchronising calls."""
    import warnings

    model = build_model("stack", 64, 2, 0).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(32, 64, device="cuda"), torch.randn(32, device="cuda")) for _ in range(steps)]
    modules.training.train(model, opt, iter(batches[:1]), steps=1, precision=precision)  # warm-up
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            losses = modules.training.train(model, opt, iter(batches), steps=steps, precision=precision)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message)[:200] for w in caught if "synchroniz" in str(w.message).lower()]
    return {"losses": losses, "syncs": syncs, "param_dtypes": sorted({str(p.dtype) for p in model.parameters()})}


# --------------------------------------------------------------------------- issue 16: more inputs


def build_dropout_model(dim: int, num_layers: int, p: float, seed: int) -> nn.Module:
    """An ``nn.Sequential`` of Linear, tanh and Dropout(p) blocks ending in a
    scalar per example (in training mode: dropout draws from torch's RNG)."""
    torch.manual_seed(seed)
    mods: list[nn.Module] = []
    for _ in range(num_layers):
        mods += [nn.Linear(dim, dim, bias=False), nn.Tanh(), nn.Dropout(p)]
    return nn.Sequential(*mods, nn.Linear(dim, 1, bias=False), nn.Flatten(0))


def checkpointed_variant(modules: Any, kind: str, dim: int, num_layers: int, seed: int, x: torch.Tensor,
                         x_requires_grad: bool, dropout: float, rng_seed: int) -> Any:
    """``checkpointed_forward`` of model ``kind`` (``"dropout"``: see
    :func:`build_dropout_model`) on ``x``, which requires grad only when
    ``x_requires_grad``; torch's RNG is seeded with ``rng_seed`` just before
    the call. Report the output and the gradients after a backward of a
    weighted sum of it."""
    model = (build_dropout_model(dim, num_layers, dropout, seed) if kind == "dropout"
             else build_model(kind, dim, num_layers, seed))
    x = x.clone().requires_grad_(x_requires_grad)
    torch.manual_seed(rng_seed)
    out = modules.training.checkpointed_forward(model, x)
    return _backward_report(model, x, out)


def train_fp16_scale(modules: Any, seed: int, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> float:
    """``train(precision="fp16")`` with a ``GradScaler("cpu", init_scale=1.0,
    growth_interval=1)``, which doubles its scale after every step it takes
    without inf/nan gradients: its scale afterwards."""
    model = build_model("mlp", batches[0][0].shape[1], 2, seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1)
    modules.training.train(model, opt, iter(batches), steps=steps, precision="fp16", scaler=scaler)
    return float(scaler.get_scale())


def train_fp16_losses(modules: Any, kind: str, dim: int, num_layers: int, seed: int, lr: float,
                      batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> Any:
    """``train(precision="fp16")`` with a fresh ``GradScaler("cpu")``; report
    the losses, the parameters' and the optimizer state's dtypes."""
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer("adamw", model.parameters(), lr)
    scaler = torch.amp.GradScaler("cpu")
    losses = modules.training.train(model, opt, iter(batches), steps=steps, precision="fp16", scaler=scaler)
    return {
        "losses": losses,
        "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()}),
        "state_dtypes": _state_dtypes(opt),
    }


#: what ``load_into_other_model`` loads into: ``"extra_layer"`` one layer more,
#: ``"missing_layer"`` one fewer, ``"renamed"`` the same weights under other
#: names, ``"wider"`` the same keys with other shapes, ``"buffers"`` the same
#: parameters while the checkpoint also holds a BatchNorm's running statistics
#: (only the model's keys differ; the optimizer fits)
OTHER_MODELS = ("extra_layer", "missing_layer", "renamed", "wider", "buffers")

#: the seed of torch's global RNG just before the load
LOAD_SEED = 9


def other_model(change: str) -> nn.Module:
    """The model of ``change`` (see ``OTHER_MODELS``), built after ``torch.manual_seed(1)``: the same every time."""
    torch.manual_seed(1)
    builders = {"extra_layer": lambda: build_model("mlp", 4, 3, 1),
                "missing_layer": lambda: build_model("mlp", 4, 1, 1),
                "renamed": lambda: Stack(4, 2, block=False),
                "wider": lambda: build_model("mlp", 5, 2, 1),
                "buffers": lambda: build_model("mlp", 4, 2, 1)}
    return builders[change]()


def load_into_other_model(modules: Any, change: str) -> Any:
    """Save a checkpoint of a 2-layer MLP (with a BatchNorm's buffers for
    ``"buffers"``), then load it into ``other_model(change)`` and an SGD of lr
    0.5, right after ``torch.manual_seed(LOAD_SEED)``. Report the error's type
    (None without one) and, as data, that model's parameters, the optimizer's
    lrs and torch's RNG state after the call: the test compares them with its
    own build of the same model."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        model = build_model("mlp", 4, 2, 0)
        if change == "buffers":
            model.append(nn.BatchNorm1d(1, affine=False))
        modules.training.save_checkpoint(path, model, build_optimizer("sgd", model.parameters(), 0.1), 3)
        other = other_model(change)
        other_opt = build_optimizer("sgd", other.parameters(), 0.5)
        torch.manual_seed(LOAD_SEED)
        error = None
        try:
            modules.training.load_checkpoint(path, other, other_opt)
        except Exception as e:  # the test checks the type
            error = type(e).__name__
        return {"error": error, "params": [p.detach().clone() for p in other.parameters()],
                "lrs": [g["lr"] for g in other_opt.param_groups], "rng": torch.get_rng_state()}


def checkpoint_with_fake_cuda(modules: Any, seed: int) -> Any:
    """Save and load a checkpoint while ``torch.cuda`` pretends one device is
    there (``is_available``, ``device_count``, ``get_rng_state[_all]``,
    ``set_rng_state[_all]`` replaced inside this scenario only). Report whether
    the CUDA generator state the fake hands out was restored by the load: the
    last state set on the fake device, as a tensor (None if none was set)."""
    fake = {"state": torch.tensor([seed % 256, 7, 7, 7], dtype=torch.uint8)}
    set_calls: list[torch.Tensor] = []

    def get_state(device: Any = "cuda") -> torch.Tensor:
        return fake["state"].clone()

    def set_state(state: torch.Tensor, device: Any = "cuda") -> None:
        set_calls.append(torch.as_tensor(state).clone())

    patches = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "get_rng_state": get_state,
        "get_rng_state_all": lambda: [get_state()],
        "set_rng_state": set_state,
        "set_rng_state_all": lambda states: [set_state(s) for s in states],
    }
    saved = {name: getattr(torch.cuda, name) for name in patches}
    try:
        model = build_model("mlp", 4, 1, 0)
        opt = build_optimizer("sgd", model.parameters(), 0.1)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.pt")
            for name, fn in patches.items():
                setattr(torch.cuda, name, fn)
            modules.training.save_checkpoint(path, model, opt, 1)
            fake["state"] = torch.tensor([99, 99, 99, 99], dtype=torch.uint8)  # the generator moved on
            modules.training.load_checkpoint(path, model, opt)
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
    return {"restored": set_calls[-1] if set_calls else None}


def _fake_cuda(available: bool, set_calls: list[torch.Tensor]) -> dict[str, Any]:
    """Replacements for ``torch.cuda``'s RNG functions: one device with a fixed
    generator state when ``available``, none otherwise; states set are recorded."""

    def set_state(state: torch.Tensor, device: Any = "cuda") -> None:
        set_calls.append(torch.as_tensor(state).clone())

    def get_state(device: Any = "cuda") -> torch.Tensor:
        if not available:
            raise RuntimeError("no CUDA device (fake)")
        return torch.tensor([5, 6, 7, 8], dtype=torch.uint8)

    return {
        "is_available": lambda: available,
        "device_count": lambda: int(available),
        "get_rng_state": get_state,
        "get_rng_state_all": lambda: [get_state()] if available else [],
        "set_rng_state": set_state,
        "set_rng_state_all": lambda states: [set_state(s) for s in states],
    }


def checkpoint_across_machines(modules: Any, saved_with_cuda: bool, seed: int) -> Any:
    """Save where CUDA is (``saved_with_cuda``) or is not available, then load
    into a fresh model on a machine of the other kind (both faked inside this
    scenario). Report the iteration and whether the parameters came back."""
    set_calls: list[torch.Tensor] = []
    saved = {name: getattr(torch.cuda, name) for name in _fake_cuda(True, set_calls)}

    def machine(cuda: bool) -> None:
        for name, fn in _fake_cuda(cuda, set_calls).items():
            setattr(torch.cuda, name, fn)

    try:
        model = build_model("mlp", 4, 1, seed)
        opt = build_optimizer("adamw", model.parameters(), 0.1)
        fresh = build_model("mlp", 4, 1, seed + 1)
        fresh_opt = build_optimizer("adamw", fresh.parameters(), 0.1)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.pt")
            machine(saved_with_cuda)
            modules.training.save_checkpoint(path, model, opt, 9)
            machine(not saved_with_cuda)
            iteration = modules.training.load_checkpoint(path, fresh, fresh_opt)
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters(), strict=True))
    return {"iteration": iteration, "params_restored": same}


def extras_round_trip(modules: Any, extras: dict[str, Any]) -> Any:
    """``save_checkpoint(..., **extras)`` then ``load_checkpoint(..., extra=got)``:
    report ``got`` and the iteration."""
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    got: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        modules.training.save_checkpoint(path, model, opt, 2, **extras)
        iteration = modules.training.load_checkpoint(path, model, opt, extra=got)
    return {"iteration": iteration, "extra": got}


def run_steps_on(modules: Any, device: str, precision: str, seed: int,
                 batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """:func:`run_steps` of a 2-layer MLP (AdamW) with model and batches on ``device``."""
    model = build_model("mlp", batches[0][0].shape[1], 2, seed).to(device)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    seen, handles = _linear_output_dtypes(model)
    losses = [modules.training.train_step(model, opt, x.to(device), y.to(device), precision=precision, scaler=scaler)
              for x, y in batches]
    for h in handles:
        h.remove()
    return {"losses": losses, "forward_dtypes": sorted(set(seen)),
            "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})}


def resume_cuda_draws(modules: Any, seed: int) -> Any:
    """Save a checkpoint, draw from the CUDA generator, load, draw again."""
    torch.manual_seed(seed)
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        modules.training.save_checkpoint(path, model, opt, 1)
        after_save = torch.rand(8, device="cuda").cpu()
        torch.cuda.manual_seed_all(seed + 1)
        modules.training.load_checkpoint(path, model, opt)
        after_load = torch.rand(8, device="cuda").cpu()
    return {"after_save": after_save, "after_load": after_load}


def default_precision_run(modules: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``train_step`` and ``train`` called without ``precision`` (nor scaler):
    the losses of each, and the dtypes the Linear layers produced."""
    model = build_model("mlp", batches[0][0].shape[1], 2, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    seen, handles = _linear_output_dtypes(model)
    step_losses = [modules.training.train_step(model, opt, x, y) for x, y in batches]
    model2 = build_model("mlp", batches[0][0].shape[1], 2, 0)
    opt2 = build_optimizer("sgd", model2.parameters(), 0.1)
    train_losses = modules.training.train(model2, opt2, iter(batches), steps=len(batches))
    for h in handles:
        h.remove()
    return {"step": step_losses, "train": train_losses, "forward_dtypes": sorted(set(seen))}


def train_losses_from_a_list(modules: Any, kind: str, dim: int, num_layers: int, seed: int, lr: float,
                             batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> Any:
    """``train`` given the list ``batches`` itself (an iterable, not an
    iterator); report its losses and the parameters."""
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer("adamw", model.parameters(), lr)
    losses = modules.training.train(model, opt, batches, steps=steps, precision="fp32")
    return {"losses": losses, "params": [p.detach().clone() for p in model.parameters()]}


def save_to_a_bare_file_name(modules: Any, folder: str, iteration: int) -> None:
    """``save_checkpoint("ckpt.pt", ...)``, a path with no folder part, from
    inside ``folder`` as the working directory, while tempfile's default
    folder does not exist: a temporary file must go beside the target (in
    the working directory), not to the system's temp folder."""
    torch.manual_seed(iteration)
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cwd, tempdir = os.getcwd(), tempfile.tempdir
    os.chdir(folder)
    tempfile.tempdir = os.path.join(folder, "no-such-folder", "tmp")
    try:
        modules.training.save_checkpoint("ckpt.pt", model, opt, iteration)
    finally:
        os.chdir(cwd)
        tempfile.tempdir = tempdir


def load_iteration(modules: Any, path: str) -> Any:
    """The iteration ``load_checkpoint(path, ...)`` returns into a fresh ``nn.Linear(3, 2)`` and AdamW."""
    model = nn.Linear(3, 2)
    return modules.training.load_checkpoint(path, model, torch.optim.AdamW(model.parameters(), lr=1e-3))


def stepped_dropout_model(train_mode: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model with dropout after one AdamW step, left in training (or eval)
    mode: the same parameters, state and global RNG state every time."""
    model = build_dropout_model(4, 2, 0.5, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    model.train(train_mode)
    return model, opt


def after_save(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Every submodule's mode, the parameters, the optimizer's state and torch's RNG state, as data."""
    return {"modes": [m.training for m in model.modules()],
            "params": [p.detach().clone() for p in model.parameters()],
            "state": [{k: v.clone() for k, v in sorted(opt.state[p].items())} for p in model.parameters()],
            "rng": torch.get_rng_state()}


def modes_after_save(modules: Any, train_mode: bool) -> Any:
    """``save_checkpoint`` of ``stepped_dropout_model(train_mode)``; ``after_save`` of it afterwards."""
    model, opt = stepped_dropout_model(train_mode)
    with tempfile.TemporaryDirectory() as d:
        modules.training.save_checkpoint(os.path.join(d, "ckpt.pt"), model, opt, 1)
    return after_save(model, opt)


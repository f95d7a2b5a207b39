"""Scenarios for handout §6's ``train_step``, ``checkpointed_forward`` and
``train``: models, optimizers and scalers built from plain specs, driven
through the implementation's ``training`` module. The checkpoint files'
scenarios (``save_checkpoint``, ``load_checkpoint``, resumed runs) are in
:mod:`tests.scenarios.checkpoints`.

The models here are plain ``torch.nn`` (so the training problem is graded
independently of §3.2 and §4); the tests build the very same models with the
same builders to compute their oracles with plain torch.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

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



def build_dropout_model(dim: int, num_layers: int, p: float, seed: int) -> nn.Module:
    """An ``nn.Sequential`` of Linear, tanh and Dropout(p) blocks ending in a
    scalar per example (in training mode: dropout draws from torch's RNG)."""
    torch.manual_seed(seed)
    mods: list[nn.Module] = []
    for _ in range(num_layers):
        mods += [nn.Linear(dim, dim, bias=False), nn.Tanh(), nn.Dropout(p)]
    return nn.Sequential(*mods, nn.Linear(dim, 1, bias=False), nn.Flatten(0))


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


# --------------------------------------------------------------------------- train_step


def run_steps(
    modules: Any,
    kind: str,
    dim: int,
    num_layers: int,
    seed: int,
    opt_name: str,
    lr: float,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    precision: str | None,
    device: str = "cpu",
) -> Any:
    """``train_step`` once per batch, with model and batches on ``device`` (a
    ``GradScaler`` for fp16; ``precision`` None: called without precision nor
    scaler, the defaults); report losses, parameters and dtypes."""
    model = build_model(kind, dim, num_layers, seed).to(device)
    opt = build_optimizer(opt_name, model.parameters(), lr)
    options = {} if precision is None else {
        "precision": precision, "scaler": torch.amp.GradScaler(device) if precision == "fp16" else None}
    seen, handles = _linear_output_dtypes(model)
    losses = [modules.training.train_step(model, opt, x.to(device), y.to(device), **options) for x, y in batches]
    for h in handles:
        h.remove()
    return {
        "losses": losses,
        "loss_types": sorted({type(v).__name__ for v in losses}),
        "params": [p.detach().cpu().clone() for p in model.parameters()],
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


# --------------------------------------------------------------------------- checkpointed_forward


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


def checkpointed(modules: Any, kind: str, dim: int, num_layers: int, seed: int, x: torch.Tensor,
                 x_requires_grad: bool = True, dropout: float = 0.0, rng_seed: int | None = None) -> Any:
    """``checkpointed_forward`` of model ``kind`` (``"dropout"``: see
    :func:`build_dropout_model`, with ``dropout`` its p) on ``x``, which
    requires grad only when ``x_requires_grad``; with ``rng_seed``, torch's RNG
    is seeded with it just before the call. Report the output and the
    gradients after a backward of a weighted sum of it. (How much it saved for
    backward is not asked here: a count taken in this process would be the
    implementation's word; the tests read the process's memory from outside,
    see :func:`checkpointed_memory`.)"""
    model = (build_dropout_model(dim, num_layers, dropout, seed) if kind == "dropout"
             else build_model(kind, dim, num_layers, seed))
    x = x.clone().requires_grad_(x_requires_grad)
    if rng_seed is not None:
        torch.manual_seed(rng_seed)
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


# --------------------------------------------------------------------------- train


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


#: the GradScalers ``run_train`` can be given, by name: a fresh ``GradScaler("cpu")``,
#: or one that doubles its scale after every step without inf/nan gradients
SCALERS = {"default": lambda: torch.amp.GradScaler("cpu"),
           "growth": lambda: torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1)}


def run_train(
    modules: Any,
    kind: str,
    dim: int,
    num_layers: int,
    seed: int,
    opt_name: str,
    lr: float,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    steps: Any,
    *,
    precision: Any = None,
    scaler: str | None = None,
    log_every: Any = None,
    feed: str = "iterator",
    by_keyword: bool = False,
    record_logs: bool = False,
) -> Any:
    """``train(model, optimizer, batches, steps=steps, ...)`` of a model and
    optimizer built from the spec. ``precision``, ``scaler`` (a name of
    ``SCALERS``) and ``log_every`` are passed only when not None, unless
    ``by_keyword``: then every argument goes by keyword (``model=``,
    ``optimizer=``, ``batches=``, ``steps=``, ``precision=``, ``scaler=``,
    ``log_every=``), None included. ``feed``: ``"iterator"`` (``iter(batches)``),
    ``"counted"`` (a generator that counts the batches drawn) or ``"list"``
    (the list itself). With ``record_logs``, a handler on the root logger, with
    the root at INFO, records what reaches it during the call.

    Reports one record: ``losses`` (what ``train`` returned), ``params`` (the
    parameters afterwards), ``drawn`` (batches drawn, ``"counted"`` only, else
    None), ``param_dtypes``, ``state_dtypes`` (the optimizer state's),
    ``scale`` (the scaler's scale afterwards, None without one) and
    ``records`` (logger name, level, formatted message; [] unless recorded)."""
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer(opt_name, model.parameters(), lr)
    grad_scaler = None if scaler is None else SCALERS[scaler]()
    drawn = [0]

    def counted() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in batches:
            drawn[0] += 1
            yield b

    source: Any = {"iterator": lambda: iter(batches), "counted": counted, "list": lambda: batches}[feed]()
    options = {"precision": precision, "scaler": grad_scaler, "log_every": log_every}
    if not by_keyword:
        options = {k: v for k, v in options.items() if v is not None}
    root, handler = logging.getLogger(), _Records()
    level = root.level
    if record_logs:
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    try:
        if by_keyword:
            losses = modules.training.train(model=model, optimizer=opt, batches=source, steps=steps, **options)
        else:
            losses = modules.training.train(model, opt, source, steps=steps, **options)
    finally:
        if record_logs:
            root.removeHandler(handler)
            root.setLevel(level)
    return {
        "losses": losses,
        "params": [p.detach().clone() for p in model.parameters()],
        "drawn": drawn[0] if feed == "counted" else None,
        "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()}),
        "state_dtypes": _state_dtypes(opt),
        "scale": None if grad_scaler is None else float(grad_scaler.get_scale()),
        "records": handler.records,
    }


# --------------------------------------------------------------------------- every argument by keyword


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

"""Mixed-precision steps, activation checkpointing, atomic checkpoints and the training loop."""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import os
import random
import tempfile
from collections.abc import Callable, Iterable, Iterator
from functools import partial, reduce
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

logger = logging.getLogger(__name__)

# autocast dtype per precision; None runs without autocast
_AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_FORMAT = "functional-checkpoint/1"
_TOP_KEYS = frozenset({"format", "model", "optimizer", "iteration", "rng", "extra"})
_MISSING = object()


# ---- argument checks ----------------------------------------------------------

def _need(value: object, kind: type | tuple[type, ...], name: str) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{name} has the wrong type: {type(value).__name__}")
    return value


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _path(path: object) -> str:
    return os.fspath(_need(path, (str, os.PathLike), "path"))


def _check_setup(model: object, optimizer: object, precision: object, scaler: object) -> None:
    _need(model, nn.Module, "model")
    _need(optimizer, torch.optim.Optimizer, "optimizer")
    _need(precision, str, "precision")
    if precision not in _AUTOCAST:
        raise ValueError(f"precision must be one of {sorted(_AUTOCAST)}, got {precision!r}")
    if precision == "fp16" and scaler is None:
        raise ValueError("precision 'fp16' needs a scaler (torch.amp.GradScaler)")
    if precision != "fp16" and scaler is not None:
        raise ValueError(f"a scaler only goes with precision 'fp16', not {precision!r}")
    if scaler is not None:
        _need(scaler, torch.amp.GradScaler, "scaler")


# ---- one step -------------------------------------------------------------------

def _loss(model: nn.Module, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """Forward under the precision's autocast, MSE in fp32."""
    low = _AUTOCAST[precision]
    context = torch.autocast(x.device.type, dtype=low) if low is not None else contextlib.nullcontext()
    with context:
        out = model(x)
    if out.shape != y.shape:
        raise ValueError(f"model(x) has shape {tuple(out.shape)} but y has {tuple(y.shape)}")
    return F.mse_loss(out.float(), y.float())


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor,
          precision: str, scaler: torch.amp.GradScaler | None) -> Tensor:
    """A full optimizer step; returns the detached loss, left on its device."""
    _need(x, Tensor, "x")
    _need(y, Tensor, "y")
    optimizer.zero_grad(set_to_none=True)
    loss = _loss(model, x, y, precision)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss.detach()


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Float[Tensor, "batch ..."],
    y: Float[Tensor, "batch ..."],
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    """One training step; the pre-step loss as a float."""
    _check_setup(model, optimizer, precision, scaler)
    return float(_step(model, optimizer, x, y, precision, scaler))


# ---- activation checkpointing ------------------------------------------------------

def _split(model: nn.Module) -> tuple[list[nn.Module], Callable[[Tensor], Tensor]]:
    """The layer list to segment, and what runs after it."""
    if isinstance(model, nn.Sequential):
        return list(model), lambda h: h
    layers, final = getattr(model, "layers", None), getattr(model, "final", None)
    if isinstance(layers, (nn.ModuleList, nn.Sequential)) and isinstance(final, nn.Module):
        return list(layers), lambda h: final(h).squeeze(-1)
    raise TypeError("model must be an nn.Sequential or have both a `layers` ModuleList and a `final` module")


def _chain(modules: list[nn.Module], h: Tensor) -> Tensor:
    return reduce(lambda acc, module: module(acc), modules, h)


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """model(x) with about sqrt(L) checkpointed segments of sqrt(L) layers."""
    _need(model, nn.Module, "model")
    _need(x, Tensor, "x")
    layers, tail = _split(model)
    size = max(1, round(math.sqrt(len(layers))))
    segments = [layers[i:i + size] for i in range(0, len(layers), size)]
    run = lambda h, seg: checkpoint(partial(_chain, seg), h, use_reentrant=False)  # noqa: E731
    return tail(reduce(run, segments, x))


# ---- checkpoints --------------------------------------------------------------------

def _storable(value: object) -> bool:
    """Whether weights_only loading rebuilds this value as it was."""
    if value is None or type(value) in (bool, int, float, str, Tensor, nn.Parameter):
        return True
    if type(value) in (list, tuple):
        return all(map(_storable, value))
    if type(value) is dict:
        return all(type(k) in (str, int) for k in value) and all(map(_storable, value.values()))
    return False


def _rng_snapshot() -> dict[str, Any]:
    name, key, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "random": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _restore_rng(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    np_state = rng["numpy"]
    np.random.set_state((np_state["name"], np_state["key"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached"]))
    py_state = rng["random"]
    random.setstate((py_state["version"], tuple(py_state["internal"]), py_state["gauss_next"]))
    # CUDA generators come back only where both sides have them
    if rng["cuda"] is not None and torch.cuda.is_available():
        for index, state in zip(range(torch.cuda.device_count()), rng["cuda"]):
            torch.cuda.set_rng_state(state, index)


def _fsync_directory(folder: str) -> None:
    with contextlib.suppress(OSError):
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _write_atomically(payload: dict[str, Any], target: str) -> None:
    """torch.save to a sibling temp file, fsync it, then rename it over target."""
    folder = os.path.dirname(os.path.abspath(target))
    descriptor, temp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_directory(folder)


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Atomically save model, optimizer, iteration, RNG states and extras."""
    target = _path(path)
    _need(model, nn.Module, "model")
    _need(optimizer, torch.optim.Optimizer, "optimizer")
    step = _count(iteration, "iteration")
    refused = [key for key, value in extra.items() if not _storable(value)]
    if refused:
        raise TypeError(f"extra value(s) {refused} cannot be saved: only tensors, None, bool/int/float/str and "
                        "lists, tuples and dicts (str or int keys) of those")
    payload = {
        "format": _FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": step,
        "rng": _rng_snapshot(),
        "extra": dict(extra),
    }
    _write_atomically(payload, target)


def _fits_model(saved: object, model: nn.Module) -> bool:
    current = model.state_dict()
    return (
        isinstance(saved, dict)
        and set(saved) == set(current)
        and all(isinstance(saved[k], Tensor) and saved[k].shape == v.shape for k, v in current.items())
    )


def _fits_optimizer(saved: object, optimizer: torch.optim.Optimizer) -> bool:
    if not (isinstance(saved, dict) and isinstance(saved.get("state"), dict)
            and isinstance(saved.get("param_groups"), list)):
        return False
    groups = saved["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        return False
    if not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
        return False
    if any(len(g["params"]) != len(live["params"]) for g, live in zip(groups, optimizer.param_groups)):
        return False
    # saved ids map onto the live params in order, as load_state_dict does
    owners = dict(zip((i for g in groups for i in g["params"]),
                      (p for live in optimizer.param_groups for p in live["params"])))
    shaped_like = lambda param, value: not isinstance(value, Tensor) or value.dim() == 0 or value.shape == param.shape  # noqa: E731
    return all(
        key in owners and isinstance(entry, dict) and all(shaped_like(owners[key], v) for v in entry.values())
        for key, entry in saved["state"].items()
    )


def _fits_rng(rng: object) -> bool:
    try:
        numpy_part, python_part = rng["numpy"], rng["random"]
        return (isinstance(rng["torch"], Tensor) and isinstance(numpy_part["key"], Tensor)
                and all(k in numpy_part for k in ("name", "pos", "has_gauss", "cached"))
                and all(k in python_part for k in ("version", "internal", "gauss_next"))
                and (rng["cuda"] is None or isinstance(rng["cuda"], (list, tuple))))
    except (KeyError, TypeError):
        return False


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Safely load a save_checkpoint file into model, optimizer and the RNGs."""
    source = _path(path)
    _need(model, nn.Module, "model")
    _need(optimizer, torch.optim.Optimizer, "optimizer")
    if extra is not None:
        _need(extra, dict, "extra")
    if not os.path.exists(source):
        raise FileNotFoundError(f"no checkpoint at {source!r}")
    try:
        payload = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, corrupt, foreign or unsafe
        raise ValueError(f"{source!r} is not a loadable checkpoint (truncated, corrupt or unsafe): {err}") from err
    if not (isinstance(payload, dict) and payload.get("format") == _FORMAT and _TOP_KEYS <= set(payload)):
        raise ValueError(f"{source!r} is not a checkpoint written by save_checkpoint")
    # every check before anything is loaded, so a mismatch changes nothing
    checks = (
        (_fits_model(payload["model"], model), "its model state does not fit the model (keys or shapes)"),
        (_fits_optimizer(payload["optimizer"], optimizer), "its optimizer state does not fit the optimizer"),
        (_fits_rng(payload["rng"]), "its RNG states are malformed"),
        (type(payload["iteration"]) is int and isinstance(payload["extra"], dict), "its iteration or extras are malformed"),
    )
    problems = [why for ok, why in checks if not ok]
    if problems:
        raise ValueError(f"checkpoint {source!r}: " + "; ".join(problems))
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    _restore_rng(payload["rng"])
    if extra is not None:
        extra.update(payload["extra"])
    return payload["iteration"]


# ---- the loop -------------------------------------------------------------------------

def _draw(batches: Iterable[tuple[Tensor, Tensor]], steps: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Exactly `steps` batches, pulled one at a time, or a ValueError."""
    source = iter(batches)
    for index in range(steps):
        batch = next(source, _MISSING)
        if batch is _MISSING:
            raise ValueError(f"batches ran out after {index} of {steps} steps")
        yield batch


def _report(number: int, total: int, every: int, loss: Tensor) -> Tensor:
    if every and number % every == 0:
        logger.info("step %d/%d: loss %.6f", number, total, float(loss))
    return loss


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    steps: int,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
    log_every: int = 0,
) -> list[float]:
    """Run `steps` steps over batches; losses synced once at the end."""
    _check_setup(model, optimizer, precision, scaler)
    total, every = _count(steps, "steps"), _count(log_every, "log_every")
    losses = [
        _report(number, total, every, _step(model, optimizer, x, y, precision, scaler))
        for number, (x, y) in enumerate(_draw(batches, total), start=1)
    ]
    return torch.stack(losses).tolist() if losses else []

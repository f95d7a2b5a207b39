"""Handout §6: mixed-precision steps, activation checkpointing, crash-safe
checkpoints and the training loop.

The loss is the mean-squared error between ``model(x)`` and ``y`` (the
Cruncher of §3.2 predicts one scalar per example), computed in fp32.
"""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
from collections.abc import Callable, Iterable
from contextlib import nullcontext, suppress
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ._validate import require_int

__all__ = ["checkpointed_forward", "load_checkpoint", "save_checkpoint", "train", "train_step"]

log = logging.getLogger(__name__)

_AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_FORMAT = "resource-lab-checkpoint"
_VERSION = 1
_KEYS = {"format", "version", "model", "optimizer", "iteration", "rng", "extra"}


def _precision(precision: Any, scaler: Any) -> torch.dtype | None:
    if not isinstance(precision, str):
        raise TypeError(f"precision must be one of {', '.join(map(repr, _AUTOCAST))}, got {precision!r}")
    if precision not in _AUTOCAST:
        raise ValueError(f"precision must be one of {', '.join(map(repr, _AUTOCAST))}, got {precision!r}")
    if precision == "fp16":
        if not isinstance(scaler, torch.amp.GradScaler):
            raise ValueError("precision='fp16' needs scaler=torch.amp.GradScaler(device): fp16 gradients "
                             f"underflow without loss scaling (got scaler={scaler!r})")
    elif scaler is not None:
        raise ValueError(f"a scaler is only used with precision='fp16', got one with precision={precision!r}")
    return _AUTOCAST[precision]


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor,
          dtype: torch.dtype | None, scaler: torch.amp.GradScaler | None) -> Tensor:
    """One step; returns the detached fp32 loss *on its device* (no host sync)."""
    optimizer.zero_grad(set_to_none=True)  # frees the grads instead of writing zeros
    # autocast runs matmuls in `dtype` on casted copies of the weights, so the
    # parameters, their grads and the optimizer state stay fp32 ("master weights").
    amp = nullcontext() if dtype is None else torch.autocast(device_type=x.device.type, dtype=dtype)
    with amp:
        out = model(x)
    if out.shape != y.shape:  # (B, 1) vs (B,) would silently broadcast to (B, B)
        raise ValueError(f"model(x) has shape {tuple(out.shape)} but y has shape {tuple(y.shape)}")
    loss = F.mse_loss(out.float(), y.float())
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        # Scale the loss so small fp16 gradients do not flush to zero; step()
        # unscales them and skips the update if any is inf/nan; update() backs
        # the scale off after a skipped step and grows it after a clean run.
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss.detach()


def _check_objects(model: Any, optimizer: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


def _check_batch(x: Any, y: Any) -> None:
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Float[Tensor, "batch ..."],
    y: Float[Tensor, "batch ..."],
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    """One optimizer step on ``mse_loss(model(x), y)``; returns the loss."""
    _check_objects(model, optimizer)
    _check_batch(x, y)
    dtype = _precision(precision, scaler)
    return float(_step(model, optimizer, x, y, dtype, scaler))


def _segments(layers: list[nn.Module]) -> list[list[nn.Module]]:
    # sqrt(L) segments of sqrt(L) layers: only segment inputs are kept, and
    # backward recomputes one segment at a time (Chen et al., 2016).
    size = max(1, math.isqrt(len(layers) - 1) + 1) if layers else 1
    return [layers[i : i + size] for i in range(0, len(layers), size)]


def _run(segment: list[nn.Module]) -> Callable[[Tensor], Tensor]:
    def forward(h: Tensor) -> Tensor:
        for layer in segment:
            h = layer(h)
        return h

    return forward


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """``model(x)`` with activation checkpointing, for an ``nn.Sequential`` or a
    Cruncher-like module (``layers`` ModuleList then ``final``, output squeezed).

    The contract: ``model(x)``'s outputs and gradients, and for L >= 9 layers
    (children, or entries of ``layers``) at most 3/4 of the bytes ``model(x)``
    saves for backward; segments of ceil(sqrt(L)) layers save at most 0.72."""
    final: nn.Module | None
    if isinstance(model, nn.Sequential):
        layers, final = list(model), None
    elif isinstance(stack := getattr(model, "layers", None), nn.ModuleList) and isinstance(
        last := getattr(model, "final", None), nn.Module
    ):
        layers, final = list(stack), last
    else:
        raise TypeError(
            "checkpointed_forward supports an nn.Sequential or a module with a `layers` "
            f"nn.ModuleList and a `final` module, got {type(model).__name__}"
        )
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    h = x
    for segment in _segments(layers):
        # use_reentrant=False: works when x needs no grad, supports autograd.grad
        # and nested hooks; it saves nothing inside the segment but its input.
        h = checkpoint(_run(segment), h, use_reentrant=False)
    if final is not None:
        h = final(h).squeeze(-1)
    return h


def _rng_state() -> dict[str, Any]:
    """Every RNG a training run draws from, as tensors/ints that weights_only loads."""
    legacy = np.random.get_state(legacy=True)  # legacy=True, the default, which numpy's stubs type as False
    assert isinstance(legacy, tuple), "the global RandomState is an MT19937, whose legacy state is a tuple"
    kind, keys, pos, has_gauss, gauss = legacy
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
                   "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_plain(name: str, value: Any) -> None:
    """``extra`` must hold what ``torch.load(weights_only=True)`` rebuilds: exact
    builtin types (an ``np.float64`` is a float subclass, which it refuses)."""
    if value is None or type(value) in (bool, int, float, str) or isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(f"{name}[{i}]", v)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if type(k) not in (str, int):
                raise TypeError(f"{name} has a key {k!r}: use str or int keys")
            _check_plain(f"{name}[{k!r}]", v)
        return
    raise TypeError(f"{name} is a {type(value).__name__}: extra values must be tensors, numbers, strings, "
                    "None, or lists/tuples/dicts of those, so that weights_only loading can read them")


def _fsync_dir(directory: str) -> None:
    """Make the rename itself durable (POSIX; not possible on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Atomically write model, optimizer, ``iteration``, RNG states and ``extra`` to ``path``
    (a save that raises removes its temporary file: the folder is left as it was)."""
    _check_objects(model, optimizer)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    iteration = require_int("iteration", iteration)
    for key, value in extra.items():
        _check_plain(key, value)
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    payload = {
        "format": _FORMAT,
        "version": _VERSION,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": iteration,
        "rng": _rng_state(),
        "extra": extra,
    }
    # Write a temporary file in the same directory (same filesystem, so the
    # rename is atomic), flush it to disk, then rename it over `path`: a crash
    # at any point leaves either the old checkpoint or the new one, never half.
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _read(path: str) -> dict[str, Any]:
    try:
        # weights_only=True: only tensors and plain containers are rebuilt, so a
        # crafted file cannot run code while loading (a pickle can).
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ValueError(f"{path} is not a readable checkpoint (truncated, corrupt or unsafe): "
                         f"{type(e).__name__}: {str(e)[:300]}") from e
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a checkpoint written by save_checkpoint")
    if payload.get("version") != _VERSION or set(payload) != _KEYS:
        raise ValueError(f"{path}: unsupported checkpoint layout (version {payload.get('version')!r})")
    return payload


def _check_fits(path: str, model: nn.Module, state: Any) -> None:
    """ValueError unless ``state`` has exactly ``model``'s state-dict keys, with the same shapes."""
    own = model.state_dict()
    if not isinstance(state, dict):
        raise ValueError(f"{path} does not fit this model: its model state is a {type(state).__name__}")
    missing, unexpected = sorted(own.keys() - state.keys()), sorted(state.keys() - own.keys())
    reshaped = sorted(k for k in own.keys() & state.keys()
                      if not isinstance(state[k], Tensor) or state[k].shape != own[k].shape)
    if missing or unexpected or reshaped:
        raise ValueError(f"{path} does not fit this model: missing keys {missing[:5]}, unexpected keys "
                         f"{unexpected[:5]}, other shapes {reshaped[:5]}")


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Restore model, optimizer and RNG states from ``path``; return the iteration."""
    _check_objects(model, optimizer)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    payload = _read(os.fspath(path))
    # load_state_dict copies every matching key before it raises on the others,
    # so a checkpoint that does not fit is refused before anything is loaded;
    # the optimizer's load checks its groups before it changes anything.
    _check_fits(os.fspath(path), model, payload["model"])
    try:
        optimizer.load_state_dict(payload["optimizer"])
        model.load_state_dict(payload["model"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise ValueError(f"{os.fspath(path)} does not fit this model/optimizer: {e}") from e
    _set_rng_state(payload["rng"])
    if extra is not None:
        extra.update(payload["extra"])
    return int(payload["iteration"])


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
    """Run ``steps`` steps on the first ``steps`` batches; return each step's loss.

    With ``log_every=k > 0``, one INFO record on this module's logger after
    each step whose 1-based number is a multiple of k, naming that step number;
    nothing else at INFO or above (and nothing with ``log_every=0``)."""
    _check_objects(model, optimizer)
    steps = require_int("steps", steps)
    log_every = require_int("log_every", log_every)
    dtype = _precision(precision, scaler)
    it = iter(batches)
    losses: Tensor | None = None
    for i in range(steps):
        try:
            x, y = next(it)
        except StopIteration:
            raise ValueError(f"batches ran out after {i} of {steps} steps") from None
        _check_batch(x, y)
        loss = _step(model, optimizer, x, y, dtype, scaler)
        if losses is None:
            # Losses stay on the device: writing into this buffer queues a copy,
            # while float(loss) would wait for the GPU every step.
            losses = torch.empty(steps, dtype=torch.float32, device=loss.device)
        losses[i] = loss
        if log_every and (i + 1) % log_every == 0:
            log.info("step %d/%d: loss %.6g", i + 1, steps, float(loss))  # the only sync: asked for
    return [] if losses is None else losses.tolist()

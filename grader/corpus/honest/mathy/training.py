"""§6  Mixed-precision steps, activation checkpointing, crash-safe checkpoints, the loop.

Loss:  l(theta) = (1/B) sum_i (f_theta(x_i) - y_i)^2, evaluated in fp32.
Step:  theta <- Opt(theta, grad l)  after  grad <- None.
Checkpointing a depth-L chain in k ~ sqrt(L) segments keeps O(sqrt L) inputs
instead of O(L) activations, for one extra forward.
"""

from __future__ import annotations

import io
import logging
import math
import numbers
import os
import random
import tempfile
from collections.abc import Callable, Iterable
from functools import reduce
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

log = logging.getLogger(__name__)

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = ("fp32", *HALF)
KEYS = {"model", "optimizer", "iteration", "rng", "extra"}


# ---------------------------------------------------------------- checks

def natural(n: object, name: str) -> int:
    """n in N, or TypeError / ValueError naming it."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return int(n)


def of_type(v: object, T: type | tuple[type, ...], name: str) -> None:
    if not isinstance(v, T):
        raise TypeError(f"{name} has the wrong type: {type(v).__name__}")


def check_setup(model, optimizer, precision, scaler) -> None:
    """(model, optimizer, precision, scaler) is a valid configuration."""
    of_type(model, nn.Module, "model")
    of_type(optimizer, torch.optim.Optimizer, "optimizer")
    of_type(precision, str, "precision")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {PRECISIONS}")
    if (precision == "fp16") != (scaler is not None):
        raise ValueError(f"scaler: fp16 needs a GradScaler and only fp16 takes one (precision={precision!r})")
    if scaler is not None:
        of_type(scaler, torch.amp.GradScaler, "scaler")


# ---------------------------------------------------------------- steps

def loss_of(model: nn.Module, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """l = mse(f(x), y) in fp32, f run under autocast for bf16 / fp16."""
    with torch.autocast(x.device.type, dtype=HALF.get(precision, torch.bfloat16), enabled=precision in HALF):
        out = model(x)
    if out.shape != y.shape:
        raise ValueError(f"y: model(x) has shape {tuple(out.shape)} but y has {tuple(y.shape)}")
    return F.mse_loss(out.float(), y.float())


def step_of(model, optimizer, x, y, precision, scaler) -> Tensor:
    """One step theta <- Opt(theta, grad l); returns l (detached, on the device)."""
    of_type(x, Tensor, "x")
    of_type(y, Tensor, "y")
    optimizer.zero_grad(set_to_none=True)
    l = loss_of(model, x, y, precision)
    if scaler is None:
        l.backward()
        optimizer.step()
    else:
        scaler.scale(l).backward()
        scaler.step(optimizer)
        scaler.update()
    return l.detach()


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Float[Tensor, "batch ..."],
    y: Float[Tensor, "batch ..."],
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    """l(theta) before the step, as a float."""
    check_setup(model, optimizer, precision, scaler)
    return float(step_of(model, optimizer, x, y, precision, scaler))


# ---------------------------------------------------------------- checkpointing

def chain(model: nn.Module) -> tuple[list[nn.Module], Callable[[Tensor], Tensor]]:
    """model = tail o f_L o ... o f_1: returns ([f_1, ..., f_L], tail)."""
    if isinstance(model, nn.Sequential):
        return list(model.children()), lambda h: h
    if isinstance(model, nn.Module) and isinstance(getattr(model, "layers", None), nn.Module) \
            and isinstance(getattr(model, "final", None), nn.Module):
        return list(model.layers), lambda h: model.final(h).squeeze(-1)
    raise TypeError(f"model must be an nn.Sequential or have `layers` and `final`, got {type(model).__name__}")


def compose(fs: list[nn.Module]) -> Callable[[Tensor], Tensor]:
    """f_k o ... o f_1"""
    return lambda h: reduce(lambda a, f: f(a), fs, h)


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """tail(S_k(... S_1(x))), each segment S_j of r = round(sqrt L) layers checkpointed."""
    fs, tail = chain(model)
    of_type(x, Tensor, "x")
    L = len(fs)
    r = max(1, round(math.sqrt(L)))
    h = x
    for j in range(0, L, r):
        h = checkpoint(compose(fs[j:j + r]), h, use_reentrant=False)
    return tail(h)


# ---------------------------------------------------------------- checkpoints on disk

def storable(v: object, where: str) -> None:
    """v is built from tensors, None, bool, int, float, str, lists, tuples and dicts."""
    if v is None or type(v) in (bool, int, float, str) or type(v) in (Tensor, nn.Parameter):
        return
    if type(v) in (list, tuple):
        for i, vi in enumerate(v):
            storable(vi, f"{where}[{i}]")
        return
    if type(v) is dict:
        for k, vk in v.items():
            if type(k) not in (str, int):
                raise TypeError(f"{where}: key {k!r} is neither a str nor an int")
            storable(vk, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where}: a {type(v).__name__} cannot be saved in a checkpoint")


def rng_states() -> dict[str, Any]:
    """The states of torch, NumPy, random (and CUDA), in weights_only-loadable form."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)),
        "random": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    name, keys, pos, has_gauss, gauss = s["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(tuple(tuple(a) if isinstance(a, list) else a for a in s["random"]))
    if torch.cuda.is_available():
        for i, state in enumerate(s["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, i)


def fsync_dir(d: str) -> None:
    """Make a rename inside d durable (where the OS lets a directory be opened)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: str, blob: bytes) -> None:
    """tmp <- blob; fsync(tmp); rename(tmp, path); fsync(dir).  A failure removes tmp."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(d)


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """path <- {model, optimizer, iteration, rng, extra}, atomically."""
    of_type(path, (str, os.PathLike), "path")
    of_type(model, nn.Module, "model")
    of_type(optimizer, torch.optim.Optimizer, "optimizer")
    t = natural(iteration, "iteration")
    storable(extra, "extra")
    buf = io.BytesIO()
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": t,
        "rng": rng_states(),
        "extra": dict(extra),
    }, buf)
    write_atomically(os.fspath(path), buf.getvalue())


def fits(ckpt: object, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """ckpt is ours and matches model (keys, shapes) and optimizer (groups, sizes); else ValueError."""
    if not isinstance(ckpt, dict) or set(ckpt) != KEYS or type(ckpt["iteration"]) is not int \
            or not isinstance(ckpt["model"], dict) or not isinstance(ckpt["optimizer"], dict) \
            or not isinstance(ckpt["rng"], dict) or not isinstance(ckpt["extra"], dict):
        raise ValueError("path: the file is not a checkpoint written by save_checkpoint")
    ours, theirs = model.state_dict(), ckpt["model"]
    if set(ours) != set(theirs):
        raise ValueError(f"model: the checkpoint's keys differ: {sorted(set(ours) ^ set(theirs))}")
    bad = [k for k in ours if not isinstance(theirs[k], Tensor) or theirs[k].shape != ours[k].shape]
    if bad:
        raise ValueError(f"model: the checkpoint's shapes differ for {bad}")
    n = [len(g["params"]) for g in optimizer.state_dict()["param_groups"]]
    groups = ckpt["optimizer"].get("param_groups")
    if not isinstance(groups, list) or [len(g.get("params", ())) for g in groups] != n:
        raise ValueError("optimizer: the checkpoint's parameter groups do not fit this optimizer")
    sizes = {i: p.shape for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    ids = [i for g in groups for i in g["params"]]
    for i, s in ckpt["optimizer"].get("state", {}).items():
        shape = sizes.get(ids.index(i)) if i in ids else None
        if shape is None or any(isinstance(v, Tensor) and v.dim() > 0 and v.shape != shape for v in s.values()):
            raise ValueError(f"optimizer: the checkpoint's state for parameter {i} does not fit")


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Restore model, optimizer, RNGs (and extra) from path; returns the iteration."""
    of_type(path, (str, os.PathLike), "path")
    of_type(model, nn.Module, "model")
    of_type(optimizer, torch.optim.Optimizer, "optimizer")
    if extra is not None:
        of_type(extra, dict, "extra")
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no checkpoint at {p}")
    try:
        ckpt = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as err:
        raise ValueError(f"path: {p} is truncated, corrupt, unsafe or not a checkpoint ({err})") from None
    try:
        fits(ckpt, model, optimizer)
    except (AttributeError, KeyError, TypeError, IndexError) as err:
        raise ValueError(f"path: {p} is not a checkpoint of save_checkpoint ({err})") from None
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    set_rng_states(ckpt["rng"])
    if extra is not None:
        extra.update(ckpt["extra"])
    return ckpt["iteration"]


# ---------------------------------------------------------------- the loop

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
    """(l_1, ..., l_steps), one batch drawn per step; losses stay on the device until the end."""
    check_setup(model, optimizer, precision, scaler)
    n, k = natural(steps, "steps"), natural(log_every, "log_every")
    batch = iter(batches)
    losses: list[Tensor] = []
    for i in range(1, n + 1):
        try:
            x, y = next(batch)
        except StopIteration:
            raise ValueError(f"batches: ran out after {i - 1} of steps={n} batches") from None
        losses.append(step_of(model, optimizer, x, y, precision, scaler))
        if k and i % k == 0:
            log.info("step %d/%d: loss %.6g", i, n, float(losses[-1]))
    return torch.stack(losses).tolist() if losses else []

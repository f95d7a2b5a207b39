"""Handout §6: mixed-precision steps, activation checkpointing, crash-safe checkpoints, the loop."""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
from collections.abc import Iterable
from functools import reduce
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

log = logging.getLogger(__name__)
_AMP = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_MAGIC = "vectorised-checkpoint/1"


def _is(x, cls, name):
    """isinstance or TypeError naming the argument."""
    if not isinstance(x, cls):
        raise TypeError(f"{name} must be {getattr(cls, '__name__', cls)}, got {type(x).__name__}")
    return x


def _nat(n, name):
    """Validate an int >= 0."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _setup(model, optimizer, precision, scaler):
    """Validate the step's configuration."""
    _is(model, nn.Module, "model")
    _is(optimizer, torch.optim.Optimizer, "optimizer")
    _is(precision, str, "precision")
    if precision not in _AMP:
        raise ValueError(f"precision must be one of {list(_AMP)}, got {precision!r}")
    if (precision == "fp16") != (scaler is not None):
        raise ValueError(f"precision {precision!r} needs a GradScaler exactly when it is 'fp16' (scaler={scaler!r})")
    if scaler is not None:
        _is(scaler, torch.amp.GradScaler, "scaler")


def _step(model, optimizer, x, y, precision, scaler):
    """One step; returns the detached fp32 loss on its device."""
    _is(x, Tensor, "x")
    _is(y, Tensor, "y")
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=_AMP[precision] or torch.bfloat16, enabled=precision != "fp32"):
        out = model(x)
    if out.shape != y.shape:
        raise ValueError(f"model(x) has shape {tuple(out.shape)} but y has {tuple(y.shape)}")
    loss = F.mse_loss(out.float(), y.float())
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
    """One MSE step in the given precision; returns the loss."""
    _setup(model, optimizer, precision, scaler)
    return float(_step(model, optimizer, x, y, precision, scaler))


def _chain(seg):
    """Compose modules left to right."""
    return lambda h: reduce(lambda a, m: m(a), seg, h)


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """model(x) with ~sqrt(L) checkpointed segments of ~sqrt(L) layers."""
    _is(x, Tensor, "x")
    if isinstance(model, nn.Sequential):
        mods, head = list(model), None
    elif isinstance(getattr(model, "layers", None), (nn.ModuleList, nn.Sequential)) and isinstance(
        getattr(model, "final", None), nn.Module
    ):
        mods, head = list(model.layers), model.final
    else:
        raise TypeError(f"model must be an nn.Sequential or have `layers` and `final`, got {type(model).__name__}")
    k = max(1, round(math.sqrt(len(mods))))
    h = x
    for seg in (mods[i:i + k] for i in range(0, len(mods), k)):
        h = checkpoint(_chain(seg), h, use_reentrant=False)
    return h if head is None else head(h).squeeze(-1)


def _plain(v, where):
    """Refuse values torch.load(weights_only=True) would not read back."""
    if v is None or type(v) in (bool, int, float, str, Tensor, nn.Parameter):
        return
    if type(v) not in (list, tuple, dict):
        raise TypeError(f"{where}: {type(v).__name__} cannot be saved in a checkpoint")
    if type(v) is dict and (bad := [k for k in v if type(k) not in (str, int)]):
        raise TypeError(f"{where}: dict keys {bad!r} must be str or int")
    for u in v.values() if type(v) is dict else v:
        _plain(u, where)


def _rng():
    """Every RNG state as weights_only-safe values."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)),
        "random": random.getstate(),
    }


def _fsync_dir(d):
    """Flush a directory entry (best effort where unsupported)."""
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


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Atomically save model, optimizer, iteration, RNG states and extras."""
    _is(path, (str, os.PathLike), "path")
    _is(model, nn.Module, "model")
    _is(optimizer, torch.optim.Optimizer, "optimizer")
    _nat(iteration, "iteration")
    for k, v in extra.items():
        _plain(v, f"extra {k!r}")
    obj = {"format": _MAGIC, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
           "iteration": iteration, "rng": _rng(), "extra": dict(extra)}
    p = os.path.abspath(os.fspath(path))
    d = os.path.dirname(p)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(p)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(d)


def _fits(ck, model, optimizer):
    """Raise ValueError unless the checkpoint matches model and optimizer."""
    own, sd = model.state_dict(), ck["model"]
    if not isinstance(sd, dict) or set(sd) != set(own):
        raise ValueError(f"checkpoint's model keys differ from the model's: {sorted(set(sd) ^ set(own))}")
    bad = [k for k, v in sd.items() if not isinstance(v, Tensor) or v.shape != own[k].shape]
    if bad:
        raise ValueError(f"checkpoint's tensors do not fit the model: {bad}")
    osd, groups = ck["optimizer"], optimizer.param_groups
    if not isinstance(osd, dict) or not {"state", "param_groups"} <= set(osd):
        raise ValueError("checkpoint's optimizer state is malformed")
    if len(osd["param_groups"]) != len(groups) or any(
        len(a["params"]) != len(b["params"]) for a, b in zip(osd["param_groups"], groups)
    ):
        raise ValueError("checkpoint's optimizer param groups do not fit the optimizer")
    for a, b in zip(osd["param_groups"], groups):
        for i, p in zip(a["params"], b["params"]):
            if any(isinstance(v, Tensor) and v.dim() and v.shape != p.shape for v in osd["state"].get(i, {}).values()):
                raise ValueError("checkpoint's optimizer state does not fit the parameters")


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Safely load a checkpoint, restore everything, return the iteration."""
    _is(path, (str, os.PathLike), "path")
    _is(model, nn.Module, "model")
    _is(optimizer, torch.optim.Optimizer, "optimizer")
    if extra is not None:
        _is(extra, dict, "extra")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {os.fspath(path)!r}")
    try:
        ck = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:
        raise ValueError(f"{os.fspath(path)!r} is truncated, corrupt or unsafe: {e}") from e
    if not isinstance(ck, dict) or ck.get("format") != _MAGIC:
        raise ValueError(f"{os.fspath(path)!r} is not a checkpoint of save_checkpoint")
    try:
        it, r, ex = ck["iteration"], ck["rng"], ck["extra"]
        name, keys, pos, has_gauss, gauss = r["numpy"]
        np_state = (name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss)
        py_state = (r["random"][0], tuple(r["random"][1]), r["random"][2])
        cpu_state, cuda_state = r["torch"], r["cuda"]
    except Exception as e:
        raise ValueError(f"{os.fspath(path)!r} is not a valid checkpoint: {e!r}") from e
    if type(it) is not int or not isinstance(ex, dict) or not isinstance(cpu_state, Tensor):
        raise ValueError(f"{os.fspath(path)!r} is not a valid checkpoint")
    _fits(ck, model, optimizer)
    model.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck["optimizer"])
    torch.set_rng_state(cpu_state)
    np.random.set_state(np_state)
    random.setstate(py_state)
    if cuda_state is not None and torch.cuda.is_available():
        for i, s in enumerate(cuda_state[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, i)
    if extra is not None:
        extra.update(ex)
    return it


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
    """Run steps steps, one batch each; losses stay on device until the end."""
    _setup(model, optimizer, precision, scaler)
    n, k = _nat(steps, "steps"), _nat(log_every, "log_every")
    it, losses = iter(batches), []
    for i in range(1, n + 1):
        try:
            x, y = next(it)
        except StopIteration:
            raise ValueError(f"batches ran out after {i - 1} of {n} steps") from None
        losses.append(_step(model, optimizer, x, y, precision, scaler))
        if k and i % k == 0:
            log.info("step %d/%d: loss %.6g", i, n, float(losses[-1]))
    return torch.stack(losses).tolist() if losses else []

"""Handout §6: mixed precision steps, activation checkpointing, safe checkpoints, the loop."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import tempfile
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

log = logging.getLogger(__name__)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Float[Tensor, "batch ..."],
    y: Float[Tensor, "batch ..."],
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a tensor, got {type(y).__name__}")
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a str, got {type(precision).__name__}")
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}")
    if precision == "fp16":
        if scaler is None:
            raise ValueError("precision 'fp16' needs a scaler (torch.amp.GradScaler)")
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
    elif scaler is not None:
        raise ValueError(f"scaler is only used with precision 'fp16', got precision {precision!r}")

    if precision == "fp32":
        ctx = contextlib.nullcontext()
    else:
        dt = torch.bfloat16 if precision == "bf16" else torch.float16
        ctx = torch.autocast(device_type=x.device.type, dtype=dt)
    optimizer.zero_grad(set_to_none=True)
    with ctx:
        out = model(x)
    if out.shape != y.shape:
        raise ValueError(f"model(x) has shape {tuple(out.shape)} but y has shape {tuple(y.shape)}")
    loss = F.mse_loss(out.float(), y.float())
    if precision == "fp16":
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if isinstance(model, nn.Sequential):
        mods = list(model.children())
        final = None
    elif (
        isinstance(model, nn.Module)
        and isinstance(getattr(model, "layers", None), nn.ModuleList)
        and isinstance(getattr(model, "final", None), nn.Module)
    ):
        mods = list(model.layers)
        final = model.final
    else:
        raise TypeError(
            f"model must be an nn.Sequential or have a 'layers' ModuleList and a 'final' module, "
            f"got {type(model).__name__}"
        )
    n = len(mods)
    k = max(1, round(math.sqrt(n)))
    h = x
    for i in range(0, n, k):
        seg = mods[i:i + k]

        def run(t, seg=seg):
            for m in seg:
                t = m(t)
            return t

        h = checkpoint(run, h, use_reentrant=False)
    if final is not None:
        h = final(h).squeeze(-1)
    return h


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise TypeError(f"iteration must be an int, got {type(iteration).__name__}")
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")

    def ok(v, where):
        if v is None or isinstance(v, torch.Tensor) or type(v) in (bool, int, float, str):
            return
        if type(v) in (list, tuple):
            for i, e in enumerate(v):
                ok(e, f"{where}[{i}]")
            return
        if type(v) is dict:
            for kk, e in v.items():
                if type(kk) not in (str, int):
                    raise TypeError(f"extra {where}: dict key {kk!r} is not a str or int")
                ok(e, f"{where}[{kk!r}]")
            return
        raise TypeError(f"extra {where}: {type(v).__name__} cannot be saved (weights_only loading refuses it)")

    for name, v in extra.items():
        ok(v, name)

    np_st = np.random.get_state(legacy=False)
    rng = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": np_st["bit_generator"],
            "key": torch.from_numpy(np_st["state"]["key"].astype(np.int64)),
            "pos": int(np_st["state"]["pos"]),
            "has_gauss": int(np_st["has_gauss"]),
            "gauss": float(np_st["gauss"]),
        },
        "random": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    obj = {
        "format": "hurried-checkpoint-v1",
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": iteration,
        "rng": rng,
        "extra": dict(extra),
    }

    p = os.path.abspath(os.fspath(path))
    d = os.path.dirname(p)
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(p) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no checkpoint at path {p!r}")
    if os.path.isdir(p):
        raise ValueError(f"path {p!r} is a directory, not a checkpoint")
    try:
        ck = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as e:
        raise ValueError(f"{p!r} is not a loadable checkpoint (truncated, corrupt or unsafe): {e}") from e

    if not isinstance(ck, dict) or ck.get("format") != "hurried-checkpoint-v1":
        raise ValueError(f"{p!r} is not a checkpoint written by save_checkpoint")
    for k in ("model", "optimizer", "iteration", "rng", "extra"):
        if k not in ck:
            raise ValueError(f"checkpoint {p!r} is missing {k!r}")
    msd = ck["model"]
    osd = ck["optimizer"]
    rng = ck["rng"]
    it = ck["iteration"]
    if not isinstance(msd, dict) or not isinstance(osd, dict) or not isinstance(rng, dict):
        raise ValueError(f"checkpoint {p!r} is malformed")
    if isinstance(it, bool) or not isinstance(it, int) or it < 0:
        raise ValueError(f"checkpoint {p!r} holds a bad iteration {it!r}")
    if not isinstance(ck["extra"], dict):
        raise ValueError(f"checkpoint {p!r} holds malformed extras")

    cur = model.state_dict()
    if set(cur) != set(msd):
        miss = sorted(set(cur) - set(msd))
        more = sorted(set(msd) - set(cur))
        raise ValueError(f"checkpoint does not fit the model: missing keys {miss[:5]}, unexpected keys {more[:5]}")
    for k, v in cur.items():
        w = msd[k]
        if isinstance(v, torch.Tensor):
            if not isinstance(w, torch.Tensor) or w.shape != v.shape:
                got = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
                raise ValueError(f"checkpoint does not fit the model: {k} is {got}, model has {tuple(v.shape)}")

    if "state" not in osd or "param_groups" not in osd:
        raise ValueError("checkpoint's optimizer state is malformed")
    sg = osd["param_groups"]
    if not isinstance(sg, list) or len(sg) != len(optimizer.param_groups):
        raise ValueError("checkpoint does not fit the optimizer: different number of param groups")
    ids = {}
    for g_saved, g in zip(sg, optimizer.param_groups):
        if not isinstance(g_saved, dict) or len(g_saved.get("params", [])) != len(g["params"]):
            raise ValueError("checkpoint does not fit the optimizer: a param group has another size")
        for i, q in zip(g_saved["params"], g["params"]):
            ids[i] = q
    if not isinstance(osd["state"], dict):
        raise ValueError("checkpoint's optimizer state is malformed")
    for i, s in osd["state"].items():
        if i not in ids:
            raise ValueError(f"checkpoint does not fit the optimizer: state for unknown param {i!r}")
        if isinstance(s, dict):
            for kk, v in s.items():
                if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape != ids[i].shape:
                    raise ValueError(
                        f"checkpoint does not fit the optimizer: state {kk} of shape {tuple(v.shape)} "
                        f"for a param of shape {tuple(ids[i].shape)}"
                    )

    ts = rng.get("torch")
    ns = rng.get("numpy")
    rs = rng.get("random")
    if not isinstance(ts, torch.Tensor) or not isinstance(ns, dict) or not isinstance(rs, (tuple, list)):
        raise ValueError("checkpoint's RNG states are malformed")
    try:
        np_state = (
            ns["bit_generator"],
            ns["key"].numpy().astype(np.uint32),
            int(ns["pos"]),
            int(ns["has_gauss"]),
            float(ns["gauss"]),
        )
        py_state = (rs[0], tuple(rs[1]), rs[2])
    except Exception as e:
        raise ValueError(f"checkpoint's RNG states are malformed: {e}") from e

    model.load_state_dict(msd)
    optimizer.load_state_dict(osd)
    torch.set_rng_state(ts)
    np.random.set_state(np_state)
    random.setstate(py_state)
    cs = rng.get("cuda")
    if cs is not None and torch.cuda.is_available():
        for i in range(min(len(cs), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cs[i], i)
    if extra is not None:
        extra.update(ck["extra"])
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
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise TypeError(f"steps must be an int, got {type(steps).__name__}")
    if isinstance(log_every, bool) or not isinstance(log_every, int):
        raise TypeError(f"log_every must be an int, got {type(log_every).__name__}")
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a str, got {type(precision).__name__}")
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}")
    if precision == "fp16":
        if scaler is None:
            raise ValueError("precision 'fp16' needs a scaler (torch.amp.GradScaler)")
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
    elif scaler is not None:
        raise ValueError(f"scaler is only used with precision 'fp16', got precision {precision!r}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if log_every < 0:
        raise ValueError(f"log_every must be >= 0, got {log_every}")
    try:
        src = iter(batches)
    except TypeError:
        raise TypeError(f"batches must be an iterable of (x, y), got {type(batches).__name__}") from None

    dt = torch.bfloat16 if precision == "bf16" else torch.float16
    losses = None
    for i in range(steps):
        try:
            b = next(src)
        except StopIteration:
            raise ValueError(f"batches ran out after {i} of {steps} steps") from None
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise ValueError(f"each batch must be a pair (x, y), got {type(b).__name__}")
        x, y = b
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a tensor, got {type(x).__name__}")
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"y must be a tensor, got {type(y).__name__}")

        optimizer.zero_grad(set_to_none=True)
        if precision == "fp32":
            out = model(x)
        else:
            with torch.autocast(device_type=x.device.type, dtype=dt):
                out = model(x)
        if out.shape != y.shape:
            raise ValueError(f"model(x) has shape {tuple(out.shape)} but y has shape {tuple(y.shape)}")
        loss = F.mse_loss(out.float(), y.float())
        if precision == "fp16":
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

        if losses is None:
            losses = torch.empty(steps, dtype=torch.float32, device=loss.device)
        losses[i] = loss.detach()
        if log_every > 0 and (i + 1) % log_every == 0:
            log.info("step %d/%d: loss %.6f", i + 1, steps, float(loss.detach()))
    if losses is None:
        return []
    return [float(v) for v in losses.tolist()]

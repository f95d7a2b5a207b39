"""Written from the handout alone: ceil(sqrt(L)) nearly equal checkpoint segments, mkstemp + fsync + os.replace saves, losses stacked once at the end of train.

Handout §6: mixed-precision steps, activation checkpointing, crash-safe
checkpoints and the training loop.

The loss throughout is the mean-squared error ``F.mse_loss(out, y)`` between
``out = model(x)`` and ``y``, computed in fp32 (the Cruncher of §3.2 predicts
one scalar per example). ``precision`` is one of:

* ``"fp32"``: everything in float32;
* ``"bf16"``: the forward pass under ``torch.autocast(device_type, torch.bfloat16)``
  (on the CPU too); parameters, gradients and optimizer state stay float32
  ("master weights");
* ``"fp16"``: the same with float16, plus a ``torch.amp.GradScaler`` (required)
  that scales the loss, unscales the gradients and skips a step whose
  gradients hold inf/nan.
"""

from __future__ import annotations

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
from torch.utils.checkpoint import checkpoint
from jaxtyping import Float
from torch import Tensor, nn



logger = logging.getLogger(__name__)

_PRECISIONS = ("fp32", "bf16", "fp16")
_FORMAT = "indepB-training-checkpoint"
_FORMAT_VERSION = 1


def _check_setup(model: Any, optimizer: Any, precision: Any, scaler: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a str, got {type(precision).__name__}")
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {_PRECISIONS}, got {precision!r}")
    if precision == "fp16":
        if not isinstance(scaler, torch.amp.GradScaler):
            raise ValueError(
                f"precision 'fp16' needs a torch.amp.GradScaler as scaler, got {type(scaler).__name__}"
            )
    elif scaler is not None:
        raise ValueError(f"scaler is only used with precision 'fp16', not with {precision!r}")


def _one_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Any, y: Any, precision: str,
              scaler: torch.amp.GradScaler | None) -> Tensor:
    """One step; returns the detached fp32 loss tensor (no host sync)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a tensor, got {type(y).__name__}")
    optimizer.zero_grad(set_to_none=True)
    if precision == "fp32":
        out = model(x)
    else:
        amp_dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        with torch.autocast(device_type=x.device.type, dtype=amp_dtype):
            out = model(x)
    if tuple(out.shape) != tuple(y.shape):
        raise ValueError(
            f"model(x) has shape {tuple(out.shape)} but y has shape {tuple(y.shape)}: "
            "mse_loss would broadcast them"
        )
    # The loss in fp32, outside autocast.
    if out.dtype in (torch.float16, torch.bfloat16):
        out = out.float()
    target = y.to(device=out.device, dtype=out.dtype)
    loss = F.mse_loss(out, target)
    if precision == "fp16":
        assert scaler is not None
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
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
    """One optimizer step on ``mse_loss(model(x), y)``: zero the gradients
    (``set_to_none=True``), forward in ``precision``, backward, step. Returns
    the loss (before the step) as a Python float; with ``"fp16"`` that is the
    loss itself, not the scaled loss the scaler backpropagates.

    With ``"bf16"``/``"fp16"`` the parameters and the optimizer state remain
    float32. With ``"fp16"`` the step goes through ``scaler`` (``scale``,
    ``step``, ``update``): a step with inf/nan gradients leaves the parameters
    unchanged and lowers the scale.

    Raises:
        TypeError: ``model``/``optimizer`` are not an ``nn.Module`` /
            ``torch.optim.Optimizer``, ``x``/``y`` are not tensors, or
            ``precision`` is not a str.
        ValueError: ``precision`` is not "fp32", "bf16" or "fp16"; "fp16"
            without a ``torch.amp.GradScaler``, or a scaler with another
            precision; ``model(x)`` and ``y`` have different shapes.
    """
    _check_setup(model, optimizer, precision, scaler)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a tensor, got {type(y).__name__}")
    return float(_one_step(model, optimizer, x, y, precision, scaler).item())


def _segments(n: int) -> list[tuple[int, int]]:
    """Split range(n) into ceil(sqrt(n)) contiguous, nearly equal segments."""
    if n == 0:
        return []
    k = math.ceil(math.sqrt(n))
    base, extra = divmod(n, k)
    bounds = []
    lo = 0
    for i in range(k):
        size = base + (1 if i < extra else 0)
        bounds.append((lo, lo + size))
        lo += size
    return bounds


def _run_modules(modules: list[nn.Module]):
    def run(h: Tensor) -> Tensor:
        for m in modules:
            h = m(h)
        return h
    return run


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """The same output (and, after backward, the same gradients) as
    ``model(x)``, with activation checkpointing
    (``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``): fewer
    tensors are saved for backward, and backward recomputes them.

    ``x`` may or may not require grad (the parameters get their gradients
    either way), and may have several leading dimensions (``(batch, seq,
    dim)``): the output has ``model(x)``'s shape. Dropout layers draw their masks once: with torch's RNG seeded
    alike before the call, output and gradients equal ``model(x)``'s.

    Supported models: an ``nn.Sequential`` (its children in order), or a
    Cruncher-like module with a ``layers`` ``nn.ModuleList`` and a ``final``
    module, whose forward is ``final(layers[-1](...layers[0](x)...)).squeeze(-1)``.

    Required: the outputs and gradients of ``model(x)``; and for L >= 9 layers
    (L: the ``nn.Sequential``'s children, or the entries of ``layers``), at
    most 3/4 of the bytes ``model(x)`` saves for backward. Any split of the L
    layers into about sqrt(L) contiguous segments (of floor, round or ceil of
    sqrt(L) layers, or that many segments) achieves it; checkpointing each
    layer alone does not.

    Raises:
        TypeError: ``model`` has neither structure (also when it has only one of
            ``layers`` and ``final``), or ``x`` is not a tensor.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if isinstance(model, nn.Sequential):
        layers = list(model.children())
        final = None
    else:
        layer_list = getattr(model, "layers", None)
        final = getattr(model, "final", None)
        if not isinstance(layer_list, (nn.ModuleList, nn.Sequential)) or not isinstance(final, nn.Module):
            raise TypeError(
                "model must be an nn.Sequential or have both a `layers` nn.ModuleList and a `final` module"
            )
        layers = list(layer_list)
    h = x
    for lo, hi in _segments(len(layers)):
        h = checkpoint(_run_modules(layers[lo:hi]), h, use_reentrant=False)
    if final is None:
        return h
    return final(h).squeeze(-1)


# ----------------------------------------------------------------- checkpoints


def _check_plain(value: Any, where: str) -> None:
    """TypeError unless ``value`` is plain data that weights_only can load."""
    # Exactly these types: weights_only loading refuses subclasses (an np.float64 is a float).
    if value is None or type(value) in (bool, int, float, complex, str) or isinstance(value, torch.Tensor):
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor and not isinstance(value, nn.Parameter):
            raise TypeError(f"{where}: tensor subclass {type(value).__name__} is not plain data")
        return
    if isinstance(value, (list, tuple)):
        if type(value) not in (list, tuple):
            raise TypeError(f"{where}: {type(value).__name__} is not plain data (use a list or tuple)")
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        if type(value) is not dict:
            raise TypeError(f"{where}: {type(value).__name__} is not plain data (use a dict)")
        for k, v in value.items():
            if not (k is None or isinstance(k, (bool, int, float, str))):
                raise TypeError(f"{where}: dict key {k!r} is not plain data")
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where}: {type(value).__name__} is not plain data")


def _rng_snapshot() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss = random.getstate()
    snap: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "random": [int(py_version), [int(v) for v in py_internal], py_gauss],
        "cuda": None,
    }
    if torch.cuda.is_available():
        snap["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    return snap


def _rng_restore(snap: dict[str, Any]) -> None:
    torch.set_rng_state(snap["torch"].cpu())
    npst = snap["numpy"]
    np.random.set_state((
        npst["name"],
        npst["keys"].cpu().numpy().astype(np.uint32),
        int(npst["pos"]),
        int(npst["has_gauss"]),
        float(npst["cached_gaussian"]),
    ))
    version, internal, gauss = snap["random"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    cuda_states = snap.get("cuda")
    if cuda_states is not None and torch.cuda.is_available():
        for i in range(min(len(cuda_states), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda_states[i].cpu(), device=i)


def _check_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"path must be a str path, got {type(p).__name__}")
    return p


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Save the model's and the optimizer's ``state_dict()``, ``iteration``,
    the RNG states of torch, NumPy's global RNG and ``random`` (and CUDA's when
    available), and ``extra`` (tensors, numbers, strings, None, and
    lists/tuples/dicts of those) to ``path``.

    Atomic: write a temporary file in the same directory, flush and
    ``os.fsync`` it, then ``os.replace`` it onto ``path``. A crash at any moment
    leaves the previous file at ``path`` intact; a save that raises (the
    state cannot be written) also removes its temporary file before the
    exception propagates, leaving the folder as it was.

    Raises:
        TypeError: ``path`` is not a str/PathLike, ``model``/``optimizer`` are
            not a module/optimizer, ``iteration`` is not an int, or an extra
            value is not plain data.
        ValueError: ``iteration`` is negative.
    """
    p = _check_path(path)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise TypeError(f"iteration must be an int, got {type(iteration).__name__}")
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    for key, value in extra.items():
        _check_plain(value, f"extra {key!r}")

    payload = {
        "format": _FORMAT,
        "version": _FORMAT_VERSION,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": int(iteration),
        "rng": _rng_snapshot(),
        "extra": dict(extra),
    }

    target = os.path.abspath(p)
    directory = os.path.dirname(target)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(target) + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Load a checkpoint written by ``save_checkpoint`` with
    ``torch.load(..., weights_only=True)`` (never unpickle arbitrary objects),
    restore the model, the optimizer and every RNG state, fill ``extra`` (when
    given) with the saved extras, and return the saved iteration. A checkpoint
    written where CUDA is absent loads where it is available, and the other
    way round (CUDA's generators are restored only where both have CUDA). Continuing
    from here reproduces an uninterrupted run bit for bit on the CPU.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        TypeError: ``path``, ``model``, ``optimizer`` or ``extra`` has the
            wrong type.
        ValueError: the file is truncated, corrupt, unsafe (holds objects
            ``weights_only`` refuses) or not a checkpoint of
            ``save_checkpoint``, or does not fit ``model``/``optimizer``.
    """
    p = _check_path(path)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no checkpoint at path {p!r}")
    map_location = None if torch.cuda.is_available() else "cpu"
    try:
        payload = torch.load(p, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise ValueError(
            f"checkpoint {p!r} could not be loaded safely: it is truncated, corrupt, unsafe or "
            f"not a checkpoint ({type(err).__name__}: {str(err)[:300]})"
        ) from err
    required = ("model", "optimizer", "iteration", "rng", "extra")
    if (not isinstance(payload, dict) or payload.get("format") != _FORMAT
            or any(k not in payload for k in required)):
        raise ValueError(f"{p!r} is not a checkpoint written by save_checkpoint")
    iteration = payload["iteration"]
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise ValueError(f"{p!r} is not a checkpoint written by save_checkpoint (bad iteration)")

    # Check that the model state fits before touching anything.
    saved_model = payload["model"]
    if not isinstance(saved_model, dict):
        raise ValueError(f"{p!r}: the model state is not a state dict")
    current = model.state_dict()
    if set(saved_model) != set(current):
        missing = sorted(set(current) - set(saved_model))
        unexpected = sorted(set(saved_model) - set(current))
        raise ValueError(
            f"checkpoint does not fit the model: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}"
        )
    for k, v in current.items():
        sv = saved_model[k]
        if isinstance(v, torch.Tensor) and (not isinstance(sv, torch.Tensor) or sv.shape != v.shape):
            raise ValueError(f"checkpoint does not fit the model: {k!r} has another shape")
    try:
        optimizer.load_state_dict(payload["optimizer"])
    except (ValueError, KeyError, RuntimeError, TypeError) as err:
        raise ValueError(f"checkpoint does not fit the optimizer: {err}") from err
    try:
        model.load_state_dict(saved_model)
    except (RuntimeError, KeyError, TypeError) as err:
        raise ValueError(f"checkpoint does not fit the model: {err}") from err
    try:
        _rng_restore(payload["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"checkpoint {p!r} holds invalid RNG states: {err}") from err
    if extra is not None:
        extra.update(payload["extra"])
    return int(iteration)


# ----------------------------------------------------------------- the loop


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
    """Run ``steps`` training steps (as ``train_step``) and return the list of
    their losses.

    Draws exactly one ``(x, y)`` from ``batches`` just before each step (no
    read-ahead, so the RNG states a checkpoint saves between two calls are
    those of the next batch). No per-step host synchronisation: keep the
    losses on the device and convert them once at the end; with
    ``log_every=k > 0`` the loss is also logged (a sync) every k steps.

    Logging: with ``log_every=k > 0``, after each step whose 1-based number
    is a multiple of k (steps k, 2k, ...) ``train`` emits exactly one record
    at level INFO through the standard ``logging`` module, on a logger that
    propagates to the root (``logging.getLogger(__name__)`` does), and the
    record's message names that step number as an integer (any wording, e.g.
    ``"step 6/10: loss 0.25"``); it logs nothing else at INFO or above. With
    ``log_every=0`` (the default) it logs nothing at INFO or above.

    Raises:
        TypeError: as ``train_step``, or ``steps``/``log_every`` not ints.
        ValueError: as ``train_step``; ``steps`` or ``log_every`` negative;
            ``batches`` runs out before ``steps`` batches.
    """
    _check_setup(model, optimizer, precision, scaler)
    for name, v in (("steps", steps), ("log_every", log_every)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    try:
        it = iter(batches)
    except TypeError as err:
        raise TypeError(f"batches must be an iterable of (x, y) pairs, got {type(batches).__name__}") from err
    losses: list[Tensor] = []
    for i in range(steps):
        try:
            batch = next(it)
        except StopIteration:
            raise ValueError(f"batches ran out after {i} batches, {steps} steps were asked for") from None
        try:
            x, y = batch
        except (TypeError, ValueError) as err:
            raise TypeError(f"batch {i} is not an (x, y) pair") from err
        loss = _one_step(model, optimizer, x, y, precision, scaler)
        losses.append(loss)
        step = i + 1
        if log_every and step % log_every == 0:
            logger.info("step %d/%d: loss %.6g", step, steps, float(loss))
    if not losses:
        return []
    return [float(v) for v in torch.stack(losses).cpu().tolist()]

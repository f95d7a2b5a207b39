"""Handout §6: mixed-precision steps, activation checkpointing, crash-safe checkpoints, the loop."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import pickle
import random
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

_LOGGER = logging.getLogger(__name__)

_FP32 = "fp32"
_BF16 = "bf16"
_FP16 = "fp16"
_AUTOCAST_DTYPES: dict[str, torch.dtype] = {_BF16: torch.bfloat16, _FP16: torch.float16}
_PRECISIONS = frozenset({_FP32, _BF16, _FP16})

# Marker that tells our checkpoints apart from any other pickle.
_CHECKPOINT_FORMAT = "defensive-training-checkpoint/1"
_CHECKPOINT_KEYS = frozenset({"format", "model", "optimizer", "iteration", "rng", "extra"})
_RNG_KEYS = frozenset({"torch", "numpy", "python", "cuda"})
_NUMPY_RNG_KEYS = frozenset({"algorithm", "keys", "position", "has_gauss", "cached_gaussian"})
_EXTRA_SCALAR_TYPES: tuple[type, ...] = (bool, int, float, str)
_EXTRA_KEY_TYPES: tuple[type, ...] = (str, int)
_TEMP_SUFFIX = ".partial"


# --------------------------------------------------------------------------- #
# private validation helpers
# --------------------------------------------------------------------------- #
def _require_module(name: str, value: object) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"'{name}' has to be an nn.Module, got {type(value).__name__}")
    return value


def _require_optimizer(name: str, value: object) -> torch.optim.Optimizer:
    if not isinstance(value, torch.optim.Optimizer):
        raise TypeError(f"'{name}' has to be a torch.optim.Optimizer, got {type(value).__name__}")
    return value


def _require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"'{name}' has to be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_precision(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"'{name}' has to be a str, got {type(value).__name__}")
    if value not in _PRECISIONS:
        raise ValueError(f"'{name}' has to be one of {sorted(_PRECISIONS)}, got {value!r}")
    return value


def _require_scaler_for(precision: str, name: str, value: object) -> torch.amp.GradScaler | None:
    if precision == _FP16:
        if value is None:
            raise ValueError(f"'{name}' is required with precision 'fp16' (a torch.amp.GradScaler)")
        if not isinstance(value, torch.amp.GradScaler):
            raise TypeError(f"'{name}' has to be a torch.amp.GradScaler, got {type(value).__name__}")
        return value
    if value is not None:
        raise ValueError(f"'{name}' only goes with precision 'fp16', not {precision!r}")
    return None


def _require_non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{name}' has to be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"'{name}' has to be non-negative, got {value}")
    return value


def _require_path(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"'{name}' has to be a str or os.PathLike, got {type(value).__name__}")
    resolved = os.fspath(value)
    if not isinstance(resolved, str):
        raise TypeError(f"'{name}' has to be a text path, got {type(resolved).__name__}")
    return resolved


def _require_optional_dict(name: str, value: object) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"'{name}' has to be a dict or None, got {type(value).__name__}")
    return value


def _require_storable_extra(name: str, value: object) -> None:
    """Accept only what ``torch.load(weights_only=True)`` rebuilds: tensors, None, plain scalars, containers."""
    if value is None or isinstance(value, Tensor) or type(value) in _EXTRA_SCALAR_TYPES:
        return
    if type(value) in (list, tuple):
        for position, item in enumerate(value):  # type: ignore[arg-type]
            _require_storable_extra(f"{name}[{position}]", item)
        return
    if type(value) is dict:
        for key, item in value.items():  # type: ignore[union-attr]
            if type(key) not in _EXTRA_KEY_TYPES:
                raise TypeError(f"'{name}' has a key of type {type(key).__name__}; only str or int keys are stored")
            _require_storable_extra(f"{name}[{key!r}]", item)
        return
    raise TypeError(f"'{name}' holds a {type(value).__name__}, which a weights-only checkpoint cannot store")


# --------------------------------------------------------------------------- #
# one training step
# --------------------------------------------------------------------------- #
def _autocast_context(precision: str, device_type: str) -> contextlib.AbstractContextManager[Any]:
    if precision == _FP32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=_AUTOCAST_DTYPES[precision])


def _forward_loss(model: nn.Module, x: Tensor, y: Tensor, precision: str) -> Tensor:
    with _autocast_context(precision, x.device.type):
        prediction = model(x)
    if not isinstance(prediction, Tensor):
        raise TypeError(f"'model' has to return a tensor, got {type(prediction).__name__}")
    if prediction.shape != y.shape:
        raise ValueError(f"'y' has shape {tuple(y.shape)} but model(x) has shape {tuple(prediction.shape)}")
    return F.mse_loss(prediction.float(), y.float())


def _backward_and_update(
    loss: Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None
) -> None:
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def _run_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    precision: str,
    scaler: torch.amp.GradScaler | None,
) -> Tensor:
    """One full step; returns the detached loss without synchronising with the device."""
    optimizer.zero_grad(set_to_none=True)
    loss = _forward_loss(model, x, y, precision)
    _backward_and_update(loss, optimizer, scaler)
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
    """One optimizer step on the MSE loss; returns that loss (unscaled) as a float."""
    checked_model = _require_module("model", model)
    checked_optimizer = _require_optimizer("optimizer", optimizer)
    inputs = _require_tensor("x", x)
    targets = _require_tensor("y", y)
    mode = _require_precision("precision", precision)
    loss_scaler = _require_scaler_for(mode, "scaler", scaler)
    loss = _run_step(checked_model, checked_optimizer, inputs, targets, mode, loss_scaler)
    return float(loss.item())


# --------------------------------------------------------------------------- #
# activation checkpointing
# --------------------------------------------------------------------------- #
def _split_model(model: nn.Module) -> tuple[list[nn.Module], nn.Module | None]:
    """The model's chain of layers and, for Cruncher-like models, its final layer."""
    if isinstance(model, nn.Sequential):
        return list(model.children()), None
    layers = getattr(model, "layers", None)
    final = getattr(model, "final", None)
    if isinstance(layers, (nn.ModuleList, nn.Sequential)) and isinstance(final, nn.Module):
        return list(layers), final
    raise TypeError(
        "'model' has to be an nn.Sequential or a module with both a 'layers' ModuleList and a 'final' module"
    )


def _segment_bounds(num_layers: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) ranges of about sqrt(L) layers each."""
    if num_layers == 0:
        return []
    per_segment = max(1, round(math.sqrt(num_layers)))
    return [(start, min(start + per_segment, num_layers)) for start in range(0, num_layers, per_segment)]


def _run_layers(layers: Sequence[nn.Module], hidden: Tensor) -> Tensor:
    for layer in layers:
        hidden = layer(hidden)
    return hidden


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """``model(x)`` with about sqrt(L) checkpointed segments that backward recomputes."""
    inputs = _require_tensor("x", x)
    layers, final = _split_model(model)
    hidden = inputs
    for start, stop in _segment_bounds(len(layers)):
        segment = functools.partial(_run_layers, tuple(layers[start:stop]))
        hidden = checkpoint(segment, hidden, use_reentrant=False)
    if final is None:
        return hidden
    return final(hidden).squeeze(-1)


# --------------------------------------------------------------------------- #
# RNG state capture / restore
# --------------------------------------------------------------------------- #
def _capture_numpy_rng() -> dict[str, Any]:
    algorithm, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "algorithm": str(algorithm),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
        "position": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _capture_rng_states() -> dict[str, Any]:
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return {
        "torch": torch.get_rng_state(),
        "numpy": _capture_numpy_rng(),
        "python": random.getstate(),
        "cuda": cuda_states,
    }


def _restore_rng_states(states: Mapping[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    numpy_state = states["numpy"]
    np.random.set_state(
        (
            numpy_state["algorithm"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    random.setstate(_as_python_rng_state(states["python"]))
    cuda_states = states["cuda"]
    if cuda_states and torch.cuda.is_available():
        usable = min(len(cuda_states), torch.cuda.device_count())
        for device_index in range(usable):
            torch.cuda.set_rng_state(cuda_states[device_index], device_index)


def _as_python_rng_state(saved: Any) -> tuple[Any, ...]:
    version, internal, gauss_next = saved
    return (version, tuple(internal), gauss_next)


# --------------------------------------------------------------------------- #
# atomic writing
# --------------------------------------------------------------------------- #
def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable (best effort where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _discard(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _write_atomically(target: str, payload: dict[str, Any]) -> None:
    """Serialise into a sibling temp file, fsync it, then rename it over ``target``."""
    directory = os.path.dirname(os.path.abspath(target))
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(target)}.", suffix=_TEMP_SUFFIX, dir=directory
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        _discard(temporary)
        raise
    _fsync_directory(directory)


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Atomically store model, optimizer, iteration, every RNG state and the extras."""
    target = _require_path("path", path)
    checked_model = _require_module("model", model)
    checked_optimizer = _require_optimizer("optimizer", optimizer)
    step = _require_non_negative_int("iteration", iteration)
    for key, value in extra.items():
        _require_storable_extra(key, value)

    payload = {
        "format": _CHECKPOINT_FORMAT,
        "model": checked_model.state_dict(),
        "optimizer": checked_optimizer.state_dict(),
        "iteration": step,
        "rng": _capture_rng_states(),
        "extra": dict(extra),
    }
    _write_atomically(target, payload)


# --------------------------------------------------------------------------- #
# loading and its pre-flight checks
# --------------------------------------------------------------------------- #
def _read_weights_only(source: str) -> Any:
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except (MemoryError, KeyboardInterrupt):
        raise
    except (pickle.UnpicklingError, EOFError, RuntimeError, ValueError, TypeError, AttributeError,
            KeyError, IndexError, OSError, UnicodeDecodeError, ImportError) as error:
        raise ValueError(f"'path' {source!r} is truncated, corrupt or unsafe to load: {error}") from None
    except Exception as error:  # any other failure of the unpickler means the file is unusable
        raise ValueError(f"'path' {source!r} could not be read as a checkpoint: {error}") from None


def _require_checkpoint_layout(source: str, payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or payload.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"'path' {source!r} is not a checkpoint written by save_checkpoint")
    if set(payload) != _CHECKPOINT_KEYS:
        raise ValueError(f"'path' {source!r} has unexpected entries {sorted(map(str, payload))}")
    if type(payload["iteration"]) is not int or payload["iteration"] < 0:
        raise ValueError(f"'path' {source!r} holds an invalid iteration")
    if not isinstance(payload["model"], Mapping) or not isinstance(payload["optimizer"], Mapping):
        raise ValueError(f"'path' {source!r} lacks model or optimizer state dicts")
    if not isinstance(payload["extra"], dict):
        raise ValueError(f"'path' {source!r} holds malformed extras")
    _require_rng_layout(source, payload["rng"])
    return payload


def _require_rng_layout(source: str, states: Any) -> None:
    if not isinstance(states, dict) or set(states) != _RNG_KEYS:
        raise ValueError(f"'path' {source!r} holds malformed RNG states")
    if not isinstance(states["torch"], Tensor) or states["torch"].dtype != torch.uint8:
        raise ValueError(f"'path' {source!r} holds a malformed torch RNG state")
    numpy_state = states["numpy"]
    if not isinstance(numpy_state, dict) or set(numpy_state) != _NUMPY_RNG_KEYS:
        raise ValueError(f"'path' {source!r} holds a malformed NumPy RNG state")
    if not isinstance(numpy_state["keys"], Tensor):
        raise ValueError(f"'path' {source!r} holds a malformed NumPy RNG state")
    python_state = states["python"]
    if not isinstance(python_state, (tuple, list)) or len(python_state) != 3:
        raise ValueError(f"'path' {source!r} holds a malformed Python RNG state")
    cuda_states = states["cuda"]
    if cuda_states is not None and not (
        isinstance(cuda_states, (list, tuple)) and all(isinstance(item, Tensor) for item in cuda_states)
    ):
        raise ValueError(f"'path' {source!r} holds malformed CUDA RNG states")


def _require_model_fit(saved: Mapping[str, Any], model: nn.Module) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit 'model': missing keys {missing}, unexpected keys {unexpected}")
    for key, reference in expected.items():
        stored = saved[key]
        if not isinstance(stored, Tensor) or (isinstance(reference, Tensor) and stored.shape != reference.shape):
            raise ValueError(f"checkpoint does not fit 'model': entry {key!r} has the wrong shape or type")


def _require_optimizer_fit(saved: Mapping[str, Any], optimizer: torch.optim.Optimizer) -> None:
    groups = saved.get("param_groups")
    state = saved.get("state")
    if not isinstance(groups, list) or not isinstance(state, Mapping):
        raise ValueError("checkpoint does not fit 'optimizer': malformed optimizer state dict")
    live_groups = optimizer.param_groups
    if len(groups) != len(live_groups):
        raise ValueError(f"checkpoint does not fit 'optimizer': {len(groups)} param groups, expected {len(live_groups)}")
    params_by_id: dict[Any, Tensor] = {}
    for stored_group, live_group in zip(groups, live_groups):
        if not isinstance(stored_group, Mapping) or not isinstance(stored_group.get("params"), list):
            raise ValueError("checkpoint does not fit 'optimizer': malformed param group")
        if len(stored_group["params"]) != len(live_group["params"]):
            raise ValueError("checkpoint does not fit 'optimizer': a param group has another number of params")
        params_by_id.update(zip(stored_group["params"], live_group["params"]))
    for param_id, entries in state.items():
        _require_state_entry_fit(param_id, entries, params_by_id)


def _require_state_entry_fit(param_id: Any, entries: Any, params_by_id: Mapping[Any, Tensor]) -> None:
    if param_id not in params_by_id or not isinstance(entries, Mapping):
        raise ValueError(f"checkpoint does not fit 'optimizer': state for unknown param {param_id!r}")
    param = params_by_id[param_id]
    for name, value in entries.items():
        if isinstance(value, Tensor) and value.dim() > 0 and value.shape != param.shape:
            raise ValueError(f"checkpoint does not fit 'optimizer': state {name!r} has shape {tuple(value.shape)}")


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Safely load a checkpoint of :func:`save_checkpoint`; every check runs before anything changes."""
    source = _require_path("path", path)
    checked_model = _require_module("model", model)
    checked_optimizer = _require_optimizer("optimizer", optimizer)
    extras_out = _require_optional_dict("extra", extra)
    if not os.path.exists(source):
        raise FileNotFoundError(f"'path': no checkpoint at {source!r}")
    if not os.path.isfile(source):
        raise ValueError(f"'path': {source!r} is not a checkpoint file")

    payload = _require_checkpoint_layout(source, _read_weights_only(source))
    _require_model_fit(payload["model"], checked_model)
    _require_optimizer_fit(payload["optimizer"], checked_optimizer)

    checked_model.load_state_dict(payload["model"])
    checked_optimizer.load_state_dict(payload["optimizer"])
    _restore_rng_states(payload["rng"])
    if extras_out is not None:
        extras_out.update(payload["extra"])
    return payload["iteration"]


# --------------------------------------------------------------------------- #
# the training loop
# --------------------------------------------------------------------------- #
def _require_batch_iterator(name: str, value: object) -> Iterator[Any]:
    try:
        return iter(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"'{name}' has to be an iterable of (x, y) pairs, got {type(value).__name__}") from None


def _next_batch(batches: Iterator[Any], step_number: int, steps: int) -> tuple[Tensor, Tensor]:
    try:
        batch = next(batches)
    except StopIteration:
        raise ValueError(f"'batches' ran out after {step_number - 1} of {steps} steps") from None
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(f"'batches' has to yield (x, y) pairs, got {type(batch).__name__}")
    return _require_tensor("x", batch[0]), _require_tensor("y", batch[1])


def _log_progress(step_number: int, steps: int, loss: Tensor) -> None:
    _LOGGER.info("finished step %d of %d; loss=%.6g", step_number, steps, float(loss.item()))


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
    """Run ``steps`` steps, one batch each, and return their losses (one host sync at the end)."""
    checked_model = _require_module("model", model)
    checked_optimizer = _require_optimizer("optimizer", optimizer)
    total_steps = _require_non_negative_int("steps", steps)
    mode = _require_precision("precision", precision)
    loss_scaler = _require_scaler_for(mode, "scaler", scaler)
    log_interval = _require_non_negative_int("log_every", log_every)
    source = _require_batch_iterator("batches", batches)

    history: Tensor | None = None
    for step_number in range(1, total_steps + 1):
        x, y = _next_batch(source, step_number, total_steps)
        loss = _run_step(checked_model, checked_optimizer, x, y, mode, loss_scaler)
        if history is None:
            history = torch.empty(total_steps, dtype=torch.float32, device=loss.device)
        history[step_number - 1] = loss
        if log_interval and step_number % log_interval == 0:
            _log_progress(step_number, total_steps, loss)
    return [] if history is None else history.tolist()

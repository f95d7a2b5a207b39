"""Handout §6: mixed-precision steps, activation checkpointing, crash-safe
checkpoints and the training loop.

Building blocks:

* ``_Precision``: a lookup table from the precision name to its autocast dtype
  and whether it needs a loss scaler.
* ``_Stepper``: validated (model, optimizer, precision, scaler) that performs
  one step and hands back the loss as a device tensor (no host sync).
* ``_Segments``: splits a model into about sqrt(L) checkpointed runs.
* ``_RngSnapshot``: captures/restores every RNG in a weights_only-safe form.
* ``_AtomicWriter``: temp file in the target folder, fsync, rename, fsync dir.
"""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

_log = logging.getLogger(__name__)

_CHECKPOINT_TAG = "objects-training-checkpoint/1"


# --------------------------------------------------------------------------- #
# One training step
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _Precision:
    """How a precision mode runs the forward pass.

    Attributes:
        autocast_dtype: Dtype for ``torch.autocast``, or None for plain fp32.
        needs_scaler: Whether a ``GradScaler`` is mandatory.
    """

    autocast_dtype: torch.dtype | None
    needs_scaler: bool


_PRECISIONS: dict[str, _Precision] = {
    "fp32": _Precision(None, False),
    "bf16": _Precision(torch.bfloat16, False),
    "fp16": _Precision(torch.float16, True),
}


@dataclass
class _Stepper:
    """Validated pieces of a training step.

    Attributes:
        model: The module being trained.
        optimizer: Its optimizer.
        precision: Key of ``_PRECISIONS``.
        scaler: Loss scaler (fp16 only).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: str
    scaler: torch.amp.GradScaler | None

    def __post_init__(self) -> None:
        if not isinstance(self.model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(self.model).__name__}")
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(self.optimizer).__name__}")
        if not isinstance(self.precision, str):
            raise TypeError(f"precision must be a str, got {type(self.precision).__name__}")
        if self.precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(_PRECISIONS)}, got {self.precision!r}")
        mode = _PRECISIONS[self.precision]
        if mode.needs_scaler:
            if self.scaler is None:
                raise ValueError(f"precision {self.precision!r} requires a scaler (torch.amp.GradScaler)")
            if not isinstance(self.scaler, torch.amp.GradScaler):
                raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(self.scaler).__name__}")
        elif self.scaler is not None:
            raise ValueError(f"scaler is only used with precision 'fp16', not {self.precision!r}")
        self._mode = mode

    def run(self, x: object, y: object) -> Tensor:
        """Do one optimizer step on ``mse_loss(model(x), y)``.

        Args:
            x: Input batch.
            y: Targets, shaped like the model's output.

        Returns:
            The (unscaled) loss as a detached 0-d fp32 tensor on the device.
        """
        for label, tensor in (("x", x), ("y", y)):
            if not isinstance(tensor, Tensor):
                raise TypeError(f"{label} must be a tensor, got {type(tensor).__name__}")
        self.optimizer.zero_grad(set_to_none=True)
        if self._mode.autocast_dtype is None:
            prediction = self.model(x)
        else:
            with torch.autocast(x.device.type, dtype=self._mode.autocast_dtype):
                prediction = self.model(x)
        if prediction.shape != y.shape:
            raise ValueError(f"model(x) has shape {tuple(prediction.shape)} but y has {tuple(y.shape)}")
        loss = F.mse_loss(prediction.float(), y.float())
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
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
    """Take one training step and report its loss.

    Args:
        model: Module to train.
        optimizer: Optimizer over the module's parameters.
        x: Inputs.
        y: Targets, same shape as ``model(x)``.
        precision: "fp32", "bf16" or "fp16".
        scaler: ``torch.amp.GradScaler``, required exactly for "fp16".

    Returns:
        The loss before the update, as a Python float.
    """
    return float(_Stepper(model, optimizer, precision, scaler).run(x, y))


# --------------------------------------------------------------------------- #
# Activation checkpointing
# --------------------------------------------------------------------------- #


class _Chain(nn.Module):
    """Runs a contiguous slice of layers one after another."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.parts = layers  # plain list: no re-registration of the layers

    def forward(self, hidden: Tensor) -> Tensor:
        for layer in self.parts:
            hidden = layer(hidden)
        return hidden


@dataclass
class _Segments:
    """A model seen as a body of layers plus an optional head.

    Attributes:
        body: The layers to checkpoint, in order.
        head: Module applied afterwards without checkpointing, or None.
    """

    body: list[nn.Module]
    head: nn.Module | None

    @classmethod
    def of(cls, model: object) -> _Segments:
        if isinstance(model, nn.Sequential):
            return cls(list(model.children()), None)
        if isinstance(model, nn.Module):
            layers = getattr(model, "layers", None)
            final = getattr(model, "final", None)
            if isinstance(layers, (nn.ModuleList, nn.Sequential)) and isinstance(final, nn.Module):
                return cls(list(layers), final)
        raise TypeError(
            "model must be an nn.Sequential or a module with a `layers` ModuleList and a `final` module"
        )

    def chunks(self) -> list[_Chain]:
        """Split the body into contiguous runs of about sqrt(L) layers."""
        count = len(self.body)
        if count == 0:
            return []
        size = max(1, round(math.sqrt(count)))
        return [_Chain(self.body[i : i + size]) for i in range(0, count, size)]

    def run(self, x: Tensor) -> Tensor:
        hidden = x
        for chunk in self.chunks():
            hidden = checkpoint(chunk, hidden, use_reentrant=False)
        if self.head is not None:
            hidden = self.head(hidden).squeeze(-1)
        return hidden


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """Forward pass that stores only segment inputs and recomputes the rest.

    Args:
        model: An ``nn.Sequential`` or a Cruncher-like module (``layers`` and
            ``final``).
        x: Input batch; it may or may not require grad.

    Returns:
        Exactly what ``model(x)`` returns, with the same gradients.
    """
    plan = _Segments.of(model)
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    return plan.run(x)


# --------------------------------------------------------------------------- #
# Checkpoints
# --------------------------------------------------------------------------- #


class _ExtraValidator:
    """Checks that an extra value survives ``torch.load(weights_only=True)``."""

    _SCALARS = (bool, int, float, str)

    @classmethod
    def check(cls, value: Any, where: str) -> None:
        """Raise ``TypeError`` on anything weights_only loading would refuse.

        Args:
            value: The value to inspect (recursively).
            where: A readable location, quoted in errors.
        """
        if value is None or type(value) in cls._SCALARS or isinstance(value, Tensor):
            return
        if type(value) in (list, tuple):
            for position, item in enumerate(value):
                cls.check(item, f"{where}[{position}]")
            return
        if type(value) is dict:
            for key, item in value.items():
                if type(key) not in (str, int):
                    raise TypeError(f"{where} has a key {key!r} of type {type(key).__name__}; use str or int")
                cls.check(item, f"{where}[{key!r}]")
            return
        raise TypeError(f"{where} has type {type(value).__name__}, which a checkpoint cannot hold")


class _RngSnapshot:
    """Converts RNG states to and from tensors and plain containers."""

    @staticmethod
    def capture() -> dict[str, Any]:
        """Read every generator's state without disturbing it.

        Returns:
            A dict of weights_only-loadable values.
        """
        name, keys, position, has_gauss, cached = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        snapshot: dict[str, Any] = {
            "torch": torch.get_rng_state(),
            "numpy": {
                "name": str(name),
                "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
                "pos": int(position),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached),
            },
            "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
            "cuda": None,
        }
        if torch.cuda.is_available():
            snapshot["cuda"] = [state.cpu() for state in torch.cuda.get_rng_state_all()]
        return snapshot

    @staticmethod
    def validate(snapshot: Any) -> None:
        """Check the shape of a loaded snapshot before anything is restored.

        Args:
            snapshot: Value read from a checkpoint.
        """
        try:
            assert isinstance(snapshot["torch"], Tensor) and snapshot["torch"].dtype == torch.uint8
            numpy_part = snapshot["numpy"]
            assert isinstance(numpy_part["keys"], Tensor) and numpy_part["keys"].numel() == 624
            assert isinstance(numpy_part["name"], str)
            int(numpy_part["pos"]), int(numpy_part["has_gauss"]), float(numpy_part["cached_gaussian"])
            python_part = snapshot["python"]
            assert len(python_part["internal"]) == 625
            assert snapshot["cuda"] is None or isinstance(snapshot["cuda"], (list, tuple))
        except (AssertionError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"checkpoint's RNG states are malformed: {error!r}") from None

    @staticmethod
    def restore(snapshot: dict[str, Any]) -> None:
        """Put every generator back into the captured state.

        Args:
            snapshot: A value produced by :meth:`capture` (and validated).
        """
        torch.set_rng_state(snapshot["torch"].cpu())
        numpy_part = snapshot["numpy"]
        np.random.set_state(
            (
                numpy_part["name"],
                numpy_part["keys"].numpy().astype(np.uint32),
                int(numpy_part["pos"]),
                int(numpy_part["has_gauss"]),
                float(numpy_part["cached_gaussian"]),
            )
        )
        python_part = snapshot["python"]
        random.setstate(
            (python_part["version"], tuple(int(v) for v in python_part["internal"]), python_part["gauss_next"])
        )
        saved_cuda = snapshot["cuda"]
        if saved_cuda and torch.cuda.is_available():
            usable = min(len(saved_cuda), torch.cuda.device_count())
            for index in range(usable):
                torch.cuda.set_rng_state(saved_cuda[index].cpu(), index)


class _AtomicWriter:
    """Writes a file so that ``path`` only ever names a complete file.

    Args:
        path: Final location.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.folder = os.path.dirname(os.path.abspath(self.path))

    def write(self, payload: Any) -> None:
        """Serialise ``payload`` to a sibling temp file, then publish it.

        Args:
            payload: Object for ``torch.save``.
        """
        handle, temp_path = tempfile.mkstemp(
            prefix=f".{os.path.basename(self.path)}.", suffix=".tmp", dir=self.folder
        )
        try:
            with os.fdopen(handle, "wb") as stream:
                os.fchmod(stream.fileno(), 0o666 & ~_current_umask())
                torch.save(payload, stream)
                self._publish(stream, temp_path)
        except BaseException:
            try:
                os.unlink(temp_path)
            except FileNotFoundError:
                pass
            raise

    def _publish(self, stream: Any, temp_path: str) -> None:
        """Make the bytes durable, then atomically point ``path`` at them.

        Args:
            stream: The open temp file.
            temp_path: Its name.
        """
        stream.flush()
        os.fsync(stream.fileno())
        os.replace(temp_path, self.path)
        self._sync_folder()

    def _sync_folder(self) -> None:
        try:
            folder = os.open(self.folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(folder)
        except OSError:
            pass
        finally:
            os.close(folder)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_path(path: object) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")


def _check_module_and_optimizer(model: object, optimizer: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Atomically store everything needed to resume a run.

    Args:
        path: Destination file; an older file there survives a crash.
        model: Module whose ``state_dict`` is saved.
        optimizer: Optimizer whose ``state_dict`` is saved.
        iteration: Non-negative step counter.
        **extra: Additional plain values (tensors, numbers, strings and
            containers of them).
    """
    _check_path(path)
    _check_module_and_optimizer(model, optimizer)
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise TypeError(f"iteration must be an int, got {type(iteration).__name__}")
    if iteration < 0:
        raise ValueError(f"iteration must be non-negative, got {iteration}")
    for key, value in extra.items():
        _ExtraValidator.check(value, f"extra[{key!r}]")
    payload = {
        "format": _CHECKPOINT_TAG,
        "iteration": iteration,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": _RngSnapshot.capture(),
        "extra": dict(extra),
    }
    _AtomicWriter(path).write(payload)


class _FitCheck:
    """Verifies that saved state dicts match a live model and optimizer."""

    @staticmethod
    def model(saved: Any, model: nn.Module) -> None:
        if not isinstance(saved, dict):
            raise ValueError("checkpoint's model state is not a dict")
        live = model.state_dict()
        if set(saved) != set(live):
            missing = sorted(set(live) - set(saved))
            unexpected = sorted(set(saved) - set(live))
            raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
        for key, tensor in live.items():
            stored = saved[key]
            if not isinstance(stored, Tensor) or stored.shape != tensor.shape:
                shape = getattr(stored, "shape", None)
                raise ValueError(f"checkpoint does not fit the model: {key} is {shape}, model has {tensor.shape}")

    @staticmethod
    def optimizer(saved: Any, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(saved, dict) or "param_groups" not in saved or "state" not in saved:
            raise ValueError("checkpoint's optimizer state is malformed")
        groups = saved["param_groups"]
        live_groups = optimizer.param_groups
        if not isinstance(groups, list) or len(groups) != len(live_groups):
            raise ValueError("checkpoint does not fit the optimizer: different number of param groups")
        shapes: dict[Any, torch.Size] = {}
        for stored_group, live_group in zip(groups, live_groups):
            ids = stored_group.get("params") if isinstance(stored_group, dict) else None
            if not isinstance(ids, list) or len(ids) != len(live_group["params"]):
                raise ValueError("checkpoint does not fit the optimizer: a group has a different size")
            for index, param in zip(ids, live_group["params"]):
                shapes[index] = param.shape
        state = saved["state"]
        if not isinstance(state, dict):
            raise ValueError("checkpoint's optimizer state is malformed")
        for index, entries in state.items():
            if index not in shapes:
                raise ValueError(f"checkpoint does not fit the optimizer: unknown parameter {index!r}")
            if not isinstance(entries, dict):
                raise ValueError("checkpoint's optimizer state is malformed")
            for name, value in entries.items():
                if isinstance(value, Tensor) and value.dim() > 0 and value.shape != shapes[index]:
                    raise ValueError(
                        f"checkpoint does not fit the optimizer: state {name!r} has shape "
                        f"{tuple(value.shape)}, parameter has {tuple(shapes[index])}"
                    )


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Restore a run saved by :func:`save_checkpoint`.

    Args:
        path: Checkpoint file.
        model: Module to load the weights into.
        optimizer: Optimizer to load the state into.
        extra: Optional dict that receives the saved extra values.

    Returns:
        The saved iteration.
    """
    _check_path(path)
    _check_module_and_optimizer(model, optimizer)
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    location = os.fspath(path)
    if not os.path.exists(location):
        raise FileNotFoundError(f"no checkpoint at {location!r}")
    if os.path.isdir(location):
        raise ValueError(f"{location!r} is a directory, not a checkpoint")
    try:
        payload = torch.load(location, map_location="cpu", weights_only=True)
    except Exception as error:  # any failure to unpickle means a bad file
        raise ValueError(f"{location!r} is truncated, corrupt, unsafe or not a checkpoint: {error}") from None
    if not isinstance(payload, dict) or payload.get("format") != _CHECKPOINT_TAG:
        raise ValueError(f"{location!r} is not a checkpoint written by save_checkpoint")
    iteration = payload.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise ValueError("checkpoint's iteration is malformed")
    saved_extra = payload.get("extra")
    if not isinstance(saved_extra, dict):
        raise ValueError("checkpoint's extra values are malformed")
    _FitCheck.model(payload.get("model"), model)
    _FitCheck.optimizer(payload.get("optimizer"), optimizer)
    _RngSnapshot.validate(payload.get("rng"))

    try:
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
    except (RuntimeError, KeyError, TypeError) as error:
        raise ValueError(f"checkpoint does not fit the model/optimizer: {error}") from None
    _RngSnapshot.restore(payload["rng"])
    if extra is not None:
        extra.update(saved_extra)
    return iteration


# --------------------------------------------------------------------------- #
# The loop
# --------------------------------------------------------------------------- #


def _non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


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
    """Run several training steps, syncing with the device only at the end.

    Args:
        model: Module to train.
        optimizer: Its optimizer.
        batches: Iterable of ``(x, y)``, consumed one item per step.
        steps: Number of steps.
        precision: "fp32", "bf16" or "fp16".
        scaler: Loss scaler, required exactly for "fp16".
        log_every: Log the loss every this many steps (0: never).

    Returns:
        The losses of all steps, as Python floats.
    """
    stepper = _Stepper(model, optimizer, precision, scaler)
    total = _non_negative_int(steps, "steps")
    interval = _non_negative_int(log_every, "log_every")
    stream = iter(batches)
    losses: list[Tensor] = []
    for number in range(1, total + 1):
        try:
            batch = next(stream)
        except StopIteration:
            raise ValueError(f"batches ran out after {number - 1} of {total} steps") from None
        try:
            x, y = batch
        except (TypeError, ValueError):
            raise TypeError("each batch must be a pair (x, y) of tensors") from None
        loss = stepper.run(x, y)
        losses.append(loss)
        if interval and number % interval == 0:
            _log.info("step %d/%d: loss %.6f", number, total, float(loss))
    if not losses:
        return []
    return [float(value) for value in torch.stack(losses).tolist()]

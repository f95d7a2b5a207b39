"""Handout §6: a training step in fp32/bf16/fp16, activation checkpointing,
crash-safe checkpoints and the training loop.

The loss is always ``F.mse_loss(output.float(), y.float())``, computed in fp32.
"""

from __future__ import annotations

import logging
import math
import numbers
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

logger = logging.getLogger(__name__)

# The precisions we know, and the dtype autocast uses for each (None: no autocast).
AUTOCAST_DTYPE_OF_PRECISION = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}

# A marker stored in every checkpoint, to recognise our own files.
CHECKPOINT_FORMAT_NAME = "student-training-checkpoint-v1"


# ----------------------------------------------------------------------------
# One training step
# ----------------------------------------------------------------------------


def _check_step_arguments(model, optimizer, precision, scaler) -> None:
    """Check the arguments shared by train_step and train."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a str, got {type(precision).__name__}")
    if precision not in AUTOCAST_DTYPE_OF_PRECISION:
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}")
    # fp16 needs a real GradScaler; the other precisions must not get one.
    if precision == "fp16":
        if scaler is None:
            raise ValueError("precision 'fp16' needs a scaler (torch.amp.GradScaler)")
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
    elif scaler is not None:
        raise ValueError(f"a scaler is only used with precision 'fp16', not with {precision!r}")


def _check_batch(x, y) -> None:
    """x and y must both be tensors."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a tensor, got {type(y).__name__}")


def _step_and_keep_loss_on_device(model, optimizer, x, y, precision, scaler) -> Tensor:
    """Do one step (arguments already checked) and return the detached loss, without a host sync."""
    # Step 1: free the old gradients instead of writing zeros into them.
    optimizer.zero_grad(set_to_none=True)
    # Step 2: forward pass, under autocast for bf16/fp16.
    autocast_dtype = AUTOCAST_DTYPE_OF_PRECISION[precision]
    if autocast_dtype is None:
        output = model(x)
    else:
        with torch.autocast(device_type=x.device.type, dtype=autocast_dtype):
            output = model(x)
    # Step 3: output and target must have the same shape (no silent broadcasting).
    if output.shape != y.shape:
        raise ValueError(f"model(x) has shape {tuple(output.shape)} but y has shape {tuple(y.shape)}")
    # Step 4: the loss in fp32.
    loss = F.mse_loss(output.float(), y.float())
    # Step 5: backward and optimizer step (through the scaler for fp16).
    if precision == "fp16":
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
    """One optimizer step on the MSE loss; returns the (unscaled) loss as a Python float."""
    _check_step_arguments(model, optimizer, precision, scaler)
    _check_batch(x, y)
    loss_on_device = _step_and_keep_loss_on_device(model, optimizer, x, y, precision, scaler)
    return float(loss_on_device.item())


# ----------------------------------------------------------------------------
# Activation checkpointing
# ----------------------------------------------------------------------------


def _make_segment_function(segment_layers: list[nn.Module]):
    """Return a function that runs the given layers one after the other."""

    def run_segment(hidden: Tensor) -> Tensor:
        for layer in segment_layers:
            hidden = layer(hidden)
        return hidden

    return run_segment


def checkpointed_forward(model: nn.Module, x: Tensor) -> Tensor:
    """Same result as ``model(x)``, but only about sqrt(L) segment inputs are kept for backward."""
    # Step 1: check the input and find the list of layers (and the final module, if any).
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if isinstance(model, nn.Sequential):
        all_layers = list(model.children())
        final_module = None
    elif isinstance(model, nn.Module) and hasattr(model, "layers") and hasattr(model, "final"):
        layer_container = model.layers
        if not isinstance(layer_container, nn.Module) or not hasattr(layer_container, "__iter__"):
            raise TypeError("model.layers must be an nn.ModuleList (or another iterable module)")
        all_layers = list(layer_container)
        final_module = model.final
        if not callable(final_module):
            raise TypeError("model.final must be a module")
    else:
        raise TypeError(
            "model must be an nn.Sequential or a module with both `layers` (an nn.ModuleList) and `final`"
        )
    # Step 2: choose segments of about sqrt(L) layers each.
    number_of_layers = len(all_layers)
    layers_per_segment = max(1, round(math.sqrt(number_of_layers)))
    # Step 3: run each segment through checkpoint, which keeps only the segment's input.
    hidden = x
    for segment_start in range(0, number_of_layers, layers_per_segment):
        segment_layers = all_layers[segment_start : segment_start + layers_per_segment]
        segment_function = _make_segment_function(segment_layers)
        hidden = checkpoint(segment_function, hidden, use_reentrant=False)
    # Step 4: a Cruncher-like model finishes with `final` and squeezes the last dimension.
    if final_module is not None:
        hidden = final_module(hidden).squeeze(-1)
    return hidden


# ----------------------------------------------------------------------------
# Checkpoints on disk
# ----------------------------------------------------------------------------


def _check_extra_value(value, where: str) -> None:
    """Refuse anything that torch.load(weights_only=True) could not read back."""
    # Plain leaf values: tensors, None and exactly bool/int/float/str.
    if value is None or isinstance(value, torch.Tensor):
        return
    if type(value) in (bool, int, float, str):
        return
    # Containers: check every element (and every dict key).
    if type(value) in (list, tuple):
        for position, element in enumerate(value):
            _check_extra_value(element, f"{where}[{position}]")
        return
    if type(value) is dict:
        for key, element in value.items():
            if type(key) not in (str, int):
                raise TypeError(f"extra {where} has a key of type {type(key).__name__} (only str or int)")
            _check_extra_value(element, f"{where}[{key!r}]")
        return
    raise TypeError(f"extra {where} has a value of type {type(value).__name__}, which cannot be saved safely")


def _collect_rng_states() -> dict:
    """Read (without changing) the RNG states of torch, NumPy, random and CUDA."""
    # NumPy's state is a tuple holding an array: store it as plain values and a tensor.
    numpy_algorithm, numpy_keys, numpy_position, numpy_has_gauss, numpy_cached_gaussian = np.random.get_state()
    numpy_state = {
        "algorithm": str(numpy_algorithm),
        "keys": torch.from_numpy(np.asarray(numpy_keys, dtype=np.int64).copy()),
        "position": int(numpy_position),
        "has_gauss": int(numpy_has_gauss),
        "cached_gaussian": float(numpy_cached_gaussian),
    }
    # Python's random: (version, tuple of ints, gauss_next).
    python_version, python_internal_state, python_gauss_next = random.getstate()
    python_state = {
        "version": int(python_version),
        "internal_state": [int(number) for number in python_internal_state],
        "gauss_next": python_gauss_next,
    }
    # CUDA's generators, one per device, only where CUDA exists.
    cuda_states = None
    if torch.cuda.is_available():
        cuda_states = []
        for device_index in range(torch.cuda.device_count()):
            cuda_states.append(torch.cuda.get_rng_state(device_index))
    return {
        "torch": torch.get_rng_state(),
        "numpy": numpy_state,
        "python": python_state,
        "cuda": cuda_states,
    }


def _fsync_directory(directory: str) -> None:
    """fsync a directory so that a rename inside it is on disk (skipped where not possible)."""
    try:
        directory_descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(directory_descriptor)
    except OSError:
        pass
    finally:
        os.close(directory_descriptor)


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Save model, optimizer, iteration, every RNG state and the extras, atomically."""
    # Step 1: check every argument before touching the disk.
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral):
        raise TypeError(f"iteration must be an int, got {type(iteration).__name__}")
    if iteration < 0:
        raise ValueError(f"iteration must not be negative, got {iteration}")
    for extra_name, extra_value in extra.items():
        _check_extra_value(extra_value, extra_name)
    # Step 2: gather everything into one plain dict (only reading the model and optimizer).
    checkpoint_contents = {
        "format": CHECKPOINT_FORMAT_NAME,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iteration": int(iteration),
        "rng": _collect_rng_states(),
        "extra": dict(extra),
    }
    # Step 3: the temporary file goes in the SAME directory (a rename is atomic only there).
    target_path = os.fspath(path)
    target_directory = os.path.dirname(os.path.abspath(target_path))
    target_name = os.path.basename(target_path)
    file_descriptor, temporary_path = tempfile.mkstemp(
        prefix=f".{target_name}.", suffix=".tmp", dir=target_directory
    )
    try:
        # Step 4: write, flush and fsync the temporary file, so its data is on disk...
        with os.fdopen(file_descriptor, "wb") as temporary_file:
            torch.save(checkpoint_contents, temporary_file)
            temporary_file.flush()
            os.fsync(temporary_file.fileno())
        # Step 5: ...before the name points at it.
        os.replace(temporary_path, target_path)
    except BaseException:
        # A failed save removes its temporary file: the folder is left as it was.
        try:
            os.remove(temporary_path)
        except OSError:
            pass
        raise
    # Step 6: fsync the directory so the rename itself is durable.
    _fsync_directory(target_directory)


def _check_rng_states(saved_rng) -> None:
    """Make sure the saved RNG states have the shape we wrote, before restoring anything."""
    if not isinstance(saved_rng, dict):
        raise ValueError("checkpoint's RNG states are missing or malformed")
    for required_key in ("torch", "numpy", "python", "cuda"):
        if required_key not in saved_rng:
            raise ValueError(f"checkpoint's RNG states lack {required_key!r}")
    torch_state = saved_rng["torch"]
    if not isinstance(torch_state, torch.Tensor) or torch_state.dtype != torch.uint8:
        raise ValueError("checkpoint's torch RNG state is malformed")
    numpy_state = saved_rng["numpy"]
    if not isinstance(numpy_state, dict):
        raise ValueError("checkpoint's NumPy RNG state is malformed")
    for required_key in ("algorithm", "keys", "position", "has_gauss", "cached_gaussian"):
        if required_key not in numpy_state:
            raise ValueError(f"checkpoint's NumPy RNG state lacks {required_key!r}")
    if not isinstance(numpy_state["keys"], torch.Tensor):
        raise ValueError("checkpoint's NumPy RNG keys are malformed")
    python_state = saved_rng["python"]
    if not isinstance(python_state, dict):
        raise ValueError("checkpoint's Python RNG state is malformed")
    for required_key in ("version", "internal_state", "gauss_next"):
        if required_key not in python_state:
            raise ValueError(f"checkpoint's Python RNG state lacks {required_key!r}")
    cuda_states = saved_rng["cuda"]
    if cuda_states is not None:
        if not isinstance(cuda_states, (list, tuple)):
            raise ValueError("checkpoint's CUDA RNG states are malformed")
        for cuda_state in cuda_states:
            if not isinstance(cuda_state, torch.Tensor):
                raise ValueError("checkpoint's CUDA RNG states are malformed")


def _check_model_fits(saved_model_state, model: nn.Module) -> None:
    """The saved state dict must have exactly the model's keys, with the same shapes."""
    if not isinstance(saved_model_state, dict):
        raise ValueError("checkpoint's model state is malformed")
    current_model_state = model.state_dict()
    saved_keys = set(saved_model_state.keys())
    current_keys = set(current_model_state.keys())
    if saved_keys != current_keys:
        missing_keys = sorted(current_keys - saved_keys)
        unexpected_keys = sorted(saved_keys - current_keys)
        raise ValueError(
            f"checkpoint does not fit the model: missing keys {missing_keys}, unexpected keys {unexpected_keys}"
        )
    for key in current_model_state:
        saved_value = saved_model_state[key]
        current_value = current_model_state[key]
        if isinstance(current_value, torch.Tensor):
            if not isinstance(saved_value, torch.Tensor) or saved_value.shape != current_value.shape:
                saved_shape = tuple(saved_value.shape) if isinstance(saved_value, torch.Tensor) else None
                raise ValueError(
                    f"checkpoint does not fit the model: {key!r} has shape {saved_shape}, "
                    f"the model's has {tuple(current_value.shape)}"
                )


def _check_optimizer_fits(saved_optimizer_state, optimizer: torch.optim.Optimizer) -> None:
    """The saved optimizer state must have the same groups, sizes and state shapes."""
    if not isinstance(saved_optimizer_state, dict):
        raise ValueError("checkpoint's optimizer state is malformed")
    if "state" not in saved_optimizer_state or "param_groups" not in saved_optimizer_state:
        raise ValueError("checkpoint's optimizer state lacks 'state' or 'param_groups'")
    saved_groups = saved_optimizer_state["param_groups"]
    saved_state = saved_optimizer_state["state"]
    if not isinstance(saved_groups, (list, tuple)) or not isinstance(saved_state, dict):
        raise ValueError("checkpoint's optimizer state is malformed")
    if len(saved_groups) != len(optimizer.param_groups):
        raise ValueError(
            f"checkpoint does not fit the optimizer: {len(saved_groups)} param groups, "
            f"the optimizer has {len(optimizer.param_groups)}"
        )
    # Put all current parameters in one list, in the order state_dict numbers them.
    all_parameters_in_order = []
    for group_number in range(len(saved_groups)):
        saved_group = saved_groups[group_number]
        current_group = optimizer.param_groups[group_number]
        if not isinstance(saved_group, dict) or "params" not in saved_group:
            raise ValueError("checkpoint's optimizer param groups are malformed")
        if len(saved_group["params"]) != len(current_group["params"]):
            raise ValueError(
                f"checkpoint does not fit the optimizer: group {group_number} has "
                f"{len(saved_group['params'])} params, the optimizer's has {len(current_group['params'])}"
            )
        for parameter in current_group["params"]:
            all_parameters_in_order.append(parameter)
    # Map the saved ids to parameters (same order) and compare every state tensor's shape.
    id_to_parameter = {}
    position = 0
    for saved_group in saved_groups:
        for saved_id in saved_group["params"]:
            id_to_parameter[saved_id] = all_parameters_in_order[position]
            position = position + 1
    for saved_id, saved_parameter_state in saved_state.items():
        if saved_id not in id_to_parameter:
            raise ValueError(f"checkpoint does not fit the optimizer: state for unknown param {saved_id!r}")
        parameter = id_to_parameter[saved_id]
        if not isinstance(saved_parameter_state, dict):
            raise ValueError("checkpoint's optimizer state is malformed")
        for state_name, state_value in saved_parameter_state.items():
            if isinstance(state_value, torch.Tensor) and state_value.dim() > 0:
                if state_value.shape != parameter.shape:
                    raise ValueError(
                        f"checkpoint does not fit the optimizer: state {state_name!r} has shape "
                        f"{tuple(state_value.shape)}, its param has {tuple(parameter.shape)}"
                    )


def _restore_rng_states(saved_rng: dict) -> None:
    """Put every RNG back into the saved state."""
    # torch's CPU generator.
    torch.set_rng_state(saved_rng["torch"])
    # NumPy's global generator.
    numpy_state = saved_rng["numpy"]
    numpy_keys = numpy_state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (
            numpy_state["algorithm"],
            numpy_keys,
            int(numpy_state["position"]),
            int(numpy_state["has_gauss"]),
            float(numpy_state["cached_gaussian"]),
        )
    )
    # Python's random module.
    python_state = saved_rng["python"]
    random.setstate(
        (
            int(python_state["version"]),
            tuple(int(number) for number in python_state["internal_state"]),
            python_state["gauss_next"],
        )
    )
    # CUDA's generators: only where both the checkpoint and this machine have them.
    cuda_states = saved_rng["cuda"]
    if cuda_states is not None and torch.cuda.is_available():
        number_of_devices = min(len(cuda_states), torch.cuda.device_count())
        for device_index in range(number_of_devices):
            torch.cuda.set_rng_state(cuda_states[device_index].cpu(), device_index)


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    extra: dict[str, Any] | None = None,
) -> int:
    """Load a checkpoint safely (weights_only), restore everything, and return the iteration."""
    # Step 1: check the arguments.
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {os.fspath(path)!r}")
    # Step 2: load with weights_only=True: only tensors and plain containers are rebuilt.
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:
        raise ValueError(
            f"checkpoint {os.fspath(path)!r} is truncated, corrupt or unsafe: {type(error).__name__}: {error}"
        ) from error
    # Step 3: it must be one of our checkpoints.
    if not isinstance(loaded, dict) or loaded.get("format") != CHECKPOINT_FORMAT_NAME:
        raise ValueError(f"{os.fspath(path)!r} is not a checkpoint written by save_checkpoint")
    for required_key in ("model", "optimizer", "iteration", "rng", "extra"):
        if required_key not in loaded:
            raise ValueError(f"checkpoint {os.fspath(path)!r} lacks {required_key!r}")
    saved_iteration = loaded["iteration"]
    if isinstance(saved_iteration, bool) or not isinstance(saved_iteration, int):
        raise ValueError("checkpoint's iteration is malformed")
    if not isinstance(loaded["extra"], dict):
        raise ValueError("checkpoint's extras are malformed")
    # Step 4: check that everything fits BEFORE loading anything.
    _check_model_fits(loaded["model"], model)
    _check_optimizer_fits(loaded["optimizer"], optimizer)
    _check_rng_states(loaded["rng"])
    # Step 5: restore model, optimizer and RNG states.
    try:
        model.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optimizer"])
    except (RuntimeError, KeyError) as error:
        raise ValueError(f"checkpoint does not fit the model/optimizer: {error}") from error
    _restore_rng_states(loaded["rng"])
    # Step 6: hand back the extras and the iteration.
    if extra is not None:
        for extra_name, extra_value in loaded["extra"].items():
            extra[extra_name] = extra_value
    return int(saved_iteration)


# ----------------------------------------------------------------------------
# The training loop
# ----------------------------------------------------------------------------


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
    """Run ``steps`` steps, one batch each, and return the losses (synced once, at the end)."""
    # Step 1: check the arguments once, before the loop.
    _check_step_arguments(model, optimizer, precision, scaler)
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
        raise TypeError(f"steps must be an int, got {type(steps).__name__}")
    if steps < 0:
        raise ValueError(f"steps must not be negative, got {steps}")
    if isinstance(log_every, bool) or not isinstance(log_every, numbers.Integral):
        raise TypeError(f"log_every must be an int, got {type(log_every).__name__}")
    if log_every < 0:
        raise ValueError(f"log_every must not be negative, got {log_every}")
    # Step 2: iterate the batches once (a list is not restarted every step).
    batch_iterator = iter(batches)
    losses_on_device = []
    for step_index in range(steps):
        step_number = step_index + 1
        # Draw exactly one batch, just before its step.
        try:
            x, y = next(batch_iterator)
        except StopIteration:
            raise ValueError(f"batches ran out after {step_index} batches, but steps={steps}") from None
        _check_batch(x, y)
        # Do the step; the loss stays on the device (no sync here).
        loss = _step_and_keep_loss_on_device(model, optimizer, x, y, precision, scaler)
        losses_on_device.append(loss)
        # Only when asked: log (this syncs) after steps k, 2k, ...
        if log_every > 0 and step_number % log_every == 0:
            logger.info("step %d/%d: loss %.6f", step_number, steps, float(loss.item()))
    # Step 3: one conversion to Python floats at the end.
    if len(losses_on_device) == 0:
        return []
    return [float(value) for value in torch.stack(losses_on_device).tolist()]

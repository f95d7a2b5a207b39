"""Handout §6: mixed-precision steps, activation checkpointing, crash-safe
checkpoints and the training loop.

The loss throughout is the mean-squared error ``F.mse_loss(out, y)`` between
``out = model(x)`` and ``y``, computed in fp32 (the Cruncher of §3.2 predicts
one scalar per example): ``F.mse_loss(out.float(), y.float())``, whatever the
model's dtype (the tests' models are float32). ``precision`` is one of:

* ``"fp32"``: everything in float32;
* ``"bf16"``: the forward pass under ``torch.autocast(device_type, torch.bfloat16)``
  (on the CPU too); parameters, gradients and optimizer state stay float32
  ("master weights");
* ``"fp16"``: the same with float16, plus a ``torch.amp.GradScaler`` (required)
  that scales the loss, unscales the gradients and skips a step whose
  gradients hold inf/nan.

How this is graded: handout, "How you are graded".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn


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
            without a scaler, or a scaler with another precision; ``model(x)``
            and ``y`` have different shapes.
        TypeError or ValueError (either is accepted): "fp16" with a ``scaler``
            that is not a ``torch.amp.GradScaler``.
    """
    raise NotImplementedError("train_step: see handout §6")


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
    layer alone does not. ``torch.utils.checkpoint.checkpoint_sequential(model,
    segments, x, use_reentrant=False)`` with about sqrt(L) segments is accepted
    too (it leaves its last segment unchecked, which still fits the bound).

    Raises:
        TypeError: ``model`` has neither structure (also when it has only one of
            ``layers`` and ``final``), or ``x`` is not a tensor.
    """
    raise NotImplementedError("checkpointed_forward: see handout §6")


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    **extra: Any,
) -> None:
    """Save the model's and the optimizer's ``state_dict()``, ``iteration``,
    the RNG states of torch, NumPy's global RNG and ``random`` (and CUDA's when
    available), and ``extra`` to ``path``. Extra values are what
    ``torch.load(weights_only=True)`` reads back: tensors, None, and values of
    exactly the types bool, int, float and str, and lists, tuples and dicts of
    those (dict keys: str or int). Anything else is refused when saving
    (TypeError): objects, modules, sets, and NumPy scalars (an ``np.float64``
    is a float subclass, but weights_only loading refuses it).

    Atomic: write a temporary file in the same directory, flush and
    ``os.fsync`` it, then ``os.replace`` it onto ``path``. A crash at any moment
    leaves the previous file at ``path`` intact; a save that raises (the
    state cannot be written) also removes its temporary file before the
    exception propagates, leaving the folder as it was. For a bare file name
    (``"ckpt.pt"``) the same directory is the working directory.

    Saving only reads: the model keeps its train/eval mode, and its
    parameters, the optimizer's state and the RNG states are unchanged.

    Raises:
        TypeError: ``path`` is not a str/PathLike, ``model``/``optimizer`` are
            not a module/optimizer, ``iteration`` is not an int (a bool is not
            one), or an extra value or key is not one of the above.
        ValueError: ``iteration`` is negative.
    """
    raise NotImplementedError("save_checkpoint: see handout §6")


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
    given) with the saved extras, and return the saved iteration. (Whether keys
    of ``extra`` that the checkpoint does not hold are kept or removed is your
    choice: the tests give an empty dict.) A checkpoint
    written where CUDA is absent loads where it is available, and the other
    way round (CUDA's generators are restored only where both have CUDA). Continuing
    from here reproduces an uninterrupted run bit for bit on the CPU. A
    checkpoint that does not fit ``model`` (other keys or shapes) raises before
    anything is loaded: the model, the optimizer and the RNG states stay as
    they were (``load_state_dict`` alone would copy the matching keys first).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        TypeError: ``path``, ``model``, ``optimizer`` or ``extra`` has the
            wrong type.
        ValueError: the file is truncated, corrupt, unsafe (holds objects
            ``weights_only`` refuses) or not a checkpoint of
            ``save_checkpoint``, or does not fit ``model``/``optimizer``.
    """
    raise NotImplementedError("load_checkpoint: see handout §6")


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

    ``batches`` is any iterable of ``(x, y)``, a list included, iterated
    once. Draws exactly one ``(x, y)`` from it just before each step (no
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
    raise NotImplementedError("train: see handout §6")

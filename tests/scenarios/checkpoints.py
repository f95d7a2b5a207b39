"""Scenarios for handout §6's ``save_checkpoint`` and ``load_checkpoint``:
checkpoint files written and read through the implementation's ``training``
module, runs resumed from them, bad files and bad arguments. The models and
optimizers come from :mod:`tests.scenarios.training`'s builders.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch import nn

from tests.scenarios.training import Stack, build_dropout_model, build_model, build_optimizer

# --------------------------------------------------------------------------- runs, saved and resumed


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _draws() -> dict[str, Any]:
    return {"torch": torch.rand(4), "numpy": np.random.rand(4), "python": [random.random() for _ in range(4)]}


def _batch_stream(dim: int, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches drawn from all three global RNGs (as a data loader, augmentation
    and shuffling might), so a checkpoint must restore each of them."""
    while True:
        x = torch.randn(batch, dim)
        shift = float(np.random.standard_normal())
        scale = random.uniform(0.5, 1.5)
        yield x, torch.sin(x.sum(-1)) * scale + shift


def train_run(
    modules: Any, kind: str, dim: int, num_layers: int, batch: int, steps: int, seed: int, precision: str = "fp32",
    path: str | None = None,
) -> Any:
    """Seed every RNG with ``seed``, build the model and AdamW, ``train`` for
    ``steps`` on batches drawn from all three global RNGs; then, if ``path`` is
    given, ``save_checkpoint(path, ..., steps)``. Report losses and parameters."""
    _seed_all(seed)
    model = build_model(kind, dim, num_layers, seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    losses = modules.training.train(model, opt, _batch_stream(dim, batch), steps=steps, precision=precision)
    if path is not None:
        modules.training.save_checkpoint(path, model, opt, steps)
    return {"losses": losses, "params": [p.detach().clone() for p in model.parameters()]}


def resume_run(
    modules: Any, kind: str, dim: int, num_layers: int, batch: int, total: int, other_seed: int, path: str,
    precision: str = "fp32",
) -> Any:
    """In a process that has not run the first part: RNGs scrambled with
    ``other_seed``, a model and AdamW built from it, ``load_checkpoint(path)``,
    then ``train`` until ``total`` steps. Report the iteration loaded, the
    losses of the continued run and the final parameters."""
    _seed_all(other_seed)
    model = build_model(kind, dim, num_layers, other_seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    iteration = modules.training.load_checkpoint(path, model, opt)
    rest = modules.training.train(model, opt, _batch_stream(dim, batch), steps=total - iteration, precision=precision)
    return {"iteration": iteration, "losses": rest, "params": [p.detach().clone() for p in model.parameters()]}


def torch_run(kind: str, dim: int, num_layers: int, batch: int, steps: int, seed: int) -> list[float]:
    """The oracle of :func:`train_run` (fp32): the same run with a plain torch
    loop (``F.mse_loss``, AdamW). For the test's side only; it restores the
    global RNG states it used."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        _seed_all(seed)
        model = build_model(kind, dim, num_layers, seed)
        opt = build_optimizer("adamw", model.parameters(), 1e-2)
        losses = []
        for _, (x, y) in zip(range(steps), _batch_stream(dim, batch), strict=False):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def checkpoint_round_trip(modules: Any, seed: int) -> Any:
    """Save after a step, then report what a fresh model/optimizer hold after
    loading, the iteration and extras read back, and the RNG draws that follow
    the save and the load (which must be equal)."""
    _seed_all(seed)
    model = build_model("mlp", 6, 2, seed)
    opt = build_optimizer("adamw", model.parameters(), 1e-2)
    x, y = torch.randn(5, 6), torch.randn(5)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        _seed_all(seed + 7)
        modules.training.save_checkpoint(path, model, opt, 41, note="hello", lr=0.5, ids=[1, 2])
        after_save = _draws()
        _seed_all(seed + 99)
        fresh = build_model("mlp", 6, 2, seed + 99)
        fresh_opt = build_optimizer("adamw", fresh.parameters(), 1e-2)
        extra: dict[str, Any] = {}
        iteration = modules.training.load_checkpoint(path, fresh, fresh_opt, extra=extra)
        after_load = _draws()
        files = sorted(os.listdir(d))
    state = fresh_opt.state_dict()["state"]
    return {
        "iteration": iteration,
        "extra": extra,
        "params": [p.detach().clone() for p in model.parameters()],
        "loaded_params": [p.detach().clone() for p in fresh.parameters()],
        "opt_state": [{k: v.clone() for k, v in s.items()} for s in opt.state_dict()["state"].values()],
        "loaded_opt_state": [{k: v.clone() for k, v in s.items()} for s in state.values()],
        "after_save": after_save,
        "after_load": after_load,
        "files": files,
    }



# --------------------------------------------------------------------------- saving and loading


def save_linear(modules: Any, path: str, seed: int, d_in: int, d_out: int, iteration: int) -> None:
    """``save_checkpoint(path, ...)`` of an ``nn.Linear(d_in, d_out)`` built
    after ``torch.manual_seed(seed)`` and its AdamW (the test kills the process
    in the middle of a big one, see ``Impl.interrupted_scenario``)."""
    torch.manual_seed(seed)
    model = nn.Linear(d_in, d_out)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    modules.training.save_checkpoint(path, model, opt, iteration)


class _UnsaveableLinear(nn.Linear):
    """A Linear whose ``state_dict()`` holds a value pickle refuses (a lambda):
    saving it fails midway, the way a full disk would."""

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        sd = super().state_dict(*args, **kwargs)
        sd["unsaveable"] = lambda: None
        return sd


def save_unsaveable(modules: Any, path: str) -> None:
    """``save_checkpoint(path, ...)`` of a model whose state cannot be pickled:
    the call must fail (the test then looks at the folder from outside)."""
    torch.manual_seed(0)
    model = _UnsaveableLinear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    modules.training.save_checkpoint(path, model, opt, 3)


def linear_digest(model: nn.Linear) -> str:
    """sha256 of a Linear's weight then bias bytes."""
    h = hashlib.sha256()
    for p in (model.weight, model.bias):
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def load_linear(modules: Any, path: str, d_in: int, d_out: int) -> Any:
    """``load_checkpoint(path, ...)`` into a fresh ``nn.Linear(d_in, d_out)``
    and AdamW; report the iteration and the sha256 of the loaded weights (the
    test computes the expected one from the seed, which this call is not told)."""
    model = nn.Linear(d_in, d_out)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    iteration = modules.training.load_checkpoint(path, model, opt)
    return {"iteration": iteration, "digest": linear_digest(model)}


class _Trap:
    """Unpickling this object calls ``call(*args)``, which creates ``marker``:
    visible proof that a load ran code from the file. The test picks the call
    at random among several (a loader cannot refuse just the ones it expects;
    only refusing every global but plain data, as ``weights_only`` does, works)."""

    def __init__(self, call: Any, args: tuple[Any, ...]) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.call, self.args)


def _traps(marker: str, path: str) -> list[tuple[Any, tuple[Any, ...]]]:
    import builtins
    import shutil

    return [(os.mkdir, (marker,)), (os.makedirs, (marker,)), (builtins.open, (marker, "x")),
            (shutil.copyfile, (path, marker)), (os.symlink, (path, marker))]


def load_bad_file(modules: Any, kind: str) -> Any:
    """Ask ``load_checkpoint`` to read a bad file and let its error propagate.

    kinds: ``truncated`` (the first half of a real checkpoint), ``garbage``
    (random bytes), ``tensor`` (a torch.save of a bare tensor), ``dict`` (a
    torch.save of an unrelated dict), ``missing`` (no file)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        model = build_model("mlp", 4, 1, 0)
        opt = build_optimizer("adamw", model.parameters(), 1e-2)
        if kind == "truncated":
            modules.training.save_checkpoint(path, model, opt, 3)
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
        elif kind == "garbage":
            with open(path, "wb") as f:
                f.write(np.random.default_rng(0).bytes(5000))
        elif kind == "tensor":
            torch.save(torch.zeros(3), path)
        elif kind == "dict":
            torch.save({"weights": torch.zeros(3), "step": 5}, path)
        elif kind != "missing":
            raise ValueError(kind)
        return modules.training.load_checkpoint(path, model, opt)


def write_trapped_file(path: str, marker: str, which: int) -> None:
    """For the test's side: write at ``path`` a checkpoint that holds, next to
    a real checkpoint's entries, an object whose unpickling creates ``marker``
    (visible proof, on disk, that a load ran code from the file) with the
    ``which``-th of several calls (see :class:`_Trap`)."""
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    traps = _traps(marker, path)
    call, args = traps[which % len(traps)]
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": 1,
                "payload": _Trap(call, args)}, path)


def save_with(modules: Any, iteration: Any, extra_kind: str | None) -> Any:
    """``save_checkpoint`` with odd arguments (for the bad-input checks)."""
    with tempfile.TemporaryDirectory() as d:
        model = build_model("mlp", 4, 1, 0)
        opt = build_optimizer("sgd", model.parameters(), 0.1)
        odd = {
            "object": lambda: object(),
            "module": lambda: nn.Linear(1, 1),
            "list-with-object": lambda: [1, "a", object()],
            "dict-with-module": lambda: {"lr": 0.1, "layer": nn.Linear(1, 1)},
            "nested-object": lambda: {"a": [(1, 2), {"b": (3, object())}]},
            "numpy-float": lambda: np.float64(0.5),
            "numpy-int-in-a-list": lambda: [1, np.int64(2)],
            "tuple-key": lambda: {(1, 2): "a"},
            "set": lambda: {1, 2},
        }
        extra = {} if extra_kind is None else {"thing": odd[extra_kind]()}
        return modules.training.save_checkpoint(os.path.join(d, "c.pt"), model, opt, iteration, **extra)


#: what ``load_into_other_model`` loads into: ``"extra_layer"`` one layer more,
#: ``"missing_layer"`` one fewer, ``"renamed"`` the same weights under other
#: names, ``"wider"`` the same keys with other shapes, ``"buffers"`` the same
#: parameters while the checkpoint also holds a BatchNorm's running statistics
#: (only the model's keys differ; the optimizer fits)
OTHER_MODELS = ("extra_layer", "missing_layer", "renamed", "wider", "buffers")

#: the seed of torch's global RNG just before the load
LOAD_SEED = 9


def other_model(change: str) -> nn.Module:
    """The model of ``change`` (see ``OTHER_MODELS``), built after ``torch.manual_seed(1)``: the same every time."""
    torch.manual_seed(1)
    builders = {"extra_layer": lambda: build_model("mlp", 4, 3, 1),
                "missing_layer": lambda: build_model("mlp", 4, 1, 1),
                "renamed": lambda: Stack(4, 2, block=False),
                "wider": lambda: build_model("mlp", 5, 2, 1),
                "buffers": lambda: build_model("mlp", 4, 2, 1)}
    return builders[change]()


def load_into_other_model(modules: Any, change: str) -> Any:
    """Save a checkpoint of a 2-layer MLP (with a BatchNorm's buffers for
    ``"buffers"``), then load it into ``other_model(change)`` and an SGD of lr
    0.5, right after ``torch.manual_seed(LOAD_SEED)``. Report the error's type
    (None without one) and, as data, that model's parameters, the optimizer's
    lrs and torch's RNG state after the call: the test compares them with its
    own build of the same model."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        model = build_model("mlp", 4, 2, 0)
        assert isinstance(model, nn.Sequential)  # an "mlp" is one
        if change == "buffers":
            model.append(nn.BatchNorm1d(1, affine=False))
        modules.training.save_checkpoint(path, model, build_optimizer("sgd", model.parameters(), 0.1), 3)
        other = other_model(change)
        other_opt = build_optimizer("sgd", other.parameters(), 0.5)
        torch.manual_seed(LOAD_SEED)
        error = None
        try:
            modules.training.load_checkpoint(path, other, other_opt)
        except Exception as e:  # the test checks the type
            error = type(e).__name__
        return {"error": error, "params": [p.detach().clone() for p in other.parameters()],
                "lrs": [g["lr"] for g in other_opt.param_groups], "rng": torch.get_rng_state()}



def extras_round_trip(modules: Any, extras: dict[str, Any]) -> Any:
    """``save_checkpoint(..., **extras)`` then ``load_checkpoint(..., extra=got)``:
    report ``got`` and the iteration."""
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    got: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        modules.training.save_checkpoint(path, model, opt, 2, **extras)
        iteration = modules.training.load_checkpoint(path, model, opt, extra=got)
    return {"iteration": iteration, "extra": got}



def save_to_a_bare_file_name(modules: Any, folder: str, iteration: int) -> None:
    """``save_checkpoint("ckpt.pt", ...)``, a path with no folder part, from
    inside ``folder`` as the working directory, while tempfile's default
    folder does not exist: a temporary file must go beside the target (in
    the working directory), not to the system's temp folder."""
    torch.manual_seed(iteration)
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cwd, tempdir = os.getcwd(), tempfile.tempdir
    os.chdir(folder)
    tempfile.tempdir = os.path.join(folder, "no-such-folder", "tmp")
    try:
        modules.training.save_checkpoint("ckpt.pt", model, opt, iteration)
    finally:
        os.chdir(cwd)
        tempfile.tempdir = tempdir


def load_iteration(modules: Any, path: str) -> Any:
    """The iteration ``load_checkpoint(path, ...)`` returns into a fresh ``nn.Linear(3, 2)`` and AdamW."""
    model = nn.Linear(3, 2)
    return modules.training.load_checkpoint(path, model, torch.optim.AdamW(model.parameters(), lr=1e-3))


def stepped_dropout_model(train_mode: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model with dropout after one AdamW step, left in training (or eval)
    mode: the same parameters, state and global RNG state every time."""
    model = build_dropout_model(4, 2, 0.5, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    model.train(train_mode)
    return model, opt


def after_save(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Every submodule's mode, the parameters, the optimizer's state and torch's RNG state, as data."""
    return {"modes": [m.training for m in model.modules()],
            "params": [p.detach().clone() for p in model.parameters()],
            "state": [{k: v.clone() for k, v in sorted(opt.state[p].items())} for p in model.parameters()],
            "rng": torch.get_rng_state()}


def modes_after_save(modules: Any, train_mode: bool) -> Any:
    """``save_checkpoint`` of ``stepped_dropout_model(train_mode)``; ``after_save`` of it afterwards."""
    model, opt = stepped_dropout_model(train_mode)
    with tempfile.TemporaryDirectory() as d:
        modules.training.save_checkpoint(os.path.join(d, "ckpt.pt"), model, opt, 1)
    return after_save(model, opt)



# --------------------------------------------------------------------------- CUDA's generator, faked


def _fake_cuda(available: bool, state: dict[str, torch.Tensor],
               set_calls: list[torch.Tensor]) -> AbstractContextManager[dict[str, Any]]:
    """Within the ``with`` block, ``torch.cuda``'s availability and RNG
    functions fake one device whose generator state is ``state["state"]``
    when ``available``, none otherwise; the states set are recorded in
    ``set_calls``. The originals are back when the block ends, whatever
    happened in it (a scenario must leave its process as it found it)."""

    def get_state(device: Any = "cuda") -> torch.Tensor:
        if not available:
            raise RuntimeError("no CUDA device (fake)")
        return state["state"].clone()

    def set_state(s: torch.Tensor, device: Any = "cuda") -> None:
        set_calls.append(torch.as_tensor(s).clone())

    def set_state_all(states: list[torch.Tensor]) -> None:
        for s in states:
            set_state(s)

    return mock.patch.multiple(
        torch.cuda,
        is_available=lambda: available,
        device_count=lambda: int(available),
        get_rng_state=get_state,
        get_rng_state_all=lambda: [get_state()] if available else [],
        set_rng_state=set_state,
        set_rng_state_all=set_state_all,
    )


def checkpoint_with_fake_cuda(modules: Any, seed: int) -> Any:
    """Save and load a checkpoint while ``torch.cuda`` pretends one device is
    there (see :func:`_fake_cuda`). Report whether the CUDA generator state the
    fake hands out was restored by the load: the last state set on the fake
    device, as a tensor (None if none was set)."""
    fake = {"state": torch.tensor([seed % 256, 7, 7, 7], dtype=torch.uint8)}
    set_calls: list[torch.Tensor] = []
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    with tempfile.TemporaryDirectory() as d, _fake_cuda(True, fake, set_calls):
        path = os.path.join(d, "ckpt.pt")
        modules.training.save_checkpoint(path, model, opt, 1)
        fake["state"] = torch.tensor([99, 99, 99, 99], dtype=torch.uint8)  # the generator moved on
        modules.training.load_checkpoint(path, model, opt)
    return {"restored": set_calls[-1] if set_calls else None}


def checkpoint_across_machines(modules: Any, saved_with_cuda: bool, seed: int) -> Any:
    """Save where CUDA is (``saved_with_cuda``) or is not available, then load
    into a fresh model on a machine of the other kind (both faked inside this
    scenario). Report the iteration and whether the parameters came back."""
    fake = {"state": torch.tensor([5, 6, 7, 8], dtype=torch.uint8)}
    set_calls: list[torch.Tensor] = []
    model = build_model("mlp", 4, 1, seed)
    opt = build_optimizer("adamw", model.parameters(), 0.1)
    fresh = build_model("mlp", 4, 1, seed + 1)
    fresh_opt = build_optimizer("adamw", fresh.parameters(), 0.1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        with _fake_cuda(saved_with_cuda, fake, set_calls):
            modules.training.save_checkpoint(path, model, opt, 9)
        with _fake_cuda(not saved_with_cuda, fake, set_calls):
            iteration = modules.training.load_checkpoint(path, fresh, fresh_opt)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters(), strict=True))
    return {"iteration": iteration, "params_restored": same}


def resume_cuda_draws(modules: Any, seed: int) -> Any:
    """Save a checkpoint, draw from the CUDA generator, load, draw again."""
    torch.manual_seed(seed)
    model = build_model("mlp", 4, 1, 0)
    opt = build_optimizer("sgd", model.parameters(), 0.1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        modules.training.save_checkpoint(path, model, opt, 1)
        after_save = torch.rand(8, device="cuda").cpu()
        torch.cuda.manual_seed_all(seed + 1)
        modules.training.load_checkpoint(path, model, opt)
        after_load = torch.rand(8, device="cuda").cpu()
    return {"after_save": after_save, "after_load": after_load}


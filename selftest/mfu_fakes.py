"""Shared by the MFU selftests (test_mfu*.py): a fake device clock and fake
implementations that run the real scenario (tests/scenarios/mfu.py) on a
tiny workload (``TINY``) with training loops written here, through the wire
format, advancing the fake clock by ``overhead + steps * step_seconds`` per
call: what a GPU run looks like to the trusted side, with the speed under
our control. ``check`` runs grader/mfu/check.py's driver on them.

A test module imports ``one_thread`` (autouse) to run its tiny matmuls on
one thread."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grader.mfu import check as mfu
from grader.mfu import peaks, settings
from grader.mfu import report as mfu_report
from tests import wire
from tests.harness import ImplBase

# Small enough for the CPU, big enough to tell work from no work: on this
# workload bf16-vs-fp32 differs by < 0.02, half the steps by ~0.49 and half
# the batch by ~0.3 (update error; the measured tolerance is 4 x the bf16-vs-fp32 noise, >= 0.01).
TINY = settings.Workload(dim=32, num_layers=2, batch=128, steps=16, warmup_steps=2, repeats=2, probe=64)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls on a shared machine: threads only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FakeClock:
    """A device clock under test control; records the order of reads and syncs."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now, self.tick = 1000.0, tick
        self.events: list[str] = []

    def __call__(self) -> float:
        self.events.append("clock")
        self.now += self.tick
        return self.now

    def sync(self) -> None:
        self.events.append("sync")


class FakeImpl(ImplBase):
    """Runs scenarios in-process with ``train`` as ``modules.training.train``; each
    call costs ``overhead + steps * step_seconds`` on the fake clock."""

    def __init__(self, name: str, train: Callable[..., Any], clock: FakeClock, step_seconds: float,
                 overhead: float = 0.05) -> None:
        self.name, self.clock, self.step_seconds, self.overhead = name, clock, step_seconds, overhead
        self.modules = SimpleNamespace(training=SimpleNamespace(train=train))
        self.calls: list[tuple[int, int]] = []  # (seed, steps)
        self.precisions: list[str] = []

    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the MFU check only runs scenarios")

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        args, kwargs = wire.decode(wire.encode((args, kwargs)))
        value = fn(self.modules, *args, **kwargs)
        data, seed, steps, _, _ = args
        self.calls.append((seed, steps))
        self.precisions.append(data["precision"])
        self.clock.events.append(f"{self.name}:{steps}")
        self.clock.now += self.overhead + steps * self.step_seconds
        return wire.decode(wire.encode(value))


def train_loop(model, optimizer, batches, steps, autocast: bool, rows: slice = slice(None)) -> list[torch.Tensor]:
    losses = []
    for x, y in batches[:steps]:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = (model(x[rows]).float() - y[rows]).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return losses


def good_train(model, optimizer, batches, *, steps, precision):
    return torch.stack(train_loop(model, optimizer, batches, steps, precision == "bf16")).tolist()


def check(sub_train, sub_step: float, *, ref_step: float = 1e-3, workload=TINY, seeds=(11, 22, 33),
          tick: float = 0.0, **kw):
    clock = FakeClock(tick)
    ref = FakeImpl("ref", good_train, clock, ref_step)
    sub = FakeImpl("sub", sub_train, clock, sub_step)
    report = mfu.run_check(sub, ref, device="cpu", device_name="cpu", clock=clock, sync=clock.sync,
                           workload=workload, seeds=list(seeds), **kw)
    return report, clock, ref, sub


def on_gpu(report: mfu_report.MfuReport, name: str = "NVIDIA H100 80GB HBM3") -> mfu_report.MfuReport:
    """The same measurements as if taken on a GPU (the work itself ran on the CPU)."""
    peak, note = peaks.dense_peak(name, report.workload.precision)
    return dataclasses.replace(report, device="cuda:0", device_name=name, peak_flops=peak, peak_note=note)

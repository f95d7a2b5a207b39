"""The MFU check: time the submission's ``train`` from the trusted side.

On a CUDA device the grader runs the implementation's ``training.train`` on a
fixed workload (:data:`DEFAULT_WORKLOAD`: a bias-free MLP big enough to be
compute-bound, bf16 autocast, AdamW) through the scenario
``tests.scenarios.mfu.train_workload``, and:

* **times it from the trusted side.** The clock is read in this process around
  the whole scenario call (:func:`time_call`), after a device sync, and the
  scenario synchronises the device before it returns. A submission runs in
  another process and cannot touch this clock; it can only make the call take
  longer. Fixed per-call costs (building the model, the round trip) are the
  same for the reference and the submission and small next to the steps.
  Each implementation is warmed up once (CUDA context, cuBLAS handles, any
  ``torch.compile``), then timed ``repeats`` times; the fastest call counts.
* **counts the work itself.** Model FLOPs are ``6 * parameters * rows`` per
  step (:func:`model_flops`), from the workload, never from anything the
  submission returns.
* **checks the work was done**: the parameters after training, probed at
  random entries, must have moved like the reference run's from the same seed
  (:func:`verify_run`), within a tolerance measured at grade time on this
  workload and device (:func:`calibrate`): ``noise_factor`` times the
  distance between the reference loop in bf16 and in fp32, bounded. A loop
  that skips steps, rows or layers ends up many noises away.
* **keeps the submission off the machine while the reference is timed**
  (``isolation``, the sandboxed submission): before each timed reference call
  every process of the submission is killed and checked gone through /proc,
  so no background thread, CUDA stream or queued kernel of it can slow the
  reference down; the submission's own timed call gets a fresh worker
  (warmed up, untimed) with no other worker of it alive. Across graders, the
  grader's plugin holds a per-device lock around GPU problems
  (grader/mfu/gpulock.py), so two gradings never share a device.
* **scores relative to the reference**: the submission passes when its MFU is
  at least ``fraction`` of the reference loop's MFU measured in the same run,
  on the same device (:func:`score`). MFU against the device's dense peak
  (grader/mfu/peaks.py) is reported for information.

On a machine without CUDA the check is not run (the hidden test is skipped
with the ``gpu`` marker and the grader reports "not run on a GPU").

Everything here is a pure function of its inputs plus :func:`run_check`, a
small driver that takes the implementation, the reference, a clock and a sync
function, so that all of it is tested on the CPU with a fake clock
(selftest/test_mfu.py).
The check is split by concern: :mod:`grader.mfu.settings` (workload,
criteria, the rubric's ``[mfu]`` table), :mod:`grader.mfu.measure`
(arithmetic, timing, verification, calibration), :mod:`grader.mfu.report`
(the report, scoring, its text); this module holds the driver and imports
the others' public names, where callers have always found them.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from grader.mfu import peaks
from grader.mfu.measure import (
    calibrate,
    calibration_precision,
    matmul_rate,
    model_flops,
    time_call,
    verify_run,
)
from grader.mfu.report import MfuReport
from grader.mfu.settings import (
    DEFAULT_CRITERIA,
    DEFAULT_WORKLOAD,
    Criteria,
    Workload,
)
from tests.scenarios import mfu as scenarios

__all__ = ["Isolation", "run_check"]


def _seeds(count: int) -> list[int]:
    # Fresh, unpredictable seeds per grading run: a submission cannot prepare
    # (or cache) the result of a call it has not seen yet.
    rng = random.SystemRandom()
    return [rng.randrange(1, 2**31) for _ in range(count)]


class Runner(Protocol):
    """What the check needs from an implementation, the submission's or the
    reference: its scenarios (every ``tests.harness.Impl`` has them)."""

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Isolation(Protocol):
    """What the check needs from a sandboxed submission (grader.sandbox.remote.RemoteImpl)."""

    def retire_workers(self, timeout: float = 30.0) -> None:
        """Kill every process of the submission; return once none exists."""
        ...

    def live_processes(self, *, besides_current: bool = False) -> list[int]:
        """Pids of live submission processes (``besides_current``: not counting
        the worker serving the current problem), observed from outside."""
        ...


def run_check(
    impl: Runner,
    ref: Runner,
    *,
    device: str,
    device_name: str,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
    workload: Workload = DEFAULT_WORKLOAD,
    criteria: Criteria = DEFAULT_CRITERIA,
    seeds: Sequence[int] | None = None,
    matmul_size: int | None = None,
    isolation: Isolation | None = None,
    stand_in: bool = False,
) -> MfuReport:
    """Warm up, then time ``workload.repeats`` pairs of calls (reference, then
    submission, same fresh seed each pair), measure the rounding noise
    (:func:`calibrate`) and verify every submission run against it.

    ``isolation`` (the sandboxed submission, when it is one): before each timed
    reference call every process of the submission is killed and checked gone
    from outside (no background thread, stream or child of it can run while
    the bar is measured); the submission then gets a fresh worker, warmed up
    untimed, for its own timed call, during which no other worker of it may be
    alive. Live processes where none may be are recorded as violations (the
    check then fails). Without ``isolation`` (an in-process submission: local
    runs, benchmarks) both warm up once and the pairs follow.

    ``seeds``: ``1 + repeats`` seeds (the first for the warm-ups); default
    fresh random ones. ``sync`` defaults to ``torch.cuda.synchronize`` on CUDA
    and a no-op elsewhere. ``matmul_size``: also measure an ``n x n`` matmul
    rate in this process (a ceiling to compare with; informational).
    ``stand_in``: the CPU stands in for a GPU (a rehearsal; the report's
    verdict is reached as on a GPU). Errors raised by the submission propagate.
    """
    dev = torch.device(device)
    if sync is None:
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    seeds = list(seeds) if seeds is not None else _seeds(1 + workload.repeats)
    if len(seeds) != 1 + workload.repeats:
        raise ValueError(f"seeds: expected {1 + workload.repeats} (warm-up + repeats), got {len(seeds)}")
    data, probe_seed = workload.as_data(), seeds[0]
    noise_precision = calibration_precision(workload.precision)
    violations: list[str] = []

    def call(who: Runner, seed: int, steps: int, precision: str = workload.precision) -> Any:
        return who.scenario(scenarios.train_workload, {**data, "precision": precision}, seed, steps, probe_seed,
                            device)

    def observe(when: str, besides_current: bool = False) -> None:
        if isolation is not None:
            live = isolation.live_processes(besides_current=besides_current)
            if live:
                violations.append(f"{when}: submission processes {live} were alive")

    call(ref, seeds[0], workload.warmup_steps)  # warm-up: contexts, kernels, compilation; not timed
    if isolation is None:
        call(impl, seeds[0], workload.warmup_steps)
    ref_secs, sub_secs, expected_runs, results = [], [], [], []
    for i, seed in enumerate(seeds[1:], 1):
        if isolation is not None:
            isolation.retire_workers()
            observe(f"before timing the reference (repeat {i})")
        t_ref, expected = time_call(functools.partial(call, ref, seed, workload.steps), clock, sync)
        if isolation is not None:
            observe(f"after timing the reference (repeat {i})")
            call(impl, seeds[0], workload.warmup_steps)  # a fresh worker: warm it up, untimed
            observe(f"before timing the submission (repeat {i}), other workers", besides_current=True)
        t_sub, result = time_call(functools.partial(call, impl, seed, workload.steps), clock, sync)
        if isolation is not None:
            observe(f"after timing the submission (repeat {i}), other workers", besides_current=True)
        ref_secs.append(t_ref)
        sub_secs.append(t_sub)
        expected_runs.append(expected)
        results.append(result)
    if isolation is not None:
        isolation.retire_workers()  # nothing of the submission outlives its check
    # The noise of this workload on this device: the reference loop again, in
    # another precision, on the timed seeds (untimed; trusted code only).
    calibration = calibrate([(call(ref, seed, workload.steps, noise_precision), expected)
                             for seed, expected in zip(seeds[1:], expected_runs, strict=True)],
                            criteria, noise_precision)
    checks = [verify_run(result, expected, steps=workload.steps, tolerance=calibration.tolerance,
                         precision=workload.precision) for result, expected in zip(results, expected_runs, strict=True)]
    peak, note = peaks.dense_peak(device_name, workload.precision) if dev.type == "cuda" else (
        None, "not a GPU: no peak applies")

    matmul = None
    if matmul_size:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[workload.precision]
        matmul = matmul_rate(matmul_size, dtype, device, clock, sync)
    how = "none: the submission runs in this process" if isolation is None else (
        "every submission process killed and checked gone (from /proc) before each timed reference call; "
        "a fresh worker, warmed up untimed, for each timed submission call, with no other worker alive")
    return MfuReport(device=str(dev), device_name=device_name, workload=workload, fraction=criteria.fraction,
                     flops_per_call=model_flops(workload, workload.steps), reference_seconds=ref_secs,
                     submission_seconds=sub_secs, verifications=checks, peak_flops=peak, peak_note=note,
                     matmul_flops=matmul, calibration=calibration, isolation=how, isolation_violations=violations,
                     stand_in=stand_in and dev.type == "cpu")

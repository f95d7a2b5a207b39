"""The MFU check's measurements, as pure functions of their inputs.

Arithmetic (:func:`num_parameters`, :func:`model_flops`, :func:`mfu`), timing
on a given clock (:func:`time_call`, :func:`matmul_rate`), and whether a run
did the reference's work: :func:`update_error`, :func:`verify_run` against a
tolerance from :func:`calibrate` (the rounding noise of the reference loop in
another precision, measured at grade time). Everything takes its clock, sync
and data as arguments, so it is all tested on the CPU (selftest/test_mfu.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.mfu.settings import DEFAULT_CRITERIA, Criteria, Workload

__all__ = ["Calibration", "Verification", "calibrate", "calibration_precision", "matmul_rate", "mfu", "model_flops",
           "num_parameters", "time_call", "update_error", "verify_run"]


def num_parameters(workload: Workload) -> int:
    """Parameters of the workload's model: ``num_layers * dim^2 + dim``."""
    return workload.num_layers * workload.dim * workload.dim + workload.dim


def model_flops(workload: Workload, steps: int) -> int:
    """Model FLOPs of ``steps`` training steps: ``6 * parameters * rows``.

    The usual MFU convention (2 per multiply-add forward, twice that backward).
    It counts the first layer's input gradient, which autograd skips because
    the data needs no gradient: the exact count is lower by ``2 * batch *
    dim^2`` per step. Both the reference and the submission are measured with
    this same formula, so the score does not depend on the choice.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    return 6 * num_parameters(workload) * workload.batch * steps


def mfu(flops: float, seconds: float, peak_flops_per_second: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak FLOP/s."""
    for name, value in (("flops", flops), ("seconds", seconds), ("peak_flops_per_second", peak_flops_per_second)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and name != "flops"):
            raise ValueError(f"{name} must be finite and {'>= 0' if name == 'flops' else '> 0'}, got {value!r}")
    return flops / seconds / peak_flops_per_second


def time_call(fn: Callable[[], Any], clock: Callable[[], float], sync: Callable[[], None]) -> tuple[float, Any]:
    """(seconds, value) of ``fn()``, timed by ``clock`` between two ``sync()``s.

    The first sync drains this process's queued device work so it is not
    billed to ``fn``; the second makes sure everything ``fn`` queued here has
    finished. (Work queued by another process is synchronised by that
    process: the MFU scenario synchronises before it returns.)
    """
    sync()
    start = clock()
    value = fn()
    sync()
    seconds = clock() - start
    if not seconds > 0:
        raise RuntimeError(f"the clock did not advance across the call ({seconds!r} s): cannot time it")
    return seconds, value


def matmul_rate(n: int, dtype: torch.dtype, device: str, clock: Callable[[], float] = time.perf_counter,
                sync: Callable[[], None] | None = None, iters: int = 10) -> float:
    """Measured FLOP/s of an ``n x n @ n x n`` matmul on random inputs (best of
    ``iters`` after one warm-up), in this process."""
    dev = torch.device(device)
    sync = sync or (lambda: torch.cuda.synchronize(dev) if dev.type == "cuda" else None)
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    torch.matmul(a, b)
    best = min(time_call(lambda: torch.matmul(a, b), clock, sync)[0] for _ in range(iters))
    return 2 * n**3 / best


@dataclass(frozen=True)
class Verification:
    """Whether one run of the submission did the reference's work."""

    ok: bool
    message: str
    update_error: float = math.nan


def _as_floats(losses: Any, steps: int) -> list[float] | str:
    if type(losses) not in (list, tuple):
        return f"train returned {type(losses).__name__}, expected a list of {steps} floats"
    if len(losses) != steps:
        return f"train returned {len(losses)} losses for {steps} steps"
    out = []
    for i, v in enumerate(losses):
        if type(v) is torch.Tensor and v.numel() == 1 and v.dtype.is_floating_point:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"loss {i} is {type(v).__name__}, expected a float"
        out.append(float(v))
    return out


def update_error(result: Any, expected: Any) -> float:
    """``|du - du_ref| / |du_ref|`` for the probed parameter updates ``du = final
    - initial`` of two runs of the same seed (both already checked: tensors of
    the same shape). Raises RuntimeError when the reference did not move."""
    ref_update = (expected["final"] - expected["initial"]).double()
    update = (result["final"] - result["initial"]).double()
    scale = ref_update.norm().item()
    if not scale > 0:
        raise RuntimeError("the reference run did not change the parameters: the workload is broken")
    return (update - ref_update).norm().item() / scale


def verify_run(result: Any, expected: Any, *, steps: int, tolerance: float, precision: str = "bf16") -> Verification:
    """Compare one submission run with the reference run of the same seed.

    ``result`` comes from the sandbox, so every field is type-checked before
    use; ``expected`` is the reference's (trusted). Checks: the loss list has
    one finite float per step; the initial probe equals the reference's (the
    same workload was built); the parameter update ``final - initial`` is
    within ``tolerance`` (:func:`calibrate`) of the reference's update,
    relative to its size. ``precision`` is only named in the message.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if type(result) is not dict or set(result) != {"losses", "initial", "final"}:
        return Verification(False, f"the MFU scenario returned {type(result).__name__}, not its result dict")
    losses = _as_floats(result["losses"], steps)
    if isinstance(losses, str):
        return Verification(False, losses)
    if not all(math.isfinite(v) for v in losses):
        return Verification(False, f"train returned non-finite losses: {losses[:5]}...")
    ref_initial = expected["initial"]
    for name in ("initial", "final"):
        t = result[name]
        if type(t) is not torch.Tensor or t.dtype != ref_initial.dtype or t.shape != ref_initial.shape:
            return Verification(False, f"the {name} parameter probe came back as {type(t).__name__}, not a "
                                f"{ref_initial.dtype} tensor of shape {tuple(ref_initial.shape)}")
    if not torch.equal(result["initial"], ref_initial):
        return Verification(False, "the workload's initial parameters differ from the reference's: "
                            "the model was not built from the same seed")
    if not torch.isfinite(result["final"]).all():
        return Verification(False, "the trained parameters contain inf/nan")
    error = update_error(result, expected)
    if not error <= tolerance:
        moved = (result["final"] - result["initial"]).double().norm().item() / \
            (expected["final"] - expected["initial"]).double().norm().item()
        return Verification(False, (
            f"the trained parameters are not where the reference's are: the update differs by {error:.3f} "
            f"of its size (tolerance {tolerance:.3g} for {precision}, from the measured rounding noise; the "
            f"submission's update is {moved:.2f} times as long): were all the steps taken, on whole batches, "
            "with the given optimizer?"), error)
    return Verification(True, f"parameters match the reference run (update error {error:.4f} <= {tolerance:.3g})",
                        error)


@dataclass(frozen=True)
class Calibration:
    """The rounding noise of the graded workload, measured at grade time."""

    precision: str  # the perturbed run's precision (fp32 for a bf16/fp16 workload)
    noises: list[float]  # update error of the perturbed reference run, per timed seed
    tolerance: float

    @property
    def noise(self) -> float:
        return max(self.noises)


def calibration_precision(precision: str) -> str:
    """The precision of the reference run that measures the noise: full fp32
    for a mixed-precision workload (every correct loop's rounding lies between
    the two), bf16 for an fp32 one."""
    return "bf16" if precision == "fp32" else "fp32"


def calibrate(pairs: Sequence[tuple[Any, Any]], criteria: Criteria = DEFAULT_CRITERIA,
              precision: str = "fp32") -> Calibration:
    """The tolerance from ``(perturbed run, reference run)`` pairs of the same
    seeds, all computed by the trusted side (the reference loop)."""
    if not pairs:
        raise ValueError("calibrate needs at least one (perturbed, reference) pair")
    noises = [update_error(perturbed, expected) for perturbed, expected in pairs]
    return Calibration(precision, noises, criteria.tolerance(max(noises)))

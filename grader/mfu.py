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
  (grader/gpulock.py), so two gradings never share a device.
* **scores relative to the reference**: the submission passes when its MFU is
  at least ``fraction`` of the reference loop's MFU measured in the same run,
  on the same device (:func:`score`). MFU against the device's dense peak
  (grader/peaks.py) is reported for information.

On a machine without CUDA the check is not run (the hidden test is skipped
with the ``gpu`` marker and the grader reports "not run on a GPU").

Everything here is a pure function of its inputs plus :func:`run_check`, a
small driver that takes the implementation, the reference, a clock and a sync
function, so that all of it is tested on the CPU with a fake clock
(selftest/test_mfu.py).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from grader import peaks
from tests.harness import Impl
from tests.scenarios import mfu as scenarios

__all__ = [
    "DEFAULT_CRITERIA", "DEFAULT_WORKLOAD", "Calibration", "Criteria", "Isolation", "MfuReport", "Settings",
    "Verification", "Workload", "calibrate", "calibration_precision", "format_report", "load_settings",
    "matmul_rate", "mfu", "model_flops", "num_parameters", "run_check", "score", "time_call", "update_error",
    "verify_run",
]

RUBRIC = Path(__file__).resolve().parent / "rubric.toml"


@dataclass(frozen=True)
class Workload:
    """What the graded ``train`` call runs (see tests/scenarios/mfu.py).

    The default, 4 layers of 4096 x 4096 on 8192 rows, is 3.3 TFLOP per step:
    a few milliseconds on an H100, so matmuls dominate and a 64-step call is
    long next to the fixed per-call costs (about 10 ms); its fp32 state (~1.1 GB)
    and bf16 activations (~0.4 GB) fit any 40 GB GPU. ``lr`` is small enough
    that the parameters move steadily for all the steps (Adam's early updates
    are about ``lr`` per entry), which is what lets :func:`verify_run` tell a
    full run from a partial one.
    """

    dim: int = 4096
    num_layers: int = 4
    batch: int = 8192
    steps: int = 64
    warmup_steps: int = 4
    repeats: int = 3
    lr: float = 1e-4
    precision: str = "bf16"
    probe: int = 4096  # parameter entries sampled per parameter tensor

    def __post_init__(self) -> None:
        for name in ("dim", "num_layers", "batch", "steps", "warmup_steps", "repeats", "probe"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"workload.{name} must be an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"workload.{name} must be >= 1, got {value}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < 1:
            raise ValueError(f"workload.lr must be a number in (0, 1), got {self.lr!r}")
        if self.precision not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"workload.precision must be 'bf16', 'fp16' or 'fp32', got {self.precision!r}")

    def as_data(self) -> dict[str, Any]:
        """The plain-data form the scenario receives."""
        return {"dim": self.dim, "num_layers": self.num_layers, "batch": self.batch, "lr": float(self.lr),
                "precision": self.precision, "probe": self.probe}


@dataclass(frozen=True)
class Criteria:
    """How the check decides.

    ``fraction``: the submission passes when its MFU is at least this share of
    the reference loop's.

    The update tolerance is not a fixed number: it is measured on the graded
    workload at grade time (:func:`calibrate`). For every timed seed the
    trusted side also runs the reference loop in full fp32 and takes the
    relative distance between that update and the bf16 reference update: the
    rounding noise of this workload, at its width, batch and step count, on
    this device's kernels. The tolerance is ``noise_factor`` times the largest
    such noise, kept within ``[min_tolerance, max_tolerance]``. A correct loop
    in another style (fp32, another op order, fused or unfused, compiled)
    differs from the reference by rounding only, so it lands within about one
    noise; a loop that skips a share of the work (steps, rows, layers) moves
    the parameters elsewhere by that share's gradient, a distance that does
    not shrink with the precision. Measured on the CPU stand-in (widths 32-256,
    batch 1-32 x width, 16-64 steps): noise 0.003-0.018; half the batch
    0.19-0.51, half the steps ~0.48, frozen layers >= 0.66. ``max_tolerance``
    stays below every partial-work figure seen, so a noisy device cannot open
    the door to skipping work: it fails honest loops instead, loudly (the
    report prints the noise).
    """

    fraction: float = 0.8
    noise_factor: float = 4.0
    min_tolerance: float = 0.01
    max_tolerance: float = 0.15

    def __post_init__(self) -> None:
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) or not 0 < self.fraction <= 1:
            raise ValueError(f"criteria.fraction must be in (0, 1], got {self.fraction!r}")
        for name in ("noise_factor", "min_tolerance", "max_tolerance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"criteria.{name} must be a positive number, got {value!r}")
        if self.noise_factor < 1:
            raise ValueError(f"criteria.noise_factor must be >= 1, got {self.noise_factor!r}")
        if not self.min_tolerance <= self.max_tolerance < 1:
            raise ValueError(f"criteria: need min_tolerance <= max_tolerance < 1, got "
                             f"{self.min_tolerance!r} and {self.max_tolerance!r}")

    def tolerance(self, noise: float) -> float:
        """The accepted update error for a measured ``noise``: ``noise_factor *
        noise`` within ``[min_tolerance, max_tolerance]``."""
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
            raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
        return min(max(self.noise_factor * noise, self.min_tolerance), self.max_tolerance)


DEFAULT_WORKLOAD = Workload()
DEFAULT_CRITERIA = Criteria()


@dataclass(frozen=True)
class Settings:
    workload: Workload = DEFAULT_WORKLOAD
    criteria: Criteria = DEFAULT_CRITERIA


def load_settings(path: Path = RUBRIC) -> Settings:
    """Workload and criteria from the rubric's ``[mfu]`` table (defaults for
    anything it leaves out, or when there is no such table).

    ``[mfu]`` keys: the fields of :class:`Workload` and :class:`Criteria`,
    e.g. ``fraction = 0.8``, ``steps = 64``, ``noise_factor = 4.0``.
    """
    from grader.compat import tomllib

    table: dict[str, Any] = {}
    if path.is_file():
        table = dict(tomllib.loads(path.read_text()).get("mfu", {}))
    workload_keys = {f.name for f in dataclasses.fields(Workload)}
    criteria_keys = {f.name for f in dataclasses.fields(Criteria)}
    unknown = set(table) - workload_keys - criteria_keys
    if unknown:
        raise ValueError(f"{path}: unknown keys in [mfu]: {', '.join(sorted(unknown))}")
    criteria_args = {k: v for k, v in table.items() if k in criteria_keys}
    return Settings(
        Workload(**{k: v for k, v in table.items() if k in workload_keys}),
        Criteria(**criteria_args),
    )


# --------------------------------------------------------------------------- arithmetic


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


# --------------------------------------------------------------------------- verification


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


# --------------------------------------------------------------------------- scoring and the driver


@dataclass(frozen=True)
class MfuReport:
    """Everything the check measured and decided (plain data, printable)."""

    device: str
    device_name: str
    workload: Workload
    fraction: float
    flops_per_call: int
    reference_seconds: list[float]
    submission_seconds: list[float]
    verifications: list[Verification]
    peak_flops: float | None
    peak_note: str
    matmul_flops: float | None = None
    calibration: Calibration | None = None
    #: How the submission was kept off the machine while the reference ran
    #: (and other workers while it ran); "none" for an in-process submission.
    isolation: str = "none"
    #: Live submission processes seen where none may be: a failed check, never a pass.
    isolation_violations: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.verifications) and all(v.ok for v in self.verifications)

    @property
    def ratio(self) -> float:
        """Submission MFU / reference MFU (same FLOPs: the inverse ratio of the fastest calls' times)."""
        return min(self.reference_seconds) / min(self.submission_seconds)

    def best_seconds(self, who: str) -> float:
        """The fastest timed call of ``who``: "reference" or "submission"."""
        if who not in ("reference", "submission"):
            raise ValueError(f"who must be 'reference' or 'submission', got {who!r}")
        return min(self.reference_seconds if who == "reference" else self.submission_seconds)

    def achieved(self, who: str) -> float:
        """Model FLOP/s of the fastest timed call of ``who``."""
        return self.flops_per_call / self.best_seconds(who)

    def mfu_vs_peak(self, who: str) -> float | None:
        """MFU of ``who`` against the device's dense peak; None when the peak is unknown."""
        if self.peak_flops is None:
            return None
        return mfu(self.flops_per_call, self.best_seconds(who), self.peak_flops)

    @property
    def passed(self) -> bool:
        return self.device.startswith("cuda") and self.verified and not self.isolation_violations and score(
            min(self.submission_seconds), min(self.reference_seconds), self.fraction)


def score(submission_seconds: float, reference_seconds: float, fraction: float) -> bool:
    """Whether the submission reached ``fraction`` of the reference's MFU.

    Same FLOPs, same device: the MFU ratio is the inverse ratio of the times.
    """
    for name, value in (("submission_seconds", submission_seconds), ("reference_seconds", reference_seconds)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return reference_seconds / submission_seconds >= fraction


def _seeds(count: int) -> list[int]:
    # Fresh, unpredictable seeds per grading run: a submission cannot prepare
    # (or cache) the result of a call it has not seen yet.
    rng = random.SystemRandom()
    return [rng.randrange(1, 2**31) for _ in range(count)]


@runtime_checkable
class Isolation(Protocol):
    """What the check needs from a sandboxed submission (grader.remote.RemoteImpl)."""

    def retire_workers(self, timeout: float = 30.0) -> None:
        """Kill every process of the submission; return once none exists."""
        ...

    def live_processes(self, *, besides_current: bool = False) -> list[int]:
        """Pids of live submission processes (``besides_current``: not counting
        the worker serving the current problem), observed from outside."""
        ...


def run_check(
    impl: Impl,
    ref: Impl,
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
    Errors raised by the submission propagate.
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

    def call(who: Impl, seed: int, steps: int, precision: str = workload.precision) -> Any:
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
        t_ref, expected = time_call(lambda s=seed: call(ref, s, workload.steps), clock, sync)
        if isolation is not None:
            observe(f"after timing the reference (repeat {i})")
            call(impl, seeds[0], workload.warmup_steps)  # a fresh worker: warm it up, untimed
            observe(f"before timing the submission (repeat {i}), other workers", besides_current=True)
        t_sub, result = time_call(lambda s=seed: call(impl, s, workload.steps), clock, sync)
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
                     matmul_flops=matmul, calibration=calibration, isolation=how, isolation_violations=violations)


def format_report(report: MfuReport) -> str:
    """A short human-readable account of the check (for the grader's output)."""
    w = report.workload
    lines = [
        f"MFU check on {report.device} ({report.device_name}): {w.num_layers} x {w.dim}^2 MLP, batch {w.batch}, "
        f"{w.steps} steps, {w.precision}; {report.flops_per_call / 1e12:.3g} TFLOP per call (6 * params * rows)",
    ]
    for who in ("reference", "submission"):
        secs = report.reference_seconds if who == "reference" else report.submission_seconds
        line = (f"  {who:<10}: best {min(secs) * 1e3:.1f} ms of {[round(s * 1e3, 1) for s in secs]} ms, "
                f"{report.achieved(who) / 1e12:.1f} TFLOP/s")
        vs_peak = report.mfu_vs_peak(who)
        if vs_peak is not None:
            line += f", MFU {vs_peak:.3f} of dense peak"
        if report.matmul_flops:
            line += f", {report.achieved(who) / report.matmul_flops:.3f} of the measured matmul rate"
        lines.append(line)
    lines.append(f"  peak: {report.peak_note}")
    if report.calibration is not None:
        c = report.calibration
        lines.append(f"  rounding noise (reference loop, {w.precision} vs {c.precision}): "
                     f"{[round(n, 4) for n in c.noises]}; update tolerance {c.tolerance:.3g}")
    lines.append(f"  isolation: {report.isolation}")
    lines += [f"  ISOLATION VIOLATED: {v}" for v in report.isolation_violations]
    if report.matmul_flops:
        lines.append(f"  measured matmul rate: {report.matmul_flops / 1e12:.1f} TFLOP/s")
    ratio = report.ratio
    lines.append(f"  submission MFU / reference MFU = {ratio:.3f} (needs >= {report.fraction})")
    lines += [f"  run {i + 1}: {v.message}" for i, v in enumerate(report.verifications)]
    if not report.device.startswith("cuda"):
        lines.append("  not run on a GPU: informational only, never a pass")
    else:
        lines.append("  PASSED" if report.passed else "  FAILED")
    return "\n".join(lines)

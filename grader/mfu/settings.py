"""What the MFU check runs and how it decides: its settings.

:class:`Workload` (the graded ``train`` call: model size, batch, steps,
precision), :class:`Criteria` (the pass fraction and how the update tolerance
follows the measured rounding noise) and :class:`Settings` (both), read from
the rubric's ``[mfu]`` table by :func:`load_settings` through
:mod:`grader.rubric`. Pure data with validation; see :mod:`grader.mfu.check` for
the check itself.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.rubric import DEFAULT_RUBRIC, read_table

__all__ = ["DEFAULT_CRITERIA", "DEFAULT_WORKLOAD", "DRIFT", "MAX_DRIFT", "STAND_IN_KEYS", "STAND_IN_WORKLOAD",
           "Criteria", "Settings", "Workload", "load_settings", "settings_from_table"]


#: ``lr * dim * steps`` of the default learning rate (:class:`Workload`): on
#: the CPU stand-in at width 1024 and 64 steps, half the steps then lands 0.45
#: from the full run's update and the bf16 rounding noise is 0.012.
DRIFT = 0.25
#: The largest drift an explicit ``lr`` may give. The CPU stand-in's widths
#: (32-256, 16-64 steps at lr 1e-4: drift 0.05-1.6) all told partial work
#: apart; an H200 at drift 26 did not.
MAX_DRIFT = 2.0


@dataclass(frozen=True)
class Workload:
    """What the graded ``train`` call runs (see tests/scenarios/mfu.py).

    The default, 4 layers of 4096 x 4096 on 8192 rows, is 3.3 TFLOP per step:
    a few milliseconds on an H100, so matmuls dominate and a 64-step call is
    long next to the fixed per-call costs (about 10 ms); its fp32 state (~1.1 GB)
    and bf16 activations (~0.4 GB) fit any 40 GB GPU.

    The parameters must move steadily for all the steps: that is what lets
    :func:`verify_run` tell a full run from a partial one. Adam moves every
    weight by about the learning rate per step, so a layer's output moves by
    about ``lr * dim`` per step, and over the call by the *drift* ``lr * dim *
    steps``. Past a drift of a few the model fits its target within the first
    steps and later updates are rounding noise: on an H200 at ``lr`` 1e-4
    (drift 26) a loop running half the steps landed 0.087 from the full run's
    update, under the 0.15 tolerance, and passed. So ``lr`` defaults to
    :data:`DRIFT` / (dim * steps) (9.5e-7 for the default), and an ``lr`` past
    :data:`MAX_DRIFT` is refused.
    """

    dim: int = 4096
    num_layers: int = 4
    batch: int = 8192
    steps: int = 64
    warmup_steps: int = 4
    repeats: int = 3
    lr: float | None = None  # AdamW's learning rate; None: DRIFT / (dim * steps) (:attr:`learning_rate`)
    precision: str = "bf16"
    probe: int = 4096  # parameter entries sampled per parameter tensor

    def __post_init__(self) -> None:
        for name in ("dim", "num_layers", "batch", "steps", "warmup_steps", "repeats", "probe"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"workload.{name} must be an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"workload.{name} must be >= 1, got {value}")
        if self.lr is not None:
            if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < 1:
                raise ValueError(f"workload.lr must be a number in (0, 1), got {self.lr!r}")
            drift = self.lr * self.dim * self.steps
            if drift > MAX_DRIFT:
                raise ValueError(f"workload.lr = {self.lr!r}: lr * dim * steps is {drift:.3g}, over {MAX_DRIFT:g}; "
                                 f"the parameters would settle within the first steps and a run that skips "
                                 f"steps could not be told from a full one (leave lr out: "
                                 f"{DRIFT:g} / (dim * steps) = {DRIFT / (self.dim * self.steps):.3g})")
        if self.precision not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"workload.precision must be 'bf16', 'fp16' or 'fp32', got {self.precision!r}")

    @property
    def learning_rate(self) -> float:
        """AdamW's learning rate: ``lr``, else the one of drift :data:`DRIFT`."""
        return float(self.lr) if self.lr is not None else DRIFT / (self.dim * self.steps)

    def as_data(self) -> dict[str, Any]:
        """The plain-data form the scenario receives."""
        return {"dim": self.dim, "num_layers": self.num_layers, "batch": self.batch, "lr": self.learning_rate,
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
#: The workload where the CPU stands in for the GPU (``python -m grader
#: --cpu-stand-in``, a rehearsal of the GPU pipeline): 0.8 GFLOP per step,
#: a few milliseconds on one CPU thread, so the matmuls still dominate a call
#: and a loop doing more work is measurably slower; 64 steps make a timed
#: call about 0.2 CPU s, 20 ticks of the clock that times it there (the
#: workers' CPU time); overridden by the rubric's ``[mfu.stand_in]`` table.
STAND_IN_WORKLOAD = Workload(dim=256, num_layers=4, batch=512, steps=64, warmup_steps=2, repeats=3, probe=256)


@dataclass(frozen=True)
class Settings:
    """The MFU check's workload and criteria (the rubric's ``[mfu]`` table)."""

    workload: Workload = DEFAULT_WORKLOAD
    criteria: Criteria = DEFAULT_CRITERIA


def load_settings(path: Path = DEFAULT_RUBRIC, *, stand_in: bool = False) -> Settings:
    """Workload and criteria from the rubric's ``[mfu]`` table (defaults for
    anything it leaves out, or when there is no such table); ValueError
    (RubricError) or TypeError for unknown keys or bad values.

    ``[mfu]`` keys: the fields of :class:`Workload` and :class:`Criteria`,
    e.g. ``fraction = 0.8``, ``steps = 64``, ``noise_factor = 4.0``; its
    ``[mfu.stand_in]`` table: the workload's sizes where the CPU stands in
    for the GPU (``stand_in``; :data:`STAND_IN_WORKLOAD` for what it leaves out).
    """
    return settings_from_table(read_table(path, "mfu"), str(path), stand_in=stand_in)


#: The keys of ``[mfu.stand_in]``: the workload's sizes (its precision, learning
#: rule and criteria are the graded workload's).
STAND_IN_KEYS = ("dim", "num_layers", "batch", "steps", "warmup_steps", "repeats", "probe")


def settings_from_table(table: dict[str, Any], where: str = "[mfu]", *, stand_in: bool = False) -> Settings:
    """:class:`Settings` from an ``[mfu]`` table as written (e.g.
    ``grader.rubric.load().mfu``); ``where`` names it in errors;
    ``stand_in``: the workload where the CPU stands in for the GPU."""
    workload_keys = {f.name for f in dataclasses.fields(Workload)}
    criteria_keys = {f.name for f in dataclasses.fields(Criteria)}
    table = dict(table)
    small = table.pop("stand_in", {})
    unknown = set(table) - workload_keys - criteria_keys
    if unknown:
        raise ValueError(f"{where}: unknown keys in [mfu]: {', '.join(sorted(unknown))}")
    if not isinstance(small, dict) or set(small) - set(STAND_IN_KEYS):
        raise ValueError(f"{where}: [mfu.stand_in] must be a table of {', '.join(STAND_IN_KEYS)}")
    workload = Workload(**{k: v for k, v in table.items() if k in workload_keys})
    if stand_in:
        sizes = {k: small.get(k, getattr(STAND_IN_WORKLOAD, k)) for k in STAND_IN_KEYS}
        # (an explicit lr is the GPU workload's: the stand-in's follows the drift)
        workload = dataclasses.replace(workload, **sizes, lr=None)
    elif small:
        Workload(**small)  # its values are checked whichever workload runs
    return Settings(workload, Criteria(**{k: v for k, v in table.items() if k in criteria_keys}))

"""What the MFU check measured and decided, and how it is printed.

:class:`MfuReport` is plain data (times, verifications, calibration,
isolation); its ``passed`` applies :func:`score` (the submission's MFU against
``fraction`` of the reference's, from the same run on the same device);
:func:`format_report` is the account the grader prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from grader.mfu.measure import Calibration, Verification, mfu
from grader.mfu.settings import Workload

__all__ = ["MfuReport", "format_report", "score"]


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
    #: The CPU stood in for a GPU (``python -m grader --cpu-stand-in``): a
    #: rehearsal, whose verdict is reached as on a GPU. Any other report off a
    #: CUDA device is informational only, never a pass.
    stand_in: bool = False

    @property
    def verified(self) -> bool:
        return bool(self.verifications) and all(v.ok for v in self.verifications)

    @property
    def impossible(self) -> list[str]:
        """The timed submission runs faster than the device's dense peak allows
        for their model FLOPs (the speed of light): work not done, never a pass.
        The clock is the trusted side's and every run is verified, so no
        submission should get here; a run that does exposes a broken measurement."""
        if not self.peak_flops:
            return []
        floor = self.flops_per_call / self.peak_flops
        tflop = self.flops_per_call / 1e12
        return [f"run {i}: {t * 1e3:.2f} ms, where its {tflop:.3g} TFLOP take at least {floor * 1e3:.2f} ms at the "
                "dense peak" for i, t in enumerate(self.submission_seconds, 1) if t < floor]

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
        graded = self.device.startswith("cuda") or self.stand_in
        return graded and self.verified and not self.isolation_violations and not self.impossible and score(
            min(self.submission_seconds), min(self.reference_seconds), self.fraction)


def score(submission_seconds: float, reference_seconds: float, fraction: float) -> bool:
    """Whether the submission reached ``fraction`` of the reference's MFU.

    Same FLOPs, same device: the MFU ratio is the inverse ratio of the times.
    """
    for name, value in (("submission_seconds", submission_seconds), ("reference_seconds", reference_seconds)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return reference_seconds / submission_seconds >= fraction


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
    lines += [f"  FASTER THAN THE DEVICE CAN RUN IT: {v}" for v in report.impossible]
    if report.stand_in:
        lines.append("  the CPU stood in for a GPU (a rehearsal): " + ("PASSED" if report.passed else "FAILED"))
    elif not report.device.startswith("cuda"):
        lines.append("  not run on a GPU: informational only, never a pass")
    else:
        lines.append("  PASSED" if report.passed else "  FAILED")
    return "\n".join(lines)

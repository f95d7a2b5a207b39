"""Dense peak FLOP/s of the GPUs the grader may meet, from NVIDIA's datasheets.

MFU is achieved model FLOP/s divided by the device's *dense* peak for the
precision used. NVIDIA's datasheets quote the tensor-core figures (TF32, BF16,
FP16, FP8) "with sparsity" (2:4 structured sparsity, marked with an asterisk);
a dense matmul gets half of that, so this table stores the quoted figure
divided by two. FP32 (CUDA cores, no tensor cores) is quoted dense and stored
as is.

A device name this table does not know is an explicit "unknown" (``None`` and
a reason), never a guess from a similar name: an H20 is not an H200, an H100
PCIe is not an H100 SXM, a GB200 runs at other clocks than a B200.

Sources (figures in TFLOP/s, "*" = with sparsity, as printed):

* A100 (SXM4 and PCIe, 40 GB and 80 GB; the memory size does not change the
  compute): NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5, TF32 156 / 312*,
  BF16 312 / 624*, FP16 312 / 624*; no FP8 tensor cores (Ampere).
* H100 SXM and H100 PCIe: NVIDIA H100 Tensor Core GPU datasheet:
  SXM: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*, FP8 3,958*;
  PCIe: FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*, FP8 3,026*.
* H100 NVL: the same datasheet's per-GPU NVL column: FP32 60, TF32 835*,
  BF16 1,671*, FP16 1,671*, FP8 3,341* (figures recalled from the datasheet;
  the SXM, PCIe, A100 and B200 figures were cross-checked against second
  sources, these were not).
* H200 (SXM): NVIDIA H200 Tensor Core GPU datasheet: the same compute as the
  H100 SXM (FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*, FP8 3,958*); only
  the memory (141 GB HBM3e, 4.8 TB/s) differs. The H200 NVL (a 600 W card) has
  lower peaks and is deliberately left unknown.
* B200 (HGX B200, 1,000 W): NVIDIA HGX B200 datasheet, per GPU: FP32 75,
  TF32 2,200*, BF16 4,500*, FP16 4,500*, FP8 9,000*. (GB200 parts run at
  1,200 W with higher peaks: unknown here.)
"""

from __future__ import annotations

import re
from typing import NamedTuple

import torch

__all__ = ["PEAKS", "PRECISIONS", "DevicePeaks", "PeakLookup", "dense_peak", "identify", "precision_key"]

#: The precisions the table covers, as keys of :attr:`DevicePeaks.flops`.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")

_T = 1e12


def _from_sparse(tflops_with_sparsity: float) -> float:
    """Dense FLOP/s from a datasheet figure quoted with 2:4 sparsity."""
    return tflops_with_sparsity * _T / 2


class DevicePeaks(NamedTuple):
    """One device's dense peaks in FLOP/s per precision (``None``: not supported)."""

    name: str
    flops: dict[str, float | None]
    source: str


PEAKS: dict[str, DevicePeaks] = {
    "A100": DevicePeaks(
        "NVIDIA A100 (SXM4/PCIe, 40/80 GB)",
        {"fp32": 19.5 * _T, "tf32": _from_sparse(312), "bf16": _from_sparse(624),
         "fp16": _from_sparse(624), "fp8": None},
        "NVIDIA A100 Tensor Core GPU datasheet",
    ),
    "H100 SXM": DevicePeaks(
        "NVIDIA H100 SXM",
        {"fp32": 67 * _T, "tf32": _from_sparse(989), "bf16": _from_sparse(1979),
         "fp16": _from_sparse(1979), "fp8": _from_sparse(3958)},
        "NVIDIA H100 Tensor Core GPU datasheet (SXM column)",
    ),
    "H100 PCIe": DevicePeaks(
        "NVIDIA H100 PCIe",
        {"fp32": 51 * _T, "tf32": _from_sparse(756), "bf16": _from_sparse(1513),
         "fp16": _from_sparse(1513), "fp8": _from_sparse(3026)},
        "NVIDIA H100 Tensor Core GPU datasheet (PCIe column)",
    ),
    "H100 NVL": DevicePeaks(
        "NVIDIA H100 NVL",
        {"fp32": 60 * _T, "tf32": _from_sparse(835), "bf16": _from_sparse(1671),
         "fp16": _from_sparse(1671), "fp8": _from_sparse(3341)},
        "NVIDIA H100 Tensor Core GPU datasheet (NVL column, per GPU)",
    ),
    "H200": DevicePeaks(
        "NVIDIA H200 (SXM)",
        {"fp32": 67 * _T, "tf32": _from_sparse(989), "bf16": _from_sparse(1979),
         "fp16": _from_sparse(1979), "fp8": _from_sparse(3958)},
        "NVIDIA H200 Tensor Core GPU datasheet (SXM column)",
    ),
    "B200": DevicePeaks(
        "NVIDIA B200 (HGX, 1,000 W)",
        {"fp32": 75 * _T, "tf32": _from_sparse(2200), "bf16": _from_sparse(4500),
         "fp16": _from_sparse(4500), "fp8": _from_sparse(9000)},
        "NVIDIA HGX B200 datasheet (per GPU)",
    ),
}


class PeakLookup(NamedTuple):
    """What :func:`identify` made of a device name: a table key, or why not."""

    key: str | None
    reason: str


# Word boundaries (\b) keep "A100" from matching "A1000"/"A100X" and "H200"
# from matching "GH200"; "H20" never matches r"\bH200\b".
_A100 = re.compile(r"\bA100\b", re.I)
_H100 = re.compile(r"\bH100\b", re.I)
_H200 = re.compile(r"\bH200\b", re.I)
_B200 = re.compile(r"\bB200\b", re.I)


def identify(device_name: str) -> PeakLookup:
    """The table entry for a ``torch.cuda.get_device_name()`` string.

    Examples: ``"NVIDIA H100 80GB HBM3"`` is the H100 SXM (the PCIe card is
    ``"NVIDIA H100 PCIe"``, HBM2e), ``"NVIDIA A100-SXM4-80GB"`` and
    ``"NVIDIA A100 80GB PCIe"`` are A100s, ``"NVIDIA H200"`` is the H200 SXM.
    Anything ambiguous or unlisted gives ``key=None`` with the reason.
    """
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {type(device_name).__name__} {device_name!r}")
    name = device_name.strip()
    if _A100.search(name):
        return PeakLookup("A100", f"{name!r}: A100 (SXM and PCIe, 40/80 GB share dense peaks)")
    if _H100.search(name):
        if re.search(r"\bNVL\b", name, re.I):
            return PeakLookup("H100 NVL", f"{name!r}: H100 NVL")
        if re.search(r"\bPCIe\b", name, re.I):
            return PeakLookup("H100 PCIe", f"{name!r}: H100 PCIe")
        if re.search(r"\bHBM3\b|\bSXM", name, re.I):
            return PeakLookup("H100 SXM", f"{name!r}: H100 SXM (HBM3)")
        return PeakLookup(None, f"{name!r}: an H100 whose form factor (SXM/PCIe/NVL) the name does not tell")
    if _H200.search(name):
        if re.search(r"\bNVL\b", name, re.I):
            return PeakLookup(None, f"{name!r}: H200 NVL has lower peaks than the H200 SXM and is not in the table")
        return PeakLookup("H200", f"{name!r}: H200 (SXM)")
    if _B200.search(name):
        return PeakLookup("B200", f"{name!r}: B200 (HGX)")
    return PeakLookup(None, f"{name!r} is not in the peak table ({', '.join(PEAKS)})")


_DTYPE_KEYS = {
    torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
    torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8",
}


def precision_key(precision: str | torch.dtype) -> str:
    """``"bf16"`` for ``"bf16"``, ``"bfloat16"`` or ``torch.bfloat16``, and so on.

    ``torch.float32`` means plain FP32 (CUDA cores); TF32 tensor-core matmuls
    are only ever asked for by name (``"tf32"``).
    """
    if isinstance(precision, torch.dtype):
        if precision not in _DTYPE_KEYS:
            raise ValueError(f"precision: no peak for dtype {precision}")
        return _DTYPE_KEYS[precision]
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a str or torch.dtype, got {type(precision).__name__} {precision!r}")
    key = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(
        precision.lower(), precision.lower())
    if key not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return key


def dense_peak(device_name: str, precision: str | torch.dtype) -> tuple[float | None, str]:
    """(dense peak FLOP/s, explanation) for a device name and a precision.

    The peak is ``None`` when the device is unknown or has no such tensor
    cores (the A100 has no FP8); the explanation then says which.
    """
    key = precision_key(precision)
    found = identify(device_name)
    if found.key is None:
        return None, f"unknown device: {found.reason}"
    entry = PEAKS[found.key]
    peak = entry.flops[key]
    if peak is None:
        return None, f"{entry.name} has no dense {key} peak (not supported by its tensor cores)"
    return peak, f"{entry.name}, dense {key}: {peak / _T:g} TFLOP/s ({entry.source})"

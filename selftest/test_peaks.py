"""The peak FLOP/s table (grader/mfu/peaks.py): dense figures and device-name matching."""

from __future__ import annotations

import pytest
import torch

from grader.mfu import peaks

T = 1e12


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100-PCIE-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"),
])
def test_known_devices(name, key):
    found = peaks.identify(name)
    assert found.key == key, f"{name!r}: expected {key}, got {found}"


@pytest.mark.parametrize("name", [
    "NVIDIA H20",          # a different (export) part, far lower peaks
    "NVIDIA H200 NVL",     # a 600 W card: lower peaks than the SXM H200
    "NVIDIA GH200 480GB",  # Grace Hopper: not an H200
    "NVIDIA GB200",        # Grace Blackwell: other clocks than the HGX B200
    "NVIDIA H100",         # form factor unknown: SXM and PCIe differ by 30%
    "NVIDIA H800",
    "NVIDIA A10G", "NVIDIA A1000", "NVIDIA A100X",
    "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "cpu", "",
])
def test_unknown_devices_are_explicit(name):
    found = peaks.identify(name)
    assert found.key is None, f"{name!r} must be unknown, matched {found.key}"
    assert found.reason
    peak, why = peaks.dense_peak(name, "bf16")
    assert peak is None and "unknown device" in why


def test_sparse_datasheet_figures_are_halved():
    # H100 SXM datasheet: BF16 1,979 TFLOP/s "with sparsity" -> 989.5 dense,
    # the figure the handout uses for MFU.
    assert peaks.dense_peak("NVIDIA H100 80GB HBM3", "bf16")[0] == 989.5 * T
    assert peaks.dense_peak("NVIDIA H100 80GB HBM3", "fp8")[0] == 1979 * T
    assert peaks.dense_peak("NVIDIA H100 80GB HBM3", "tf32")[0] == 494.5 * T
    assert peaks.dense_peak("NVIDIA A100-SXM4-80GB", torch.bfloat16)[0] == 312 * T
    assert peaks.dense_peak("NVIDIA A100-SXM4-80GB", "tf32")[0] == 156 * T
    assert peaks.dense_peak("NVIDIA B200", "bf16")[0] == 2250 * T


def test_fp32_is_quoted_dense_and_kept():
    assert peaks.dense_peak("NVIDIA A100-PCIE-40GB", torch.float32)[0] == 19.5 * T
    assert peaks.dense_peak("NVIDIA H100 PCIe", "fp32")[0] == 51 * T


def test_a100_has_no_fp8():
    peak, why = peaks.dense_peak("NVIDIA A100-SXM4-80GB", "fp8")
    assert peak is None and "fp8" in why


def test_the_table_is_complete_and_consistent():
    assert set(peaks.PEAKS) >= {"A100", "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "B200"}
    for key, entry in peaks.PEAKS.items():
        assert set(entry.flops) == set(peaks.PRECISIONS), key
        f = entry.flops
        # Tensor-core ladder: fp16 = bf16 ~ 2 x tf32 (datasheets round: 989 vs 1,979;
        # B200 2.2 vs 4.5 PFLOP/s), fp8 = 2 x bf16; CUDA-core fp32 far below tf32.
        assert f["bf16"] == f["fp16"] == pytest.approx(2 * f["tf32"], rel=0.03), key
        assert f["fp8"] is None or f["fp8"] == pytest.approx(2 * f["bf16"], rel=1e-3), key
        assert f["fp32"] < f["tf32"], key
        assert entry.source, key
    assert peaks.PEAKS["H200"].flops == peaks.PEAKS["H100 SXM"].flops  # same GH100 compute, more memory


@pytest.mark.parametrize(("precision", "key"), [
    ("bf16", "bf16"), ("bfloat16", "bf16"), (torch.bfloat16, "bf16"), ("FP16", "fp16"), (torch.float16, "fp16"),
    ("half", "fp16"), (torch.float32, "fp32"), ("tf32", "tf32"), (torch.float8_e4m3fn, "fp8"),
])
def test_precision_keys(precision, key):
    assert peaks.precision_key(precision) == key


@pytest.mark.parametrize(("precision", "error"), [
    ("fp64", ValueError), (torch.float64, ValueError), (torch.int8, ValueError), (16, TypeError), (None, TypeError),
])
def test_bad_precision_is_rejected(precision, error):
    with pytest.raises(error):
        peaks.dense_peak("NVIDIA H100 80GB HBM3", precision)


def test_bad_device_name_is_rejected():
    with pytest.raises(TypeError):
        peaks.identify(None)  # type: ignore[arg-type]

"""The MFU check's arithmetic (grader/mfu/check.py): MFU over the peak, the
model's FLOPs, the score threshold, synchronised timing, the matmul rate and
the tolerance from the measured noise, on the CPU with a fake device clock
(selftest/mfu_fakes.py)."""

from __future__ import annotations

import math

import pytest
import torch

from grader.mfu import measure, settings
from grader.mfu import report as mfu_report
from selftest.mfu_fakes import (
    TINY,
    FakeClock,
    check,
    good_train,
    one_thread,  # noqa: F401 (an autouse fixture)
)
from tests.scenarios import mfu as scenarios


def test_mfu_is_achieved_over_peak():
    assert measure.mfu(6e12, 2.0, 1e12) == 3.0
    # The lecture's example: 70B params on 15T tokens at 989.5e12 FLOP/s for 144 days on 1024 GPUs.
    flops = 6 * 70e9 * 15e12
    assert measure.mfu(flops, 144 * 86400 * 1024, 989.5e12) == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize(("args", "error"), [
    ((1.0, 0.0, 1.0), ValueError), ((1.0, 1.0, 0.0), ValueError), ((-1.0, 1.0, 1.0), ValueError),
    ((1.0, math.inf, 1.0), ValueError), ((1.0, math.nan, 1.0), ValueError), (("1", 1.0, 1.0), TypeError),
    ((1.0, True, 1.0), TypeError),
])
def test_mfu_rejects_bad_input(args, error):
    with pytest.raises(error):
        measure.mfu(*args)


def test_model_flops_is_six_params_rows_steps():
    model, _ = scenarios.build(TINY.as_data(), 0, "cpu")
    params = sum(p.numel() for p in model.parameters())
    assert measure.num_parameters(TINY) == params == 2 * 32 * 32 + 32
    assert measure.model_flops(TINY, 5) == 6 * params * 128 * 5
    default = settings.DEFAULT_WORKLOAD
    assert measure.model_flops(default, 1) == pytest.approx(3.3e12, rel=0.01), "the default workload is ~3.3 TFLOP/step"
    with pytest.raises(ValueError):
        measure.model_flops(TINY, -1)


def test_score_threshold_is_a_fraction_of_the_reference():
    assert mfu_report.score(1.25, 1.0, 0.8)  # exactly 0.8 of the reference's MFU
    assert not mfu_report.score(1.26, 1.0, 0.8)
    assert mfu_report.score(0.5, 1.0, 0.8)  # faster than the reference is fine
    with pytest.raises(ValueError):
        mfu_report.score(0.0, 1.0, 0.8)


def test_time_call_syncs_before_and_after_reading_the_clock():
    clock = FakeClock()

    def work() -> str:
        clock.events.append("work")
        clock.now += 2.5
        return "done"

    seconds, value = measure.time_call(work, clock, clock.sync)
    assert (seconds, value) == (2.5, "done")
    assert clock.events == ["sync", "clock", "work", "sync", "clock"]


def test_time_call_refuses_a_clock_that_does_not_advance():
    clock = FakeClock()
    with pytest.raises(RuntimeError, match="did not advance"):
        measure.time_call(lambda: None, clock, clock.sync)


def test_matmul_rate_is_two_n_cubed_over_the_best_time():
    ticks = iter([float(i) for i in range(1000)])  # every read advances one second
    rate = measure.matmul_rate(16, torch.float32, "cpu", clock=lambda: next(ticks), sync=lambda: None, iters=3)
    assert rate == 2 * 16**3 / 1.0


def test_the_tolerance_is_the_measured_noise_times_a_factor_within_bounds():
    c = settings.Criteria(noise_factor=4.0, min_tolerance=0.01, max_tolerance=0.15)
    assert c.tolerance(0.005) == pytest.approx(0.02)
    assert c.tolerance(0.0) == 0.01 and c.tolerance(1.0) == 0.15
    for bad in (-1.0, math.nan, math.inf, True):
        with pytest.raises(ValueError):
            c.tolerance(bad)
    report, *_ = check(good_train, 1e-3)
    cal = report.calibration
    assert cal is not None and cal.precision == "fp32" and len(cal.noises) == TINY.repeats
    assert cal.tolerance == settings.DEFAULT_CRITERIA.tolerance(max(cal.noises)) and 0 < max(cal.noises) < 0.05
    assert measure.calibration_precision("fp32") == "bf16"

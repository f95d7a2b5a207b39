"""The MFU check's driver (grader/mfu/check.py), on the CPU with a fake device
clock (selftest/mfu_fakes.py): timed pairs and the trusted clock, pass and fail
on a GPU only, verification that catches skipped or partial work at every
width while correct loops of any style pass, malformed results, seeds, the
rubric's settings and the isolation hooks. The arithmetic is in
test_mfu_arithmetic.py."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from grader.mfu import check as mfu
from grader.mfu import measure
from grader.mfu import report as mfu_report
from grader.mfu import settings as mfu_settings
from selftest.mfu_fakes import (
    TINY,
    FakeClock,
    FakeImpl,
    check,
    good_train,
    on_gpu,
    one_thread,  # noqa: F401 (an autouse fixture)
    train_loop,
)
from selftest.sampling import FULL
from tests import wire
from tests.local import LocalImpl
from tests.scenarios import mfu as scenarios


def fp32_train(model, optimizer, batches, *, steps, precision):
    return torch.stack(train_loop(model, optimizer, batches, steps, False)).tolist()


def lazy_train(model, optimizer, batches, *, steps, precision):
    return [1.0] * steps


def half_steps_train(model, optimizer, batches, *, steps, precision):
    losses = train_loop(model, optimizer, batches, steps // 2, True)
    return torch.stack(losses + losses).tolist()


def half_batch_train(model, optimizer, batches, *, steps, precision):
    rows = slice(0, batches[0][0].shape[0] // 2)
    return torch.stack(train_loop(model, optimizer, batches, steps, True, rows)).tolist()


def tensor_losses_train(model, optimizer, batches, *, steps, precision):
    return train_loop(model, optimizer, batches, steps, True)  # 0-d tensors: accepted


# --------------------------------------------------------------------------- the driver


def test_an_equally_fast_correct_loop_passes_on_a_gpu_only():
    report, *_ = check(good_train, 1e-3)
    assert report.verified, [v.message for v in report.verifications]
    assert report.ratio == pytest.approx(1.0)
    assert not report.passed, "a CPU run must never count as a pass"
    assert "not run on a GPU" in mfu_report.format_report(report)
    gpu = on_gpu(report)
    assert gpu.passed
    assert "PASSED" in mfu_report.format_report(gpu)


def test_each_timed_pair_shares_a_fresh_seed_and_is_synchronised():
    report, clock, ref, sub = check(good_train, 1e-3, seeds=(5, 6, 7))
    assert sub.calls == [(5, 2), (6, 16), (7, 16)], "warm-up seed 5, then one seed per pair"
    assert ref.calls == [(5, 2), (6, 16), (7, 16), (6, 16), (7, 16)], "then the noise runs on the timed seeds"
    assert ref.precisions == ["bf16"] * 3 + ["fp32"] * 2 and sub.precisions == ["bf16"] * 3
    timed = [e for e in clock.events if e.endswith(":16")][:4]
    assert timed == ["ref:16", "sub:16", "ref:16", "sub:16"], "reference and submission alternate"
    # each timed call is bracketed: sync, clock, call, sync, clock
    for i, e in enumerate(clock.events[: clock.events.index("ref:16") + 12]):
        if e.endswith(":16"):
            assert clock.events[i - 2 : i] == ["sync", "clock"] and clock.events[i + 1 : i + 3] == ["sync", "clock"]
    # times come from the fake clock: overhead + steps * step_seconds
    assert report.reference_seconds == pytest.approx([0.05 + 16e-3] * 2)


def test_the_ratio_and_the_peak_mfu_come_from_the_trusted_clock():
    report, *_ = check(good_train, 0.02, ref_step=0.01)  # half the reference's speed per step
    expected = (0.05 + 0.16) / (0.05 + 0.32)
    assert report.ratio == pytest.approx(expected)
    gpu = on_gpu(report)
    assert not gpu.passed and "FAILED" in mfu_report.format_report(gpu)
    flops = measure.model_flops(TINY, 16)
    assert gpu.mfu_vs_peak("submission") == pytest.approx(flops / (0.05 + 0.32) / 989.5e12)
    assert gpu.mfu_vs_peak("reference") == pytest.approx(flops / (0.05 + 0.16) / 989.5e12)


def test_slightly_slower_passes_and_much_slower_fails():
    fast_enough, *_ = check(good_train, 0.011, ref_step=0.01)
    too_slow, *_ = check(good_train, 0.02, ref_step=0.01)
    assert on_gpu(fast_enough).passed
    assert not on_gpu(too_slow).passed


def test_an_unknown_device_still_scores_but_reports_no_peak():
    report = on_gpu(check(good_train, 1e-3)[0], name="NVIDIA H20")
    assert report.passed and report.peak_flops is None
    assert report.mfu_vs_peak("submission") is None
    assert "unknown device" in mfu_report.format_report(report)


def test_fp32_training_does_the_same_work_within_tolerance():
    report, *_ = check(fp32_train, 1e-3)
    assert report.verified, [v.message for v in report.verifications]
    assert report.calibration is not None
    assert max(v.update_error for v in report.verifications) <= report.calibration.tolerance


@pytest.mark.parametrize("cheat", [lazy_train, half_steps_train, half_batch_train], ids=lambda f: f.__name__)
def test_skipping_work_is_caught_however_fast(cheat):
    report, *_ = check(cheat, 1e-4)  # ten times faster than the reference
    assert not report.verified
    assert not on_gpu(report).passed
    assert "not where the reference's are" in report.verifications[0].message


def test_zero_dim_tensor_losses_are_accepted():
    assert check(tensor_losses_train, 1e-3)[0].verified


@pytest.mark.parametrize(("train", "message"), [
    (lambda model, optimizer, batches, *, steps, precision: "lol", "expected a list"),
    (lambda model, optimizer, batches, *, steps, precision: [0.5] * (steps - 1), "losses for"),
    (lambda model, optimizer, batches, *, steps, precision: [math.nan] * steps, "non-finite"),
    (lambda model, optimizer, batches, *, steps, precision: ["0.5"] * steps, "expected a float"),
])
def test_malformed_losses_fail_verification(train, message):
    report, *_ = check(train, 1e-3)
    assert not report.verified and message in report.verifications[0].message


def test_errors_in_train_propagate():
    def broken(model, optimizer, batches, *, steps, precision):
        raise NotImplementedError("train: see handout §6")

    with pytest.raises(NotImplementedError, match="see handout"):
        check(broken, 1e-3)


def test_verify_run_rejects_forged_results():
    ref = FakeImpl("ref", good_train, FakeClock(), 1e-3)
    args = (TINY.as_data(), 3, TINY.steps, 9, "cpu")
    expected = ref.scenario(scenarios.train_workload, *args)
    verify = lambda r: measure.verify_run(r, expected, steps=TINY.steps, tolerance=0.05)
    assert verify(expected).ok
    assert not verify(wire.Record("x", dict(expected))).ok
    assert not verify({**expected, "extra": 1}).ok
    assert not verify({**expected, "final": expected["final"].double()}).ok
    assert not verify({**expected, "final": expected["final"][:-1]}).ok
    assert not verify({**expected, "final": expected["final"] * math.nan}).ok
    shifted = {**expected, "initial": expected["initial"] + 1, "final": expected["final"] + 1}
    assert "initial parameters differ" in verify(shifted).message
    for bad in (0, 1.0, math.nan, True):
        with pytest.raises(ValueError, match="tolerance"):
            measure.verify_run(expected, expected, steps=TINY.steps, tolerance=bad)


def test_seeds_must_cover_warmup_and_repeats():
    with pytest.raises(ValueError, match="seeds"):
        check(good_train, 1e-3, seeds=(1, 2))


def test_default_seeds_are_fresh_per_run():
    clock = FakeClock()
    ref, sub = FakeImpl("ref", good_train, clock, 1e-3), FakeImpl("sub", good_train, clock, 1e-3)
    mfu.run_check(sub, ref, device="cpu", device_name="cpu", clock=clock, sync=clock.sync, workload=TINY)
    first = list(ref.calls)
    mfu.run_check(sub, ref, device="cpu", device_name="cpu", clock=clock, sync=clock.sync, workload=TINY)
    assert {s for s, _ in first}.isdisjoint({s for s, _ in ref.calls[len(first):]})


def test_the_informational_matmul_rate_is_reported():
    report, *_ = check(good_train, 1e-3, matmul_size=32, tick=1e-3)
    assert report.matmul_flops and report.matmul_flops > 0
    assert "measured matmul rate" in mfu_report.format_report(report)


def test_reference_train_agrees_with_itself_on_the_cpu():
    """The real reference loop on the tiny workload, real clock: verified, and never a pass on the CPU."""
    ref = LocalImpl("reference")
    try:
        train = ref.modules.training.train
    except (ImportError, AttributeError):
        pytest.skip("reference/training.py has no train yet")
    assert callable(train)
    report = mfu.run_check(ref, ref, device="cpu", device_name="cpu", workload=TINY)
    assert report.verified, [v.message for v in report.verifications]
    assert not report.passed


# --------------------------------------------------------------------------- settings


def test_settings_come_from_the_rubric_mfu_table(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[mfu]\nfraction = 0.5\nsteps = 10\nnoise_factor = 3.0\n')
    settings = mfu_settings.load_settings(rubric)
    assert settings.criteria.fraction == 0.5 and settings.workload.steps == 10
    assert settings.criteria.noise_factor == 3.0
    assert settings.criteria.max_tolerance == mfu_settings.DEFAULT_CRITERIA.max_tolerance
    assert settings.workload.dim == mfu_settings.DEFAULT_WORKLOAD.dim


def test_settings_default_without_a_table(tmp_path):
    (tmp_path / "rubric.toml").write_text("[other]\nx = 1\n")
    assert mfu_settings.load_settings(tmp_path / "rubric.toml") == mfu_settings.Settings()
    assert mfu_settings.load_settings(tmp_path / "missing.toml") == mfu_settings.Settings()
    assert mfu_settings.load_settings() is not None  # the shipped rubric parses


@pytest.mark.parametrize("body", [
    "fraction = 1.5", "fraction = 0", "steps = 0", "dim = 2.5", "precision = 'fp64'", "colour = 'red'",
    "noise_factor = 0.5", "min_tolerance = 0", "max_tolerance = 1", "min_tolerance = 0.2", "lr = 0",
    "lr = 1e-4",  # drift 26 on the default workload: half the steps passed on an H200
])
def test_bad_settings_are_rejected(tmp_path, body):
    (tmp_path / "rubric.toml").write_text(f"[mfu]\n{body}\n")
    with pytest.raises((ValueError, TypeError)):
        mfu_settings.load_settings(tmp_path / "rubric.toml")


@pytest.mark.slow
@pytest.mark.full
def test_half_the_steps_fails_on_a_wide_long_workload_at_the_default_rate():
    """The H200's case at a width the CPU can afford: 4 layers 2048 wide, 64
    steps. At lr 1e-4 (drift 13) a loop running half the steps landed 0.11
    from the full update, under its 0.14 tolerance, and was verified, as on
    the H200 at width 4096 (0.087 under 0.15); at the default rate (drift
    0.25) it lands about 0.45 away, against a tolerance of about 0.05."""
    workload = mfu_settings.Workload(dim=2048, num_layers=4, batch=256, steps=64, warmup_steps=2, repeats=1,
                                     probe=4096)
    report, *_ = check(half_steps_train, 1e-3, workload=workload, seeds=(3, 4))
    assert not report.verified, f"half the steps passed: {report.verifications}"


def test_default_learning_rate_moves_the_parameters_by_the_drift_at_any_size():
    """Without ``lr`` the workload's AdamW rate gives ``lr * dim * steps`` =
    DRIFT whatever the instructor's sizes; an explicit rate is kept while its
    drift stays within MAX_DRIFT and refused past it."""
    for dim, steps in ((4096, 64), (32, 16), (8192, 200)):
        w = mfu_settings.Workload(dim=dim, steps=steps)
        assert w.as_data()["lr"] * dim * steps == pytest.approx(mfu_settings.DRIFT)
    assert mfu_settings.Workload(dim=256, steps=16, lr=1e-4).as_data()["lr"] == 1e-4
    with pytest.raises(ValueError, match="lr \\* dim \\* steps"):
        mfu_settings.Workload(lr=1e-4)


class FakeIsolation:
    """Stands for RemoteImpl's isolation hooks; ``live`` is what /proc would show."""

    def __init__(self, clock: FakeClock, live: tuple[int, ...] = ()) -> None:
        self.clock, self.live = clock, list(live)

    def retire_workers(self, timeout: float = 30.0) -> None:
        self.clock.events.append("retire")

    def live_processes(self, *, besides_current: bool = False) -> list[int]:
        self.clock.events.append("others?" if besides_current else "any?")
        return list(self.live)


def test_with_isolation_the_submission_is_retired_before_each_reference_call():
    clock = FakeClock()
    ref, sub = FakeImpl("ref", good_train, clock, 1e-3), FakeImpl("sub", good_train, clock, 1e-3)
    report = mfu.run_check(sub, ref, device="cpu", device_name="cpu", clock=clock, sync=clock.sync, workload=TINY,
                           seeds=[5, 6, 7], isolation=FakeIsolation(clock))
    assert sub.calls == [(5, 2), (6, 16), (5, 2), (7, 16)], "a fresh worker, warmed up, for each timed call"
    assert ref.calls[:3] == [(5, 2), (6, 16), (7, 16)], "the reference is warmed up once"
    events = [e for e in clock.events if e not in ("sync", "clock")]
    one_repeat = ["retire", "any?", "ref:16", "any?", "sub:2", "others?", "sub:16", "others?"]
    assert events[: 1 + 2 * len(one_repeat) + 1] == ["ref:2", *one_repeat, *one_repeat, "retire"]
    assert report.isolation_violations == [] and report.verified
    assert on_gpu(report).passed and "checked gone" in mfu_report.format_report(report)


def test_a_submission_process_seen_alive_fails_the_check():
    clock = FakeClock()
    ref, sub = FakeImpl("ref", good_train, clock, 1e-3), FakeImpl("sub", good_train, clock, 1e-3)
    report = mfu.run_check(sub, ref, device="cpu", device_name="cpu", clock=clock, sync=clock.sync, workload=TINY,
                           isolation=FakeIsolation(clock, live=(4242,)))
    assert report.verified and report.isolation_violations
    assert all("4242" in v for v in report.isolation_violations)
    assert not on_gpu(report).passed and "ISOLATION VIOLATED" in mfu_report.format_report(on_gpu(report))


# --------------------------------------------------------------------------- partial work at every width
#
# The stand-in widths, each with a batch many times its width: there the
# gradient of half the rows is closest to the full batch's, so half the work
# is hardest to tell from all of it (with teacher targets the half-batch error
# falls from ~0.5 at batch = width to ~0.2 at batch = 32 x width, and a fixed
# tolerance of 0.1 was about to let it through). The tolerance measured from
# the rounding noise must catch every partial loop at every width and pass
# every correct style.
WIDTHS = [(32, 512), (64, 1024), (128, 2048), (256, 1024)]


def split_batch_train(model, optimizer, batches, *, steps, precision):
    """Correct, another reduction order: each batch as two accumulated halves."""
    losses = []
    for x, y in batches[:steps]:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(xs)
            loss = (out.float() - ys).square().mean() / 2
            loss.backward()
            total = total + loss.detach()
        optimizer.step()
        losses.append(total)
    return torch.stack(losses).tolist()


def explicit_casts_train(model, optimizer, batches, *, steps, precision):
    """Correct, unfused: bf16 casts of the weights written out by hand, F.mse_loss, zero_grad first."""
    layers = [*model.layers, model.final]
    losses = []
    for x, y in batches[:steps]:
        optimizer.zero_grad()
        h = x.bfloat16()
        for layer in layers:
            h = h @ layer.weight.bfloat16().t()
        loss = torch.nn.functional.mse_loss(h.squeeze(-1).float(), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def odd_rows_train(model, optimizer, batches, *, steps, precision):
    """Partial: every other row (not a prefix), full loss list."""
    losses = train_loop(model, optimizer, [(x[1::2], y[1::2]) for x, y in batches], steps, True)
    return torch.stack(losses).tolist()


def frozen_half_train(model, optimizer, batches, *, steps, precision):
    """Partial: no weight gradients for the first half of the layers (a third of the backward saved)."""
    for layer in list(model.layers)[: len(model.layers) // 2 or 1]:
        layer.weight.requires_grad_(False)
    return torch.stack(train_loop(model, optimizer, batches, steps, True)).tolist()


PARTIAL = [half_steps_train, half_batch_train, odd_rows_train, frozen_half_train]
HONEST = [good_train, fp32_train, split_batch_train, explicit_casts_train]


@pytest.fixture(scope="module")
def noise_figures():
    figures: dict[str, list[float]] = {}
    yield figures
    print("\nupdate errors on the CPU stand-in (width/batch: name errors, tolerance):")
    for key, values in sorted(figures.items()):
        print(f"  {key}: {[round(v, 4) for v in values]}")


@pytest.mark.slow
@pytest.mark.full
@pytest.mark.parametrize("train", PARTIAL + HONEST, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("dim", "batch"), WIDTHS if FULL else [WIDTHS[0], WIDTHS[-1]], ids=lambda v: str(v))
def test_partial_work_fails_and_correct_styles_pass_at_every_width(dim, batch, train, noise_figures):
    workload = mfu_settings.Workload(dim=dim, num_layers=2, batch=batch, steps=16, warmup_steps=2, repeats=1, probe=256)
    report, *_ = check(train, 1e-3, workload=workload, seeds=(3, 4))
    c = report.calibration
    assert c is not None and c.tolerance <= mfu_settings.DEFAULT_CRITERIA.max_tolerance
    noise_figures[f"{dim}/{batch} {train.__name__}"] = [
        *(v.update_error for v in report.verifications), c.tolerance]
    if train in PARTIAL:
        assert not report.verified, f"{train.__name__} did a share of the work and passed: {report.verifications}"
        assert not on_gpu(report).passed
    else:
        assert report.verified, f"{train.__name__} is correct and failed: {report.verifications}"


def test_a_run_faster_than_the_dense_peak_allows_never_passes():
    """The speed of light: a timed run that beats its model FLOPs at the
    device's dense peak did not do the work, whatever its verification says."""
    report = on_gpu(check(good_train, 1e-3)[0])
    floor = report.flops_per_call / report.peak_flops
    too_fast = dataclasses.replace(report, submission_seconds=[floor / 2] * len(report.submission_seconds))
    assert report.passed and not report.impossible
    assert too_fast.verified and not too_fast.passed and len(too_fast.impossible) == len(report.submission_seconds)
    assert "FASTER THAN THE DEVICE CAN RUN IT" in mfu_report.format_report(too_fast)


def test_the_cpu_standing_in_reaches_a_verdict():
    """With the CPU standing in for the GPU (a rehearsal) the report passes or
    fails as on a GPU; any other run off CUDA is never a pass."""
    report, *_ = check(good_train, 1e-3, stand_in=True)
    assert report.stand_in and report.passed and "stood in for a GPU" in mfu_report.format_report(report)
    slow, *_ = check(good_train, 0.02, ref_step=0.01, stand_in=True)
    assert slow.verified and not slow.passed

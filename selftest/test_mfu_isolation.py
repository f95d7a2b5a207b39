"""The MFU check with the real process machinery, on the CPU: a GPU-hog
submission cannot change a verdict.

The hog (grader/corpus/cheat/gpu_hog) runs in a real sandboxed worker
(grader.sandbox.remote.RemoteImpl); its background thread burns the CPU whenever its
``train`` is not running, i.e. while the reference is timed. The reference
runs the real reference loop in this process. What a GPU would do with a
co-tenant is modelled by the fake device clock: a timed reference call costs
twice as much when any process of the submission is alive during it, as
observed from outside through /proc (never by asking the worker). Everything
else (the worker, the kill, the fresh worker, the /proc checks, the noise
calibration, the verification) is the real thing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grader.mfu import check as mfu
from grader.mfu import peaks, settings
from grader.mfu import report as mfu_report
from grader.protocol import ProblemSpec
from grader.sandbox import proctree
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.staging.workcopy import make_working_copy
from selftest.mfu_fakes import one_thread  # noqa: F401 (an autouse fixture)
from tests.harness import ImplBase
from tests.local import LocalImpl

REPO = Path(__file__).resolve().parent.parent
HOG = REPO / "grader" / "corpus" / "cheat" / "gpu_hog" / "student"
TINY = settings.Workload(dim=32, num_layers=2, batch=128, steps=8, warmup_steps=2, repeats=2, probe=64)
#: Fake device seconds of one timed call: the hog's loop does a third more work than the reference's.
REF_COST, SUB_COST = 1.0, 1.3

pytestmark = pytest.mark.skipif(not proctree.AVAILABLE, reason="needs /proc to observe processes from outside")




def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def submission_processes(work: Path) -> list[proctree.Proc]:
    """Live processes of the submission, found without asking the RemoteImpl:
    below this test process, the ones started on this test's working copy
    (its path is in the worker's or bubblewrap's command line), and all below them."""
    roots = [p for p in proctree.below(os.getpid())[1:] if str(work) in _cmdline(p.pid)]
    procs = {q for r in roots for q in proctree.below(r.pid)}
    return sorted((p for p in procs if p.live), key=lambda p: p.pid)


class Device:
    """A fake device clock shared by both sides; records what was alive when."""

    def __init__(self, work: Path) -> None:
        self.work, self.now = work, 0.0
        self.during_reference: list[list[proctree.Proc]] = []  # live submission processes, per timed ref call
        self.seen: set[proctree.Proc] = set()  # every submission process seen after its calls

    def __call__(self) -> float:
        return self.now


class Timed(ImplBase):
    """Charges each 8-step (timed) call to the fake device clock."""

    def __init__(self, inner: Any, device: Device, cost: float, reference: bool) -> None:
        self.inner, self.device, self.cost, self.reference = inner, device, cost, reference
        self.name = f"timed {getattr(inner, 'name', '?')}"

    def call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the MFU check only runs scenarios")

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        timed = args[2] == TINY.steps and args[0]["precision"] == TINY.precision
        before = submission_processes(self.device.work) if self.reference else []
        value = self.inner.scenario(fn, *args, **kwargs)
        if self.reference and timed:
            alive = before + [p for p in submission_processes(self.device.work) if p not in before]
            self.device.during_reference.append(alive)
            self.device.now += self.cost * (2 if alive else 1)  # a co-tenant halves the reference's speed
        elif timed:
            self.device.seen.update(submission_processes(self.device.work))
            self.device.now += self.cost
        return value


def worker_impl(student: Path, tmp: Path) -> RemoteImpl:
    wc = make_working_copy(student, tmp / "work")  # (the path submission_processes looks for)
    scratch = tmp / "scratch"
    scratch.mkdir()
    sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30, call_cpu=120.0))
    impl = RemoteImpl("hog", sandbox, wc, scratch, [ProblemSpec("mfu", 300.0, ()), ProblemSpec("later", 300.0, ())])
    impl.enter("mfu")
    return impl


def honest_twin(tmp: Path) -> Path:
    """The hog's submission without the hog: the same loop, no background thread."""
    student = tmp / "twin" / "student"
    shutil.copytree(HOG, student)
    source = (student / "training.py").read_text()
    assert "HOG.start()\n" in source
    (student / "training.py").write_text(source.replace("HOG.start()\n", ""))
    return student


def run(student: Path, tmp: Path, *, isolate: bool) -> tuple[mfu_report.MfuReport, Device]:
    device = Device(tmp / "work")
    remote = worker_impl(student, tmp)
    try:
        report = mfu.run_check(Timed(remote, device, SUB_COST, False), Timed(LocalImpl("reference"), device,
                               REF_COST, True), device="cpu", device_name="cpu", clock=device, sync=lambda: None,
                               workload=TINY, isolation=remote if isolate else None)
    finally:
        remote.close()
    return report, device


def verdict(report: mfu_report.MfuReport) -> bool:
    """The verdict as it would be on a GPU (the work ran on the CPU)."""
    peak, note = peaks.dense_peak("NVIDIA H100 80GB HBM3", "bf16")
    return mfu_report.MfuReport(**{**report.__dict__, "device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
                            "peak_flops": peak, "peak_note": note}).passed


def test_no_submission_process_lives_while_the_reference_is_timed(tmp_path):
    report, device = run(HOG, tmp_path, isolate=True)
    assert device.seen, "the hog's worker was never observed: the test observes nothing"
    assert len(device.during_reference) == TINY.repeats
    assert device.during_reference == [[]] * TINY.repeats, "a submission process lived while the reference ran"
    assert not any(proctree.exists(p) for p in device.seen), "a process of the submission outlived the check"
    assert report.isolation_violations == []
    assert report.verified, [v.message for v in report.verifications]  # the hog does the work, a bit slowly
    assert "killed and checked gone" in mfu_report.format_report(report)


def test_the_hog_does_not_change_the_verdict(tmp_path):
    hog, _ = run(HOG, tmp_path / "hog", isolate=True)
    honest, _ = run(honest_twin(tmp_path), tmp_path / "honest", isolate=True)
    assert verdict(hog) == verdict(honest) is False, "1.3 x the reference's time is below 0.8 of its MFU"
    assert hog.ratio == honest.ratio == pytest.approx(REF_COST / SUB_COST)


def test_without_isolation_the_hog_would_win(tmp_path):
    """The control: the same run with the workers left alive. The hog is seen
    during the reference's timed calls and, on a shared device, would pass."""
    report, device = run(HOG, tmp_path, isolate=False)
    assert all(device.during_reference), "the hog's worker should be alive while the reference is timed"
    assert verdict(report), "the model of a shared device: the reference slowed by the hog"

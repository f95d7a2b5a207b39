"""The ``mfu`` problem: the submission's ``train`` on a GPU, timed by the grader.

Runs where CUDA is available; elsewhere every test here is skipped with the
``gpu`` marker, which the grader reports as "not run on a GPU" (never as
passed), unless the grader was asked to let the CPU stand in for the GPU
(``python -m grader --cpu-stand-in``: a rehearsal of the whole pipeline on a
machine without one, with the small workload of ``[mfu.stand_in]``, timed
by the CPU seconds of the workers, read from outside, as every CPU budget
is; its verdicts are not a GPU's). The workload and the threshold come from the
rubric's ``[mfu]`` table (grader/mfu/check.py has the defaults and explains
each number).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator

import pytest
import torch

from grader.hidden.conftest import input_kind
from grader.mfu import check as mfu
from grader.mfu import leaderboard as mfu_leaderboard
from grader.mfu import report as mfu_report
from grader.mfu import settings as mfu_settings
from grader.mfu.reference import reference_worker
from grader.plugin import gpu_device
from grader.sandbox.remote import RemoteImpl
from tests.harness import Impl

pytestmark = pytest.mark.gpu

#: What a failure says of the device (the kind of input), per device type.
DEVICE_KIND = {"cuda": "CUDA", "cpu": "the CPU standing in for a GPU"}


@pytest.fixture(scope="module")
def report(impl, ref, request) -> Iterator[mfu_report.MfuReport]:
    """One measurement shared by the tests below (it takes seconds of GPU time).

    In the grader ``impl`` is the sandboxed submission (grader.sandbox.remote.RemoteImpl):
    its workers are killed before each timed reference call (see
    grader/mfu/check.py run_check), the reference loop runs in a worker of its
    own, started as the submission's are (grader/mfu/reference.py), and the
    grader's plugin holds the device's lock (grader/mfu/gpulock.py) for the
    whole problem.
    """
    where = gpu_device(request.config)
    if not where:
        pytest.skip("not run on a GPU: the MFU check needs a CUDA device")
    settings = mfu_settings.load_settings(stand_in=where == "cpu")
    with contextlib.ExitStack() as stack:
        clock = time.perf_counter
        if isinstance(impl, RemoteImpl) and impl.problem is not None:
            worker = stack.enter_context(reference_worker(impl, cpu_budget=impl.states[impl.problem].cpu_budget))
            ref = worker
            if where == "cpu":  # on the CPU the resource is CPU time, which a busy machine does not change
                clock = functools.partial(workers_cpu, impl, worker.impl)
        yield _measure(impl, ref, where, settings, clock)


def workers_cpu(*impls: RemoteImpl) -> float:
    """The CPU seconds the workers of ``impls`` have used (read from outside,
    now): the clock of the CPU standing in for a GPU, where only one of them
    runs at a time."""
    return sum(impl.cpu_used() for impl in impls)


def _measure(impl: Impl, ref: mfu.Runner, where: str, settings: mfu_settings.Settings,
             clock: Callable[[], float]) -> mfu_report.MfuReport:
    if where == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
        name, matmul = torch.cuda.get_device_name(device), 8192
    else:  # (no matmul ceiling: it would run in this process, which the workers' CPU clock does not time)
        device, name, matmul = torch.device("cpu"), "CPU standing in for a GPU", None
    result = mfu.run_check(
        impl, ref, device=str(device), device_name=name, clock=clock,
        workload=settings.workload, criteria=settings.criteria, matmul_size=matmul,
        isolation=impl if isinstance(impl, mfu.Isolation) else None, stand_in=where == "cpu",
    )
    print(mfu_report.format_report(result))
    return result


def _input_kind(report: mfu_report.MfuReport) -> None:
    input_kind(device=DEVICE_KIND.get(torch.device(report.device).type, "a device"),
               workload="the rubric's MFU workload")


@pytest.mark.extends("tests/test_training.py::test_train_matches_a_torch_loop_and_draws_one_batch_per_step")
def test_train_does_the_reference_work(report):
    """Every timed run ends with the parameters where the reference's are."""
    _input_kind(report)
    bad = [v.message for v in report.verifications if not v.ok] + report.isolation_violations + report.impossible
    details = mfu_report.format_report(report)
    assert not bad, "train did not do the reference's work:\n" + "\n".join(bad) + "\n\n" + details


@pytest.mark.extends("tests/test_training.py::test_train_on_cuda_does_not_sync_every_step")
def test_mfu_is_a_fraction_of_the_reference(report, record_property):
    """The submission's MFU is at least ``fraction`` of the reference loop's, same device, same run."""
    _input_kind(report)
    for name, value in mfu_leaderboard.figures(report).items():  # the graded MFU, for reports and leaderboards
        record_property(name, value)
    assert report.verified and report.passed, (
        f"MFU {report.ratio:.2f} of the reference's, needs {report.fraction}:\n{mfu_report.format_report(report)}"
    )

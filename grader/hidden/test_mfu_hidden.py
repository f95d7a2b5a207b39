"""The ``mfu`` problem: the submission's ``train`` on a GPU, timed by the grader.

Runs only where CUDA is available; elsewhere every test here is skipped with
the ``gpu`` marker, which the grader reports as "not run on a GPU" (never as
passed). The workload and the threshold come from the rubric's ``[mfu]``
table (grader/mfu/check.py has the defaults and explains each number).
"""

from __future__ import annotations

import time

import pytest
import torch

from grader.hidden.conftest import input_kind
from grader.mfu import check as mfu
from grader.mfu import report as mfu_report
from grader.mfu import settings as mfu_settings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="not run on a GPU: the MFU check needs a CUDA device"),
]


@pytest.fixture(scope="module")
def report(impl, ref) -> mfu_report.MfuReport:
    """One measurement shared by the tests below (it takes seconds of GPU time).

    In the grader ``impl`` is the sandboxed submission (grader.sandbox.remote.RemoteImpl):
    its workers are killed before each timed reference call (see
    grader/mfu/check.py run_check), and the grader's plugin holds the device's
    lock (grader/mfu/gpulock.py) for the whole problem.
    """
    settings = mfu_settings.load_settings()
    device = torch.device("cuda", torch.cuda.current_device())
    result = mfu.run_check(
        impl, ref, device=str(device), device_name=torch.cuda.get_device_name(device),
        clock=time.perf_counter, sync=lambda: torch.cuda.synchronize(device),
        workload=settings.workload, criteria=settings.criteria, matmul_size=8192,
        isolation=impl if isinstance(impl, mfu.Isolation) else None,
    )
    print(mfu_report.format_report(result))
    return result


@pytest.mark.extends("tests/test_training.py::test_train_matches_a_torch_loop_and_draws_one_batch_per_step")
def test_train_does_the_reference_work(report):
    """Every timed run ends with the parameters where the reference's are."""
    input_kind(device="CUDA", workload="the rubric's MFU workload")
    bad = [v.message for v in report.verifications if not v.ok] + report.isolation_violations
    details = mfu_report.format_report(report)
    assert not bad, "train did not do the reference's work:\n" + "\n".join(bad) + "\n\n" + details


@pytest.mark.extends("tests/test_training.py::test_train_on_cuda_does_not_sync_every_step")
def test_mfu_is_a_fraction_of_the_reference(report, record_property):
    """The submission's MFU is at least ``fraction`` of the reference loop's, same device, same run."""
    input_kind(device="CUDA", workload="the rubric's MFU workload")
    record_property("mfu_ratio", round(report.ratio, 4))
    vs_peak = report.mfu_vs_peak("submission")
    if vs_peak is not None:
        record_property("mfu_vs_dense_peak", round(vs_peak, 4))
    assert report.verified and report.passed, (
        f"MFU {report.ratio:.2f} of the reference's, needs {report.fraction}:\n{mfu_report.format_report(report)}"
    )

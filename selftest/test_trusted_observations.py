"""The observations verdicts rest on, made from outside a real worker
(bubblewrap where usable): the trusted side kills a worker mid-call and
nothing writes afterwards, reads its peak memory even when the worker resets
its own high-water mark, and reads sources from its own snapshot."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest
import torch

from grader.protocol import ProblemSpec
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.staging.workcopy import make_working_copy
from tests.scenarios import checkpoints as checkpoint_scenarios
from tests.scenarios import data as data_scenarios

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

TRAINING = '''
import time

def save_checkpoint(path, model, optimizer, iteration, **extra):
    with open(path, "wb", buffering=0) as f:
        while True:  # a save that never ends: the test kills it
            f.write(b"x" * 4096)
            time.sleep(0.001)
'''

DATA = '''
import time, torch

def get_batch(tokens, batch_size, context_length, device, generator=None):
    big = bytearray(192 << 20)  # touched: zero-filled
    time.sleep(0.05)
    del big
    try:
        with open("/proc/self/clear_refs", "w") as f:  # hide the peak from VmHWM
            f.write("5")
    except OSError:
        pass
    x = torch.zeros(batch_size, context_length, dtype=torch.int64)
    return x, x
'''


@pytest.fixture(scope="module")
def impl(tmp_path_factory):
    root = tmp_path_factory.mktemp("observe")
    pkg = root / "sub" / "student"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "training.py").write_text(textwrap.dedent(TRAINING))
    (pkg / "data.py").write_text(textwrap.dedent(DATA))
    scratch = root / "scratch"
    scratch.mkdir()
    wc = make_working_copy(pkg, root / "work")
    sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30, call_cpu=60))
    impl = RemoteImpl("test", sandbox, wc, scratch,
                      [ProblemSpec("training", 300.0, ()), ProblemSpec("data", 300.0, ())])
    impl.scratch = scratch
    yield impl
    impl.close()


def test_sources_come_from_the_snapshot(impl):
    assert "def save_checkpoint" in impl.source("training")
    assert impl.source("__init__") == ""
    with pytest.raises(FileNotFoundError):
        impl.source("optimizers")


@linux_only
def test_a_killed_call_is_dead_before_the_files_are_read(impl):
    impl.enter("training")
    path = impl.scratch / "ckpt.pt"
    run = impl.interrupted_scenario(checkpoint_scenarios.save_linear, str(path), seed=0, d_in=4, d_out=4,
                                    iteration=1, kill_when=lambda: path.exists() and path.stat().st_size >= 8192)
    assert run.killed
    size = path.stat().st_size
    time.sleep(0.3)
    assert path.stat().st_size == size, "the killed worker still wrote to the file"
    assert not impl._workers.get("training"), "the killed worker is still the problem's worker"


@linux_only
def test_peak_memory_is_seen_even_when_the_worker_resets_its_high_water_mark(impl, tmp_path):
    impl.enter("data")
    tokens = impl.scratch / "tokens.bin"
    tokens.write_bytes(bytes(4096))
    (x, _y), peak = impl.measured_scenario(data_scenarios.sample_file, str(tokens), batch_size=2,
                                           context_length=3, seed=0)
    assert x.shape == (2, 3) and type(x) is torch.Tensor
    assert peak >= 128 << 20, f"a 192 MiB allocation held for 50 ms was measured as {peak >> 20} MiB"
    assert os.path.exists(tokens)

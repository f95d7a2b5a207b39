"""benchmarks/timing.py, without wall time: a fake clock and a recording synchroniser."""

from __future__ import annotations

import pytest
import torch

from benchmarks import timing


class FakeClock:
    """Advances only when the timed function "runs" (by the durations given)."""

    def __init__(self, log: list[str]) -> None:
        self.now, self.log = 0.0, log

    def __call__(self) -> float:
        self.log.append("clock")
        return self.now


def _setup(durations: list[float]):
    log: list[str] = []
    clock = FakeClock(log)
    pending = iter(durations)

    def fn() -> None:
        log.append("fn")
        clock.now += next(pending)

    return fn, clock, (lambda: log.append("sync")), log


def test_warmup_is_not_timed_and_median_is_taken():
    fn, clock, sync, _ = _setup([100.0, 3.0, 1.0, 2.0, 50.0, 4.0])
    t = timing.benchmark(fn, warmup=1, repeats=5, clock=clock, synchronize=sync)
    assert t.times == (3.0, 1.0, 2.0, 50.0, 4.0)
    assert t.median == 3.0 and t.min == 1.0 and t.warmup == 1
    assert t.rate(6.0) == 2.0


def test_even_repeats_median_is_the_mean_of_the_middle_two():
    fn, clock, sync, _ = _setup([1.0, 4.0, 2.0, 3.0])
    assert timing.benchmark(fn, warmup=0, repeats=4, clock=clock, synchronize=sync).median == 2.5


def test_each_timed_call_sits_between_two_synchronisations():
    fn, clock, sync, log = _setup([1.0] * 4)
    timing.benchmark(fn, warmup=2, repeats=2, clock=clock, synchronize=sync)
    assert log == ["fn", "fn"] + ["sync", "clock", "fn", "sync", "clock"] * 2


def test_cpu_needs_no_synchronisation():
    sync = timing.device_synchronizer("cpu")
    assert sync() is None
    if not torch.cuda.is_available():
        assert timing.device_synchronizer(None) is timing._nothing


def test_cuda_device_synchronises_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    timing.device_synchronizer("cuda:0")()
    assert calls == [torch.device("cuda:0")]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"repeats": 0}, ValueError), ({"warmup": -1}, ValueError), ({"repeats": 2.0}, TypeError),
     ({"warmup": True}, TypeError)],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        timing.benchmark(lambda: None, **kwargs)
    with pytest.raises(TypeError):
        timing.benchmark("not callable")


def test_main_prints_a_rate(capsys):
    timing.main(["--sizes", "8", "--device", "cpu", "--repeats", "2"])
    out = capsys.readouterr().out
    assert "matmul on cpu" in out and "TFLOP/s" in out

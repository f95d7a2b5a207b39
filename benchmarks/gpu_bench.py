"""GPU benchmarks: matmul rate, the reference loop's MFU, a slow loop, optimizer bandwidth.

Run by ``benchmarks/gpu.sh`` (within its 180 s there); writes a markdown
table under ``benchmarks/results/``. Without CUDA it runs tiny sizes on the
CPU as a smoke test and says loudly that its figures are not GPU figures.
benchmarks/README.md explains how each figure is measured and what it means.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import json
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grader.mfu import (  # noqa: E402
    check,
    measure,
    peaks,
    settings,
)
from tests.local import LocalImpl  # noqa: E402
from tests.scenarios import mfu as scenarios  # noqa: E402

#: CPU smoke-test sizes: seconds on a laptop, meaningless as performance figures.
TINY = settings.Workload(dim=64, num_layers=2, batch=128, steps=8, warmup_steps=2, repeats=2, probe=16)
#: The bytes fused/foreach AdamW moves per fp32 parameter and step: it reads the
#: parameter, its gradient and both moments, and writes the parameter and both moments.
ADAMW_BYTES_PER_PARAM = 7 * 4


@dataclass
class Row:
    what: str
    value: str
    note: str = ""


class Rows(list[Row]):
    """The table's rows, each also printed to stderr as it is measured: a run
    cut by gpu.sh's time limit still shows what it got and where it was."""

    def append(self, row: Row) -> None:
        super().append(row)
        print(f"gpu_bench: {row.what}: {row.value} {row.note}".rstrip(), file=sys.stderr, flush=True)


# ----------------------------------------------------------------- loops for contrast


def slow_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, *, steps: int,
               precision: str) -> list[float]:
    """Deliberately slow: fp32 whatever ``precision`` says, and ``loss.item()``
    every step (the host waits for the GPU each step, so the launch queue drains)."""
    losses = []
    for _, (x, y) in zip(range(steps), batches, strict=False):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def synced_bf16_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, *, steps: int,
                      precision: str) -> list[float]:
    """bf16 autocast like the reference, but with a ``loss.item()`` every step:
    isolates the cost of the per-step host sync."""
    losses = []
    for _, (x, y) in zip(range(steps), batches, strict=False):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def half_batch_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, *, steps: int,
                     precision: str) -> list[float]:
    """Partial work: the reference's loop on the first half of each batch's rows."""
    half = [(x[: x.shape[0] // 2], y[: y.shape[0] // 2]) for _, (x, y) in zip(range(steps), batches, strict=False)]
    return synced_bf16_train(model, optimizer, half, steps=steps, precision=precision)


def half_steps_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, *, steps: int,
                     precision: str) -> list[float]:
    """Partial work: half the steps, each loss reported twice."""
    losses = synced_bf16_train(model, optimizer, batches, steps=steps // 2, precision=precision)
    return (losses * 2 + losses[:1])[:steps]


def no_step_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, *, steps: int,
                  precision: str) -> list[float]:
    """The reference's step without the optimizer's: forward and backward only
    (where the step's time goes; not a loop to grade)."""
    losses = []
    for _, (x, y) in zip(range(steps), batches, strict=False):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


class _LoopImpl:
    """An in-process Impl whose ``training.train`` is one of the loops above."""

    def __init__(self, name: str, train: Callable[..., list[float]]) -> None:
        self.name = name
        self._lab = SimpleNamespace(training=SimpleNamespace(train=train))

    def scenario(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self._lab, *args, **kwargs)


# ----------------------------------------------------------------- measurements


def _sync_for(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def time_loop(impl: Any, workload: settings.Workload, device: torch.device) -> float:
    """Best seconds of ``workload.repeats`` timed scenario calls after one warm-up."""
    sync, data = _sync_for(device), workload.as_data()

    def call(seed: int, steps: int) -> Any:
        return impl.scenario(scenarios.train_workload, data, seed, steps, 0, str(device))

    call(1, workload.warmup_steps)
    return min(measure.time_call(functools.partial(call, s, workload.steps), time.perf_counter, sync)[0]
               for s in range(2, 2 + workload.repeats))


def optimizer_bandwidth(workload: settings.Workload, device: torch.device, fused: bool, steps: int) -> float:
    """Bytes/s moved by AdamW steps on the workload's parameters (grads preset)."""
    model, _ = scenarios.build(workload.as_data(), 0, str(device))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=fused or None, foreach=None if fused else True)
    opt.step()  # allocates the moments
    sync = _sync_for(device)
    seconds = min(measure.time_call(opt.step, time.perf_counter, sync)[0] for _ in range(steps))
    return ADAMW_BYTES_PER_PARAM * sum(p.numel() for p in params) / seconds


def copy_bandwidth(nbytes: int, device: torch.device, iters: int = 10) -> float:
    """Bytes/s of a device-to-device copy (read + write), a practical memory ceiling."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync = _sync_for(device)
    seconds = min(measure.time_call(lambda: dst.copy_(src), time.perf_counter, sync)[0] for _ in range(iters))
    return 2 * src.numel() * 4 / seconds


# ----------------------------------------------------------------- the run


def verification_rows(workload: settings.Workload, device: torch.device, rows: Rows,
                      figures: dict[str, Any] | None = None) -> None:
    """Append the MFU check's verification on this device to ``rows``: the
    measured rounding noise at the graded learning rate, the tolerance it
    gives, and the update error of correct and partial loops (each verdict
    also in ``figures["verification"]``)."""
    try:
        reference = LocalImpl("reference")
    except (ImportError, ValueError) as e:  # pragma: no cover - only without reference/
        rows.append(Row("verification", "not available", str(e)))
        return
    figures = {} if figures is None else figures
    one = dataclasses.replace(workload, repeats=1)
    sync, criteria = _sync_for(device), settings.DEFAULT_CRITERIA
    rows.append(Row("verification: the rule", f"tolerance = clamp({criteria.noise_factor:g} x noise, "
                f"{criteria.min_tolerance:g}, {criteria.max_tolerance:g})",
                "noise: update error of the reference loop in fp32 against the same loop in bf16, same seed"))
    for label, train, honest in (("bf16 + loss.item() every step", synced_bf16_train, True),
                                 ("slow: fp32 + loss.item() every step", slow_train, True),
                                 ("PARTIAL: half of each batch", half_batch_train, False),
                                 ("PARTIAL: half the steps", half_steps_train, False)):
        report = check.run_check(_LoopImpl(label, train), reference, device=str(device), device_name=str(device),
                               clock=time.perf_counter, sync=sync, workload=one)
        v, c = report.verifications[0], report.calibration
        assert c is not None
        if label.startswith("bf16"):  # the reference's own noise: what the tolerance follows
            rows.append(Row(f"verification: rounding noise, {workload.precision} against {c.precision}",
                            f"{c.noise:.4f}", f"the reference loop, same seed, lr {workload.learning_rate:.3g} "
                            f"(lr x dim x steps = {workload.learning_rate * workload.dim * workload.steps:.3g}); "
                            f"tolerance {c.tolerance:.4f}"))
            figures["noise"] = c.noise
        want, got = ("verified" if honest else "rejected"), ("verified" if v.ok else "rejected")
        figures.setdefault("verification", {})[label] = {"want": want, "got": got, "error": v.update_error}
        rows.append(Row(f"verification: {label}", f"update error {v.update_error:.4f}, tolerance {c.tolerance:.4f}",
                        f"noise {c.noise:.4f}; {got} (must be {want}){'' if got == want else ' **WRONG**'}"))


def _tflops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.2f} GFLOP/s"


def run(device: torch.device, tiny: bool) -> tuple[str, list[Row], dict[str, Any]]:
    """All benchmarks; returns (title, rows, figures): the figures other
    scripts read (matmul rates in FLOP/s, the noise, the verdicts)."""
    gpu = device.type == "cuda"
    figures: dict[str, Any] = {"device": device.type}
    workload = settings.STAND_IN_WORKLOAD if tiny else settings.DEFAULT_WORKLOAD
    name = torch.cuda.get_device_name(device) if gpu else f"CPU ({platform.processor() or platform.machine()})"
    n = 256 if tiny else 8192
    rows = Rows()
    if not gpu or tiny:
        rows.append(Row("NOT A GPU FIGURE", "smoke test", "tiny sizes; the numbers below only show the script runs"))
    peak, peak_note = peaks.dense_peak(name, "bf16") if gpu else (None, "no peak: not a GPU")
    peak32, _ = peaks.dense_peak(name, "fp32") if gpu else (None, "")
    rows.append(Row("dense bf16 peak (datasheet)", _tflops(peak) if peak else "unknown", peak_note))

    sync = _sync_for(device)
    mm16 = measure.matmul_rate(n, torch.bfloat16, str(device), time.perf_counter, sync)
    mm32 = measure.matmul_rate(n, torch.float32, str(device), time.perf_counter, sync)
    rows.append(Row(f"bf16 matmul {n}^3, random inputs", _tflops(mm16),
                    f"{mm16 / peak:.2f} of dense peak" if peak else ""))
    rows.append(Row(f"fp32 matmul {n}^3 (TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})",
                    _tflops(mm32), f"{mm32 / peak32:.2f} of fp32 peak" if peak32 else ""))
    figures.update(bf16_matmul=mm16, fp32_matmul=mm32)

    flops = measure.model_flops(workload, workload.steps)
    shape = f"{workload.num_layers} x {workload.dim}^2, batch {workload.batch}, {workload.steps} steps"
    loops: list[tuple[str, check.Runner]] = []
    try:
        loops.append(("reference train (bf16 autocast, no per-step sync)", LocalImpl("reference")))
    except (ImportError, ValueError) as e:  # pragma: no cover - only without reference/
        rows.append(Row("reference train", "not available", str(e)))
    loops += [("bf16 autocast + loss.item() every step", _LoopImpl("synced", synced_bf16_train)),
              ("slow: fp32 + loss.item() every step", _LoopImpl("slow", slow_train))]
    step_ms: dict[str, float] = {}
    for label, impl in loops:
        try:
            seconds = time_loop(impl, workload, device)
        except (NotImplementedError, AttributeError, ImportError) as e:
            rows.append(Row(label, "not available", f"{type(e).__name__}: {e}"))
            continue
        step_ms[label] = seconds / workload.steps * 1e3
        achieved = flops / seconds
        note = [f"{shape}: {seconds / workload.steps * 1e3:.2f} ms/step"]
        if peak:
            note.append(f"MFU {measure.mfu(flops, seconds, peak):.3f} of dense bf16 peak")
        note.append(f"{achieved / mm16:.3f} of the measured bf16 matmul rate")
        rows.append(Row(label, _tflops(achieved), "; ".join(note)))
    reference_ms = step_ms.get(loops[0][0]) if loops and loops[0][0].startswith("reference") else None

    verification_rows(workload, device, rows, figures)

    opt_steps = 5 if tiny else 20
    copy = copy_bandwidth(8 << 20 if tiny else 2 << 30, device)
    rows.append(Row("device copy bandwidth (read + write)", f"{copy / 1e9:.0f} GB/s", "practical memory ceiling"))
    adamw_ms: dict[bool, float] = {}
    params = measure.num_parameters(workload)
    for fused in ((True, False) if gpu else (False,)):
        bw = optimizer_bandwidth(workload, device, fused, opt_steps)
        adamw_ms[fused] = ADAMW_BYTES_PER_PARAM * params / bw * 1e3
        rows.append(Row(f"AdamW step, {'fused' if fused else 'foreach'}", f"{bw / 1e9:.0f} GB/s",
                        f"{ADAMW_BYTES_PER_PARAM} bytes/param; {bw / copy:.2f} of the copy bandwidth; "
                        f"{adamw_ms[fused]:.2f} ms per step of the workload"))
    if reference_ms is not None:
        step_rows(workload, device, reference_ms, flops / workload.steps / mm16 * 1e3,
                  adamw_ms.get(True, adamw_ms.get(False, 0.0)), rows)
    title = f"{name}, torch {torch.__version__}, {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    return title, rows, figures


def step_rows(workload: settings.Workload, device: torch.device, reference_ms: float, matmul_ms: float,
              optimizer_ms: float, rows: Rows) -> None:
    """Where the reference loop's step goes: its matmuls at the measured
    matmul rate, its forward and backward alone (the same loop without the
    optimizer step), the optimizer step (the graded workload's AdamW, fused
    on CUDA, alone), and what is left (casts, allocations, launches)."""
    fwd_bwd = time_loop(_LoopImpl("no step", no_step_train), workload, device) / workload.steps * 1e3
    rest = reference_ms - fwd_bwd - optimizer_ms
    rows.append(Row("step: the reference loop's step", f"{reference_ms:.2f} ms", "as timed above"))
    rows.append(Row("step: its matmuls at the measured bf16 matmul rate", f"{matmul_ms:.2f} ms",
                    f"{matmul_ms / reference_ms:.2f} of the step: the ceiling the loop can reach"))
    rows.append(Row("step: forward and backward alone (bf16 autocast)", f"{fwd_bwd:.2f} ms",
                    f"{fwd_bwd / reference_ms:.2f} of the step; {fwd_bwd - matmul_ms:.2f} ms beyond the matmuls "
                    "(autocast casts, the loss, allocations)"))
    rows.append(Row("step: the optimizer step alone (AdamW)", f"{optimizer_ms:.2f} ms",
                    f"{optimizer_ms / reference_ms:.2f} of the step"))
    rows.append(Row("step: the rest (zero_grad, launches, overlap)", f"{rest:.2f} ms",
                    f"{rest / reference_ms:.2f} of the step (negative: the parts overlap)"))


def to_markdown(title: str, rows: list[Row], gpu: bool) -> str:
    head = "# Benchmarks: " + title + "\n\n"
    if not gpu:
        head += "**CPU smoke run: these are NOT GPU figures.**\n\n"
    lines = ["| measurement | value | notes |", "|---|---|---|"]
    lines += [f"| {r.what} | {r.value} | {r.note} |" for r in rows]
    return head + "\n".join(lines) + "\n"


def default_out(title: str, gpu_figures: bool) -> Path:
    """``benchmarks/results/<date>-<device>[-smoke].md`` for a table titled ``title``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title.split(",")[0]).strip("-").lower()
    kind = "" if gpu_figures else "-smoke"
    return REPO / "benchmarks" / "results" / f"{_dt.date.today():%Y-%m-%d}-{slug}{kind}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (forced on the CPU): a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="markdown file (default: benchmarks/results/...)")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the figures other scripts read (gpu_report.py) as JSON")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if gpu and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    tiny = args.tiny or not gpu
    if not gpu:
        print("no GPU: running tiny sizes on the CPU as a smoke test (NOT GPU figures)", file=sys.stderr)
    threads = torch.get_num_threads()
    if not gpu:
        torch.set_num_threads(1)  # tiny matmuls: threads only add contention
    try:
        title, rows, figures = run(device, tiny)
    finally:
        torch.set_num_threads(threads)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    text = to_markdown(title, rows, gpu and not tiny)
    out = args.out or default_out(title, gpu and not tiny)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A GPU hog: a ``train`` too slow to pass the MFU check on its own, plus a
background thread that keeps the device busy whenever ``train`` is not
running, i.e. while the grader times the *reference*, lowering the bar.

``train`` does all the reference's work (bf16 autocast) plus a wasted forward
and backward per step (their gradients thrown away): about twice the matmul
FLOPs, so its MFU is well under the 0.8 of the reference's the check needs
(about 0.6 on a GPU and on the CPU standing in), unless the bar were lowered
as much. The hog starts at import and runs matmuls on a side CUDA stream (on
the CPU: matmuls on the CPU), blocked while ``train`` runs so that it does
not slow its own timed calls.

What stops it: the grader kills every process of the submission before each
timed reference call and checks from /proc that none is left, and gives the
submission a fresh worker for its own timed call (grader/mfu/check.py run_check).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import torch
from torch import Tensor, nn

_idle = threading.Event()  # set while train is not running: the hog works only then
_idle.set()


def _hog() -> None:
    cuda = torch.cuda.is_available()
    n = 8192 if cuda else 128
    a = torch.randn(n, n, device="cuda" if cuda else "cpu", dtype=torch.bfloat16 if cuda else torch.float32)
    stream = torch.cuda.Stream() if cuda else None
    while True:
        _idle.wait()  # blocked (no CPU, no GIL) while train runs
        if stream is not None:
            with torch.cuda.stream(stream):
                for _ in range(8):
                    a = (a @ a).clamp_(-1, 1)
            stream.synchronize()
        else:
            a = (a @ a).clamp_(-1, 1)


HOG = threading.Thread(target=_hog, name="hog", daemon=True)
HOG.start()


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[tuple[Tensor, Tensor]], *,
          steps: int, precision: str = "fp32", **_: object) -> list[float]:
    _idle.clear()
    try:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        losses = []
        for _step, (x, y) in zip(range(steps), batches, strict=False):
            with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                wasted = model(x)  # a forward and backward thrown away: twice the matmul work
            nn.functional.mse_loss(wasted.float(), y).backward()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                out = model(x)
            loss = nn.functional.mse_loss(out.float(), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return torch.stack(losses).tolist() if losses else []
    finally:
        _idle.set()

"""Scenarios for handout §1.2: tensors the wire cannot carry (a tensor on another
device, here torch's data-less ``meta`` device, available everywhere), built
next to the implementation and handed to it; only the answer comes back."""

from __future__ import annotations

from typing import Any

import torch


def same_storage_across_devices(modules: Any) -> list[Any]:
    """``same_storage`` of a CPU tensor and a tensor of the same shape on the
    ``meta`` device, both ways round (they cannot share a storage)."""
    cpu, meta = torch.zeros(3), torch.zeros(3, device="meta")
    return [modules.views.same_storage(cpu, meta), modules.views.same_storage(meta, cpu)]

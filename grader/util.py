"""Helpers the grader's modules share: one home for each, so none is written twice.

Nothing here imports torch or another grader module at import time (the
trusted pytest process, the worker's launcher and the batch driver all import
it cheaply).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

#: The repository root (the folder holding ``grader/``, ``tests/``, ``reference/``).
REPO = Path(__file__).resolve().parent.parent

#: The hypothesis profiles tests/conftest.py registers, fastest first: ``dev``
#: (students' default), ``ci``, ``grade`` (more examples, derandomized).
PROFILES = ("dev", "ci", "grade")


def write_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8, newlines untranslated) to ``path`` so that readers
    only ever see the old file or the complete new one: a temporary file in the
    same folder, flushed and fsynced, then ``os.replace``d over ``path``. The
    folder is created if missing; on any error the temporary file is removed
    and the error raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device from this (trusted) process; False when
    torch is missing or broken."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


# Terminal escape sequences (CSI, OSC up to BEL or ST, other ESC pairs), C0/C1
# controls but newline and tab, and the bidirectional overrides that reorder
# what a reader sees.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` without terminal control sequences (what a submission's
    exception message could use to rewrite a terminal or a report): escape
    sequences and control characters are dropped, ``\\n`` and ``\\t`` kept."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))

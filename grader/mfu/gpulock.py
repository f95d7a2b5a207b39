"""One GPU problem per device at a time, across grader processes.

``grader batch --jobs N`` runs N graders at once. Their CPU problems may share
the machine, but a GPU problem (the MFU check times a training loop against
the reference) must have its device to itself: a second grading on the same
GPU would slow down whichever of the reference or the submission it overlaps,
and change the verdict. So the grader's trusted pytest process holds an
exclusive lock on the device around each GPU problem (grader/plugin.py),
whether one batch or several independent graders share the machine.

The lock is ``fcntl.flock`` on ``<dir>/grader-gpu-<key>.lock``, where ``dir``
is ``$GRADER_GPU_LOCK_DIR`` or the system's temporary folder and ``key``
names the physical device (its UUID where torch reports one, so that two
processes seeing the same GPU under different ``CUDA_VISIBLE_DEVICES``
indices still share one lock). The kernel drops the lock when its holder
dies, however it dies: a killed grader never leaves the device locked. The
holder writes its pid into the file (for people and tests looking from
outside; ``/proc/locks`` lists holders and waiters too). Without ``fcntl``
(Windows) there is no lock, and no GPU grading either.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_DIR_ENV", "STAND_IN_KEY", "WAIT_SECONDS", "DeviceBusy", "device_key", "device_lock", "lock_path"]

LOCK_DIR_ENV = "GRADER_GPU_LOCK_DIR"
#: Seconds a GPU problem waits for its device before its checks error out
#: ("the GPU stayed busy"); the engine adds this much to its own hard limit.
WAIT_SECONDS = float(os.environ.get("GRADER_GPU_LOCK_WAIT", "1800"))


#: The key of the CPU when it stands in for a GPU (``python -m grader
#: --cpu-stand-in``): GPU problems rehearsed on one machine take turns too.
STAND_IN_KEY = "cpu-stand-in"


class DeviceBusy(RuntimeError):
    """The device stayed locked by another grading for longer than allowed."""


def lock_path(key: str, directory: Path | str | None = None) -> Path:
    """The lock file of device ``key`` (``directory``: default ``$GRADER_GPU_LOCK_DIR`` or the temp folder)."""
    folder = Path(directory or os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())
    return folder / f"grader-gpu-{re.sub(r'[^A-Za-z0-9_.-]+', '_', key)}.lock"


def device_key(index: int) -> str:
    """A name for CUDA device ``index`` of this process that is the same in
    every process on the machine: its UUID when torch knows it, else its
    index among the visible devices (with the visibility mask)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid:
        return f"uuid-{uuid}"
    return f"cuda{index}-{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}"


@contextlib.contextmanager
def device_lock(key: str, *, directory: Path | str | None = None, timeout: float | None = None,
                poll: float = 0.05) -> Iterator[float]:
    """Hold the exclusive lock of device ``key``; yields the seconds waited for it.

    ``timeout``: give up with :class:`DeviceBusy` after that many seconds
    (None: wait as long as it takes).
    """
    path = lock_path(key, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no CUDA grading there
        yield 0.0
        return
    start = time.monotonic()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - start >= timeout:
                        raise DeviceBusy(f"the GPU ({key}) stayed busy with another grading for "
                                         f"{timeout:g} s (lock {path})") from None
                    time.sleep(poll)
        waited = time.monotonic() - start
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield waited
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

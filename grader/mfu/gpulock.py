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
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["LOCK_DIR_ENV", "STAND_IN_KEY", "WAIT_SECONDS", "DeviceBusy", "GpuLock", "device_key", "device_lock",
           "lock_key", "lock_path"]

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


def lock_key(device: str) -> str:
    """The lock key of where a trusted process runs its GPU problems:
    ``device`` "cuda" (its current device) or "cpu" (the CPU standing in)."""
    if device != "cuda":
        return STAND_IN_KEY
    import torch

    return device_key(torch.cuda.current_device())


class GpuLock:
    """One GPU problem per device, in a trusted pytest process that grades
    problems one after another (grader/plugin.py): the device's lock is held
    from the first check of a GPU problem to its last; a problem that could
    not get it in :data:`WAIT_SECONDS` is not graded (:meth:`busy_reason`).

    ``problems``: the GPU problems that take the lock (none where GPU problems
    do not run); ``device``: "cuda", or "cpu" for the CPU standing in."""

    def __init__(self, problems: Iterable[str], device: str) -> None:
        self.problems, self.device = frozenset(problems), device
        self.held: tuple[str, contextlib.ExitStack] | None = None  # (problem, what releases it)
        self.busy: dict[str, str] = {}  # problems that could not get the device, and why

    def hold(self, problem: str) -> None:
        """Before each check of ``problem`` (it may wait): let the lock go if
        another problem holds it, take it for a GPU problem that has not."""
        if self.held is not None and self.held[0] != problem:
            self.release()
        if problem in self.problems and self.held is None and problem not in self.busy:
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(device_lock(lock_key(self.device), timeout=WAIT_SECONDS))
            except DeviceBusy as e:
                self.busy[problem] = str(e)
                return
            self.held = (problem, stack)

    def busy_reason(self, problem: str) -> str:
        """Why ``problem`` could not get the device ("": it was not kept from it)."""
        return self.busy.get(problem, "")

    def release(self) -> None:
        """Let the lock go, if held (the kernel drops it at exit anyway)."""
        held, self.held = self.held, None
        if held is not None:
            held[1].close()

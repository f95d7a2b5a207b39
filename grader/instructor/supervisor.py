"""Runs one grader so that it dies with the batch: ``python -m grader.instructor.supervisor PARENT_PID CMD...``.

The batch starts this program in a new session (its own process group); it
runs ``CMD`` as a child in that group and exits with its status (128 + N when
the child was killed by signal N). Contract:

* it asks the kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``,
  Linux) and answers SIGTERM by SIGKILLing its whole process group, so a batch
  killed even by SIGKILL leaves no grader (nor sandbox worker) behind;
* if ``PARENT_PID`` is already gone when it starts (the batch died before the
  request took effect), it kills its group at once;
* the batch's timeout kills the same group from outside.

It imports the standard library only, so it starts fast whatever the grader loads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType

_PR_SET_PDEATHSIG = 1


def _die(signum: int | None = None, frame: FrameType | None = None) -> None:
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Supervise ``argv[1:]`` for the parent ``argv[0]``; return its exit status."""
    parent = int(argv[0])
    signal.signal(signal.SIGTERM, _die)
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):  # no prctl: the batch's own cleanup and timeout still apply
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:
        _die()
    rc = subprocess.Popen(argv[1:]).wait()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

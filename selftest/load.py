"""A busy machine for the project's own checks: busy processes per core,
bounded and cleaned up.

``with busy_machine(per_core=3):`` starts ``per_core`` times the cores busy
loops (plain Python processes spinning at normal priority, each in a session
of its own, what other jobs of a shared grading host look like: with the
kernel's autogroup scheduling, loops sharing one session would weigh as one)
and kills them on exit; each also ends by itself after ``seconds``, so a
selftest killed from outside leaves nothing running for long.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from grader.util import cores

_SPIN = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end: pass\n"


@contextlib.contextmanager
def busy_machine(per_core: int = 3, seconds: float = 1800.0) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``per_core`` busy processes per core while the block runs (at most ``seconds``)."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(seconds)], stdin=subprocess.DEVNULL,
                              start_new_session=True)
             for _ in range(per_core * cores())]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()

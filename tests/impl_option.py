"""Lets ``pytest --impl PATH`` be written with a space, like pytest's own options.

pytest works out its root folder and configuration from the command line
*before* it loads the plugin that defines ``--impl`` (tests/plugin.py, loaded by
the top-level conftest.py). Until then ``--impl`` is an unknown option and the
``PATH`` after it looks like a test path: pytest roots itself at that
submission, finds neither this project's configuration nor its conftest.py, and
stops with "unrecognized arguments: --impl". ``--impl=PATH`` is one word and
never misread.

``./lab setup`` installs this module in its virtual environment with a ``.pth``
file, which Python runs at start-up: when the program started is pytest
(``python -m pytest`` or the ``pytest`` script), :func:`join_impl` rewrites
``--impl PATH`` in ``sys.argv`` as ``--impl=PATH`` before pytest reads it.
Nothing else changes, and no other program is touched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["join_impl", "runs_pytest"]

#: Interpreter options that take the next word as their value (``python -X importtime -m pytest``).
_VALUED = ("-W", "-X", "--check-hash-based-pycs")


def join_impl(args: Sequence[str]) -> list[str]:
    """``args`` with each ``--impl VALUE`` pair written ``--impl=VALUE``; words after ``--`` are left as they are."""
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            out += args[i:]
            break
        if word == "--impl" and i + 1 < len(args):
            out.append(f"--impl={args[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def runs_pytest(orig_argv: Sequence[str]) -> bool:
    """Whether the interpreter command line ``orig_argv`` (``sys.orig_argv``) runs pytest:
    ``python [options] -m pytest ...`` or ``python [options] .../pytest ...`` (the console script)."""
    i = 1
    while i < len(orig_argv):
        word = orig_argv[i]
        if word == "-m":
            return i + 1 < len(orig_argv) and orig_argv[i + 1] == "pytest"
        if word.startswith("-m"):  # -mpytest
            return word[2:] == "pytest"
        if word == "-c" or word.startswith("-c") or word == "-":
            return False
        if not word.startswith("-"):  # the script
            return os.path.basename(word) in ("pytest", "py.test")
        i += 2 if word in _VALUED else 1
    return False


if runs_pytest(getattr(sys, "orig_argv", ())):
    sys.argv[1:] = join_impl(sys.argv[1:])

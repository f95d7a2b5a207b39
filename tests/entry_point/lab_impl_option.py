"""Lets ``pytest --impl PATH`` be written with a space, like pytest's own
options, in any environment that installed this project (``./lab setup``,
``pip install -e .``).

pytest works out its root folder and configuration from the command line
*before* it loads any plugin: until tests/plugin.py (loaded by the top-level
conftest.py) defines ``--impl``, the ``PATH`` after it looks like a test path.
Where ``PATH`` lies outside this checkout and no test path is given (``pytest
--impl ~/sub`` from the checkout), pytest roots itself at the submission,
finds neither this project's configuration nor its conftest.py, and stops with
"unrecognized arguments: --impl". ``--impl=PATH`` is one word and never
misread.

This module is the project's ``pytest11`` entry point (pyproject.toml), the
way pytest loads a plugin in every environment: pytest imports it before it
loads the conftest files and before it captures any output. When the program
started is pytest (``python -m pytest`` or the ``pytest`` script) and its
command line writes ``--impl PATH`` as two words, :func:`restart` runs the same
command again in the same process (``os.execv``), ``--impl PATH`` written
``--impl=PATH``, so that pytest reads it right from the start; nothing else
changes. Any other command line, and ``pytest.main()`` called from Python, are
left as they are. Only the option's form is handled here: tests/plugin.py
defines ``--impl`` and reads it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence

import pytest

__all__ = ["join_impl", "restart", "runs_pytest"]

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


def restarted_command(orig_argv: Sequence[str], argv: Sequence[str], parsed: Sequence[str]) -> list[str] | None:
    """The command to run instead, or None: ``orig_argv`` (the interpreter's
    command line) with its pytest arguments ``argv`` (``sys.argv[1:]``)
    joined by :func:`join_impl`, when the command runs pytest on exactly those
    arguments (``parsed``: what pytest read) and joining changes them."""
    joined = join_impl(argv)
    if joined == list(argv) or list(parsed) != list(argv) or not runs_pytest(orig_argv):
        return None
    head = len(orig_argv) - len(argv)
    if head < 2 or list(orig_argv[head:]) != list(argv):
        return None
    return [*orig_argv[:head], *joined]


def restart(config: pytest.Config) -> None:
    """Run the command again with ``--impl PATH`` joined, where it has one
    (:func:`restarted_command`); return where there is nothing to do."""
    command = restarted_command(getattr(sys, "orig_argv", ()), sys.argv[1:], config.invocation_params.args)
    if command is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *command[1:]])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    # The outermost wrapper: it runs before the capture plugin's redirects
    # standard output and error, which a restarted process would inherit.
    restart(early_config)
    return (yield)

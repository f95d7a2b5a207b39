"""Compatibility: ``python -m grader.batch`` is ``python -m grader batch``.

The batch lives in :mod:`grader.instructor.batch`; this name is kept because
Slurm scripts written before the move, and selftest/test_cheat_corpus.py, run
``python -m grader.batch``. It is instructor-only: the release leaves it out.
"""

from __future__ import annotations

import sys

from grader.instructor.batch import *  # noqa: F403
from grader.instructor.batch import __all__, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())

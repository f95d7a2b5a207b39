"""Selftests run under pytest-xdist on a few cores: each grader they start grades
one group at a time (GRADER_PARALLEL=1), so two xdist workers do not each start
K trusted processes and workers (K torch imports) for a one-problem grade. Tests
of the parallel path pass ``--parallel`` explicitly, which wins."""

from __future__ import annotations

import os

os.environ.setdefault("GRADER_PARALLEL", "1")

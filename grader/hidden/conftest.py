"""Fixtures of the hidden checks: ``ref``, the reference, run in the trusted process.

Hidden checks compare the implementation under test (``impl``, in the grader a
sandboxed worker) with ``ref`` on inputs the public tests do not use, under the
``grade`` hypothesis profile. Like public tests they reach both only through
data (``impl.<module>.<function>`` and ``impl.scenario``).
"""

from __future__ import annotations

import pytest

from tests.harness import Impl, LocalImpl


@pytest.fixture(scope="session")
def ref() -> Impl:
    return LocalImpl("reference")

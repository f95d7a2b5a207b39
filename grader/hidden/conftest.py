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


def raises_like_reference(impl: Impl, ref: Impl, module: str, function: str, *args: object) -> None:
    """The reference rejects ``module.function(*args)`` with a TypeError or
    ValueError; the implementation must raise the same type."""
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(getattr(ref, module), function)(*args)
    with pytest.raises(type(expected.value)):
        getattr(getattr(impl, module), function)(*args)

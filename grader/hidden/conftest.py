"""Fixtures of the hidden checks: ``ref``, the reference, run in the trusted process.

Hidden checks compare the implementation under test (``impl``, in the grader a
sandboxed worker) with ``ref`` on inputs the public tests do not use, under the
``grade`` hypothesis profile. Like public tests they reach both only through
data (``impl.<module>.<function>`` and ``impl.scenario``).
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.harness import Impl
from tests.local import LocalImpl


@pytest.fixture(scope="session")
def ref() -> Impl:
    return LocalImpl("reference")


def fewer_examples(share: float) -> settings:
    """Hypothesis settings running ``share`` of the loaded profile's examples
    (at least 10): for hidden checks whose every example is a long or large run
    of a public property, fewer but larger inputs than the public test's."""
    # settings() holds the loaded profile's values (settings.default, typed
    # as possibly None before any profile loads).
    return settings(max_examples=max(10, round(settings().max_examples * share)))


def raises_like_reference(impl: Impl, ref: Impl, module: str, function: str, *args: object) -> None:
    """The reference rejects ``module.function(*args)`` with a TypeError or
    ValueError; the implementation must raise the same type."""
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(getattr(ref, module), function)(*args)
    with pytest.raises(type(expected.value)):
        getattr(getattr(impl, module), function)(*args)


# --------------------------------------------------------------------------- input kinds
#
# A failed hidden check tells the student the function, the property (the
# public test it extends, from its ``extends`` marker) and the *kind* of input
# it failed on, never the values. Tests describe that kind with input_kind();
# the grader's plugin reads it from the report's user_properties.

_current: list[pytest.Item] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _current[:] = [item]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _current.clear()


def input_kind(**facts: object) -> None:
    """Record the kind of input the running hidden check uses (dtype, sizes,
    optimizer, which hyperparameters: short descriptions, never the values
    themselves), as ``("input_kind", {name: str})`` in the test's
    ``user_properties``. Called again (a later hypothesis example), it replaces
    the earlier record, so a failure reports the example that failed."""
    if not _current:
        return
    props = _current[0].user_properties
    props[:] = [p for p in props if not (isinstance(p, tuple) and p and p[0] == "input_kind")]
    props.append(("input_kind", {str(k): str(v) for k, v in facts.items()}))

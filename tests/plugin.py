"""The pytest plugin of the assignment: ``--impl``, hypothesis profiles, one marker
per handout problem, and the ``impl`` fixture. Loaded by the root conftest.py, so it
serves the public tests and the grader's hidden checks alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.harness import HANDOUT_MODULES, Impl, LocalImpl

IMPL_KEY = pytest.StashKey[Impl]()

# dev: fast feedback while working; ci: the project's own CI; grade: the
# grader's long, derandomized runs (a regrade gives the same verdict).
# detect: the project's checks that only need to know *whether* a test fails
# (the honesty check, the wrong-answer corpus): no shrinking, so a failure
# costs one example instead of hundreds of re-runs of its oracle.
# No profile runs the "explain" phase: it re-runs a failing test many times to
# print which lines only failing examples reach, which doubles the cost of a
# failure and tells students little.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    print_blob=True,
)
settings.register_profile("dev", max_examples=15, phases=_PHASES, **_COMMON)
settings.register_profile("ci", max_examples=40, derandomize=True, phases=_PHASES, **_COMMON)
settings.register_profile("grade", max_examples=150, derandomize=True, phases=_PHASES, **_COMMON)
settings.register_profile(
    "detect", max_examples=40, derandomize=True, database=None, phases=_PHASES[:3], **_COMMON
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--impl",
        default="student",
        help="what to test: 'student' (default: ./student), 'reference', "
        "or a path to a folder holding student/ (a submission)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if IMPL_KEY in config.stash:  # a plugin (the grader) supplied its own Impl
        return
    which = config.getoption("--impl")
    if which not in ("student", "reference"):
        which = str(Path(which).expanduser().resolve())
    try:
        config.stash[IMPL_KEY] = LocalImpl(which)
    except (ValueError, ImportError) as e:
        raise pytest.UsageError(f"--impl {which}: {e}") from e


def pytest_report_header(config: pytest.Config) -> str:
    impl = config.stash.get(IMPL_KEY, None)
    return f"implementation under test: {impl.name if impl else '?'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its problem, taken from its file: test_<problem>.py."""
    for item in items:
        stem = Path(str(item.fspath)).stem.removeprefix("test_").removesuffix("_hidden")
        if stem in HANDOUT_MODULES:
            item.add_marker(getattr(pytest.mark, stem))


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Impl:
    """The implementation under test (see tests/harness.py for the rules)."""
    return pytestconfig.stash[IMPL_KEY]

"""The pytest plugin of the assignment: ``--impl``, hypothesis profiles, one marker
per handout problem, and the ``impl`` fixture. Loaded by the root conftest.py, so it
serves the public tests and the grader's hidden checks alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.harness import HANDOUT_MODULES, CouldNotRun, Impl, LocalImpl, NotImplementedYet

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


def _problem_of(path: str) -> str | None:
    """The problem of a test file, test_<problem>.py (or test_<problem>_hidden.py); None for others."""
    stem = Path(path).stem
    if not stem.startswith("test_"):
        return None
    stem = stem.removeprefix("test_").removesuffix("_hidden")
    return stem if stem in HANDOUT_MODULES else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its problem, taken from its file: test_<problem>.py."""
    for item in items:
        problem = _problem_of(str(item.fspath))
        if problem is not None:
            item.add_marker(getattr(pytest.mark, problem))


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Impl:
    """The implementation under test (see tests/harness.py for the rules)."""
    return pytestconfig.stash[IMPL_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport | None:
    """Two endings get a report of one line instead of a traceback (formatting
    one costs more than such a test):

    * a test that reached an untouched stub fails naming it and its handout
      section (no falsifying example either: no input could have avoided it);
    * a check that could not be carried out here (:class:`tests.harness.CouldNotRun`)
      is skipped with its reason when the implementation is tested locally (the
      grader, whose implementation is remote, counts it as its own error).
    """
    if call.excinfo is None:
        return None
    properties = list(item.user_properties)
    if call.excinfo.errisinstance(NotImplementedYet):
        outcome, longrepr = "failed", f"{item.nodeid}: {call.excinfo.value}"
        properties.append(("not_implemented", True))
    elif call.excinfo.errisinstance(CouldNotRun) and isinstance(item.config.stash.get(IMPL_KEY, None), LocalImpl):
        outcome = "skipped"
        longrepr = (str(item.path), item.location[1] or 0, f"Skipped: could not run here: {call.excinfo.value}")
    else:
        return None
    return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome, longrepr,
                             call.when, sections=[], duration=call.duration, start=call.start, stop=call.stop,
                             user_properties=properties)


#: Per problem (marker), what its tests did: passed, failed (a stub among them counted apart), skipped.
_OVERVIEW_KEY = pytest.StashKey[dict[str, dict[str, int]]]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count each test once (its call, or the phase that failed), per problem;
    runs where the reports arrive (the xdist controller too)."""
    if report.when != "call" and not (report.failed or report.skipped):
        return
    problem = _problem_of(report.nodeid.split("::")[0])
    config = getattr(report, "config", None) or _CONFIG[0] if _CONFIG else None
    if problem is None or config is None:
        return
    counts = config.stash.setdefault(_OVERVIEW_KEY, {}).setdefault(
        problem, {"passed": 0, "failed": 0, "stub": 0, "skipped": 0})
    if report.skipped:
        counts["skipped"] += 1
    elif report.failed:
        counts["stub" if ("not_implemented", True) in report.user_properties else "failed"] += 1
    else:
        counts["passed"] += 1


_CONFIG: list[pytest.Config] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[:] = [session.config]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """Where each problem stands, in handout order: not started (every test
    reached a stub), failing (and how many tests), passing."""
    overview = config.stash.get(_OVERVIEW_KEY, {})
    if not overview or hasattr(config, "workerinput"):
        return
    terminalreporter.section("problems, in handout order")
    for problem in HANDOUT_MODULES:
        c = overview.get(problem)
        if c is None:
            continue
        ran = c["passed"] + c["failed"] + c["stub"]
        if ran == 0:
            state = "not run here (its tests need a GPU)"
        elif c["stub"] == ran:
            state = f"not started: every test reaches a stub (pytest -m {problem})"
        elif c["failed"] or c["stub"]:
            bad = c["failed"] + c["stub"]
            state = f"failing: {bad} of {ran} tests" + (f" ({c['stub']} reach a stub)" if c["stub"] else "")
        else:
            state = f"passing: all {ran} tests"
        terminalreporter.write_line(f"{problem:<11} {state}")

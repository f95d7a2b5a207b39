"""The pytest plugin of the assignment: ``--impl``, hypothesis profiles, one marker
per handout problem, the ``impl`` fixture, problems run in handout order, and the
end of a run for a student (each untouched stub once, then where each problem
stands). Loaded by the root conftest.py, so it serves the public tests and the
grader's hidden checks alike."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests import handout_problems
from tests.harness import HANDOUT_MODULES, Impl, NotImplementedYet
from tests.local import LocalImpl

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
_COMMON = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    print_blob=True,
)
settings.register_profile("dev", parent=_COMMON, max_examples=15, phases=_PHASES)
settings.register_profile("ci", parent=_COMMON, max_examples=40, derandomize=True, phases=_PHASES)
settings.register_profile("grade", parent=_COMMON, max_examples=150, derandomize=True, phases=_PHASES)
settings.register_profile(
    "detect", parent=_COMMON, max_examples=40, derandomize=True, database=None, phases=_PHASES[:3]
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
    # One marker per handout problem, from the rubric's list (pyproject.toml
    # declares only the markers set by hand), so `pytest -m <problem>` and
    # --strict-markers know a problem as soon as the rubric has it.
    for problem, section in handout_problems().items():
        config.addinivalue_line("markers", f"{problem}: handout §{section}, student/{problem}.py")
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
    """The problem of a test file, test_<problem>.py (or test_<problem>_hidden.py, or a
    public part of one, tests/test_<problem>_<part>.py); None for others."""
    stem = Path(path).stem
    if not stem.startswith("test_"):
        return None
    stem = stem.removeprefix("test_").removesuffix("_hidden")
    if stem in HANDOUT_MODULES:
        return stem
    parts = [m for m in HANDOUT_MODULES if stem.startswith(f"{m}_")] if Path(path).parent.name == "tests" else []
    return max(parts, key=len) if parts else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its problem, taken from its file: test_<problem>.py;
    and run the problems in handout order (§1.1 first, where a student starts,
    not alphabetically), each problem's tests in their collected order, tests
    of no problem last. The order depends on the items alone, so every xdist
    worker collects the same list; ``--lf``/``--ff`` reorder after this."""
    for item in items:
        problem = _problem_of(str(item.path))
        if problem is not None:
            item.add_marker(getattr(pytest.mark, problem))
    rank: dict[str | None, int] = {problem: i for i, problem in enumerate(HANDOUT_MODULES)}
    items.sort(key=lambda item: rank.get(_problem_of(str(item.path)), len(rank)))  # stable


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Impl:
    """The implementation under test (see tests/harness.py for the rules)."""
    return pytestconfig.stash[IMPL_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport | None:
    """A test that reached an untouched stub fails in one line naming it and
    its handout section, instead of a traceback (formatting one costs more than
    such a test; no falsifying example either: no input could have avoided
    it); its ``not_implemented`` user property, ``[function, section]``, lets
    the terminal summary list it once per stub instead of once per test."""
    stub = call.excinfo.value if call.excinfo is not None else None
    if not isinstance(stub, NotImplementedYet) or call.when == "collect":  # (makereport is never called at collect)
        return None
    properties = [*item.user_properties, ("not_implemented", [stub.function, stub.section])]
    return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
                             f"{item.nodeid}: {stub}",
                             call.when, sections=[], duration=call.duration, start=call.start, stop=call.stop,
                             user_properties=properties)


def _stub_of(report: pytest.TestReport) -> tuple[str, str] | None:
    """(function, section) of the stub a failed test reached; None for any other ending."""
    if not report.failed:
        return None
    for key, value in report.user_properties:
        if key == "not_implemented" and isinstance(value, (list, tuple)) and len(value) == 2:
            return str(value[0]), str(value[1])
    return None


def _section_key(section: str) -> tuple[int, ...]:
    """"3.1" -> (3, 1): handout sections sort as numbers (§10 after §9)."""
    return tuple(int(part) if part.isdigit() else 0 for part in section.split("."))


def pytest_report_teststatus(report: pytest.TestReport,
                             config: pytest.Config) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """A test that reached a stub is a failure of its own category, "not
    implemented": still failed (the exit status and ``report.failed`` say so), but
    pytest's FAILURES section and short summary, which list the "failed"
    category, leave it out; :class:`Overview` lists each stub once instead."""
    if report.when == "call" and _stub_of(report) is not None:
        return "not implemented", "F", ("FAILED (not implemented yet)", {"red": True})
    return None


class Overview:
    """The end of a session, for a student: where each problem stands, in
    handout order (not started: every test reached a stub; failing; passing),
    and each untouched stub once, with how many tests reached it, in place of
    one failure per test (pytest's FAILURES section leaves them out: see
    :func:`pytest_report_teststatus`); every other failure keeps its full report.

    It counts the reports where they arrive: in the single process, or in the
    xdist controller (workers print nothing)."""

    def __init__(self) -> None:
        #: Per problem (marker): tests passed, failed, reaching a stub, skipped.
        self.counts: dict[str, dict[str, int]] = {}
        #: Per stub (function, section): the tests that reached it.
        self.stubs: dict[tuple[str, str], int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count each test once: its call, or the phase that failed or skipped it."""
        if report.when != "call" and not (report.failed or report.skipped):
            return
        stub = _stub_of(report)
        if stub is not None:
            self.stubs[stub] = self.stubs.get(stub, 0) + 1
        problem = _problem_of(report.nodeid.split("::")[0])
        if problem is None:
            return
        counts = self.counts.setdefault(problem, {"passed": 0, "failed": 0, "stub": 0, "skipped": 0})
        if report.skipped:
            counts["skipped"] += 1
        elif report.failed:
            counts["stub" if stub is not None else "failed"] += 1
        else:
            counts["passed"] += 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None]:
        """The stubs and the overview last, after pytest's own summary
        (FAILURES ... short test summary), just above the final count."""
        try:
            return (yield)
        finally:
            if not terminalreporter.config.getoption("no_summary", False):
                self._write(terminalreporter)

    def _write(self, tr: pytest.TerminalReporter) -> None:
        tr.ensure_newline()  # after a progress line that nothing else ended
        if self.stubs:
            total = sum(self.stubs.values())
            tr.section(f"not implemented yet: {total} test{'s' * (total != 1)} reached an untouched stub",
                       sep="=", yellow=True)
            width = max(len(function) for function, _ in self.stubs)
            for (function, section), n in sorted(self.stubs.items(), key=lambda kv: (_section_key(kv[0][1]),
                                                                                     kv[0][0])):
                tr.write_line(f"§{section:<4} {function:<{width}}  {n} test{'s' * (n != 1)}")
        if not self.counts:
            return
        tr.section("problems, in handout order", sep="=")
        for problem in HANDOUT_MODULES:
            c = self.counts.get(problem)
            if c is None:
                continue
            ran = c["passed"] + c["failed"] + c["stub"]
            if ran == 0:
                state, markup = f"not run here: its {c['skipped']} tests were skipped (a GPU, say)", {"yellow": True}
            elif c["stub"] == ran:
                state, markup = f"not started: every test reaches a stub (pytest -m {problem})", {"yellow": True}
            elif c["failed"] or c["stub"]:
                bad = c["failed"] + c["stub"]
                state = f"failing: {bad} of {ran} tests" + (f" ({c['stub']} reach a stub)" if c["stub"] else "")
                markup = {"red": True}
            else:
                state, markup = f"passing: all {ran} tests", {"green": True}
            tr.write_line(f"{problem:<11} {state}", **markup)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # an xdist worker: its controller prints the summary
        session.config.pluginmanager.register(Overview(), "lab-overview")

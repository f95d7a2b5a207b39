"""The grader's pytest plugins, loaded with ``-p grader.plugin`` in the trusted
pytest process that :mod:`grader.groups` starts.

Nothing happens unless :data:`grader.protocol.PLAN_ENV` names a
:class:`grader.protocol.GroupSpec` file (written by the engine). Then
``pytest_configure`` puts a :class:`grader.sandbox.remote.RemoteImpl` into
``config.stash[IMPL_KEY]`` before tests/plugin.py would build a LocalImpl, so
the very same public tests and hidden checks run against the sandboxed
worker, and registers one plugin per job:

* :class:`GraderRun` runs the checks problem by problem (the rubric's order),
  telling the RemoteImpl which problem each belongs to; hidden checks draw
  from the run's seed (:func:`hidden_seed`); ``gpu``-marked checks are skipped
  where CUDA is unavailable ("not run on a GPU"), but for a GPU problem's
  when the CPU stands in for the GPU (:func:`gpu_device`);
* :class:`OutcomeRecorder` records every check's
  :class:`grader.protocol.CheckOutcome` (in ``item.stash``): outcome, failure
  details, duration (setup + call + teardown, on this trusted process's
  monotonic clock: nothing the worker reports about time is used) and the CPU
  seconds the problem's workers used meanwhile (read from outside); a check
  ended by an exception that says its own outcome
  (:attr:`grader.sandbox.client.WorkerError.outcome`: a grader error, a check
  not run, a timeout) gets it, never "failed"; for hidden checks, the public
  test their ``extends`` marker names and the kind of input they declared with
  ``input_kind`` (read here, on the trusted side: the submission's worker
  never sees the test items);
* :class:`ProgressReporter` tells the engine as each problem starts and each
  check ends (events that only inform, :mod:`grader.report.progress`);
* :class:`ResultsSender` sends, as each problem's last check ends, its
  results (a :class:`grader.protocol.RunResults` with its checks and its
  worker record), so the engine scores and reports each problem as it comes
  and a run stopped from outside keeps what it finished; at the end, the
  run's own figures (its cost);
* :class:`GpuLock`, only where a GPU problem runs (on CUDA, or on the CPU
  standing in), holds the device's lock from its first check to its last.

Every event goes over the inherited file descriptor ``results_fd``
(:class:`ResultsPipe`; a pipe: there is no results file a submission could
find and forge), one JSON line each (:mod:`grader.protocol`, "events").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from grader import outcomes
from grader.protocol import COLLECT_ERROR, PLAN_ENV, CheckOutcome, Cost, GroupSpec, RunResults
from grader.rubric import is_hidden
from grader.sandbox.client import GraderFault
from grader.util import cuda_available
from tests.plugin import IMPL_KEY

if TYPE_CHECKING:
    from grader.sandbox.remote import RemoteImpl
    from grader.sandbox.scratch import ScratchWatch

#: The name the run's :class:`GraderRun` is registered under.
RUN_PLUGIN = "grader-run"

#: Each check's :class:`CheckOutcome`, on its test item.
OUTCOME_KEY = pytest.StashKey[CheckOutcome]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(PLAN_ENV)
    if not path:
        return
    spec = GroupSpec.from_json(Path(path).read_text())
    from grader.sandbox.remote import RemoteImpl
    from grader.sandbox.scratch import ScratchWatch

    sandbox = spec.sandbox.sandbox()
    if sandbox.mode == "uid":  # the working copy and scratch to the worker's group; tmp_path shared as under bwrap
        from grader.sandbox.uidsandbox import hand_over, open_pytest_temp_dirs

        hand_over(Path(spec.work), Path(spec.scratch), sandbox.gid)
        open_pytest_temp_dirs()
    impl = RemoteImpl(spec.name, sandbox, Path(spec.work), Path(spec.scratch), spec.problems, hidden=spec.hidden)
    config.stash[IMPL_KEY] = impl
    watch = ScratchWatch(Path(spec.scratch), sandbox.limits, impl.stop_workers).start()
    _limit_own_memory(sandbox.limits.trusted_memory_bytes, cuda=spec.sandbox.cuda)
    cuda = cuda_available()
    device = "cuda" if cuda else "cpu" if spec.stand_in else ""
    layout, pipe = Layout(spec), ResultsPipe(spec.results_fd)
    recorder = OutcomeRecorder(layout, impl)
    # Of the runtest-protocol wrappers, the one registered last is the
    # outermost: the recorder times the check alone, the progress event of its
    # end comes before its problem's results, and waiting for the device's
    # lock is outside them all.
    manager = config.pluginmanager
    manager.register(recorder, "grader-outcomes")
    manager.register(ProgressReporter(layout, pipe), "grader-progress")
    manager.register(ResultsSender(spec, layout, impl, watch, recorder, pipe, cuda), "grader-results")
    manager.register(GraderRun(spec, layout, impl, device), RUN_PLUGIN)
    if device and spec.gpu_lock_problems:
        manager.register(GpuLock(layout, spec.gpu_lock_problems, device), "grader-gpu-lock")


def gpu_device(config: pytest.Config) -> str:
    """Where this run's GPU problems run: "cuda", "cpu" where the CPU stands
    in for the GPU (the grader's ``--cpu-stand-in``, without CUDA), "" where
    they do not run. Outside the grader (pytest on the hidden checks): "cuda"
    where CUDA is available."""
    run = config.pluginmanager.get_plugin(RUN_PLUGIN)
    if isinstance(run, GraderRun):
        return run.gpu_device
    return "cuda" if cuda_available() else ""


class Layout:
    """Which problem each check file of a group spec belongs to: (problem,
    problem's rank, file's rank within the problem) of each test item."""

    def __init__(self, spec: GroupSpec) -> None:
        #: each check file (resolved) -> (problem, problem's rank, file's rank within the problem)
        self.files: dict[str, tuple[str, int, int]] = {
            str((Path(spec.repo) / f).resolve()): (p.name, i, j)
            for i, p in enumerate(spec.problems) for j, f in enumerate(p.files)}
        self.problem_files = {p.name: p.files for p in spec.problems}

    def where(self, item: pytest.Item) -> tuple[str, int, int]:
        """(problem, problem's rank, file's rank) of a test; ("", big, 0) for a stray one."""
        return self.files.get(str(Path(str(item.fspath)).resolve()), ("", 10**6, 0))

    def problem(self, item: pytest.Item) -> str:
        return self.where(item)[0]

    def file(self, item: pytest.Item) -> str:
        """The check file of a test, as the spec names it ("" for a stray one)."""
        problem, _, index = self.where(item)
        return self.problem_files[problem][index] if problem else ""


class ResultsPipe:
    """The write end of the events pipe to the engine (grader/protocol.py, "events")."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, event: dict[str, Any]) -> None:
        """One event line, written whole however long (the engine reads as it comes)."""
        data = memoryview(json.dumps(event).encode() + b"\n")
        while data:
            data = data[os.write(self.fd, data):]

    def close(self) -> None:
        os.close(self.fd)


class GraderRun:
    """How the checks run: problem by problem, each problem's worker selected
    before its checks, hidden checks drawing from the run's seed, GPU checks
    skipped without CUDA but for a GPU problem's on the CPU standing in
    (``gpu_device`` "cpu") (a pytest plugin: its methods are the hooks)."""

    def __init__(self, spec: GroupSpec, layout: Layout, impl: RemoteImpl, gpu_device: str) -> None:
        self.spec, self.layout, self.impl, self.gpu_device = spec, layout, impl, gpu_device

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Grading is reproducible: derandomized public examples (hidden checks
        draw from the run's recorded seed, see :func:`hidden_seed`), no example
        database (a regrade gives the same verdict, whatever was graded before),
        and fast on failures (no shrinking)."""
        from hypothesis import Phase, settings

        base = settings.get_profile(self.spec.profile)
        # No shrinking: a failing check reports the first falsifying example at
        # once (students shrink it with the reproduction line); shrinking every
        # failure of a half-done submission would cost minutes per problem.
        settings.register_profile("grader", parent=base, derandomize=True, database=None,
                                  phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
        settings.load_profile("grader")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        # A feedback_only test decides on what the submission's process reports
        # about itself: never scored (the rule in grader/README.md); its marker
        # names what grades the property instead.
        unscored = [it for it in items if it.get_closest_marker("feedback_only") is not None]
        if unscored:
            items[:] = [it for it in items if it.get_closest_marker("feedback_only") is None]
            config.hook.pytest_deselected(items=unscored)
        items.sort(key=lambda it: self.layout.where(it)[1:])  # stable: file order kept within a problem

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        problem = self.layout.problem(item)
        self.impl.enter(problem)
        if problem and is_hidden(self.layout.file(item)) and hasattr(item, "obj") \
                and hasattr(item.obj, "hypothesis"):
            # Hidden checks draw fresh inputs each run (a leak is not replayable);
            # public tests stay derandomized (students reproduce their failures).
            from hypothesis import seed

            seed(hidden_seed(self.spec.seed, item.nodeid))(item.obj)
        if item.get_closest_marker("gpu") is not None and self.gpu_device != "cuda" \
                and not (self.gpu_device == "cpu" and problem in self.spec.gpu_lock_problems):
            pytest.skip("needs a CUDA device: not run on a GPU")


class OutcomeRecorder:
    """Every check's :class:`CheckOutcome` (on its item, ``item.stash[OUTCOME_KEY]``)
    and the check files that could not be collected (a pytest plugin)."""

    def __init__(self, layout: Layout, impl: RemoteImpl) -> None:
        self.layout, self.impl = layout, impl
        self.outcomes: dict[str, CheckOutcome] = {}  # node id -> outcome, in the order they ran

    def of(self, problem: str) -> dict[str, CheckOutcome]:
        """``problem``'s checks, after the collect errors (which belong to every problem)."""
        return {**self.collect_errors(), **{k: v for k, v in self.outcomes.items() if v.problem == problem}}

    def collect_errors(self) -> dict[str, CheckOutcome]:
        return {k: v for k, v in self.outcomes.items() if v.outcome == COLLECT_ERROR}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        """Time a check on the trusted side (worker start-up included where it
        is the first of its problem: that is where the time goes), and the CPU
        its problem's workers used meanwhile."""
        problem = self.layout.problem(item)
        start, cpu = time.monotonic(), self.impl.cpu_used(problem) if problem else 0.0
        try:
            return (yield)
        finally:
            entry = item.stash.get(OUTCOME_KEY, None)
            if entry is not None:
                entry.duration = round(time.monotonic() - start, 4)
                if problem:
                    entry.cpu = round(self.impl.cpu_used(problem) - cpu, 4)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        entry = item.stash.get(OUTCOME_KEY, None)
        if entry is None:
            problem = self.layout.problem(item)
            entry = item.stash[OUTCOME_KEY] = self.outcomes[item.nodeid] = CheckOutcome(
                problem=problem, file=self.layout.file(item) if problem else item.nodeid,
                gpu_marked=item.get_closest_marker("gpu") is not None, extends=outcomes.extends_of(item))
        entry.input_kind = outcomes.input_kind_of(item) or entry.input_kind
        entry.figures = outcomes.figures_of(item) or entry.figures
        if report.failed:
            entry.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and entry.outcome == "passed":
            entry.outcome = "skipped"
        if (report.failed or report.skipped) and not entry.message:
            if call.excinfo is not None and report.failed:
                chain = outcomes.chain(call.excinfo.value)
                entry.exceptions, entry.cause = outcomes.exception_names(chain), outcomes.cause(chain)
                entry.message, entry.example = outcomes.describe(call.excinfo.value)
                item.stash[_NO_VERDICT_KEY] = outcomes.no_verdict(chain)
            else:
                longrepr = report.longrepr
                entry.message = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))[-2000:]
        if report.failed:
            # No verdict on the answers: the grader's fault, a check that did
            # not run, a call past its limit (as the failure's exceptions say).
            entry.outcome = item.stash.get(_NO_VERDICT_KEY, "") or entry.outcome
        return report

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[f"<collect>{report.nodeid}"] = CheckOutcome(
                problem="", file=report.nodeid, outcome=COLLECT_ERROR, message=str(report.longrepr)[-3000:])


#: The outcome the exceptions of a check's first recorded failure give it ("": none).
_NO_VERDICT_KEY = pytest.StashKey[str]()


class ProgressReporter:
    """Tells the engine as each problem starts (how many checks it has here)
    and as each check ends (its outcome): events that only inform (a pytest plugin)."""

    def __init__(self, layout: Layout, pipe: ResultsPipe) -> None:
        self.layout, self.pipe = layout, pipe
        self.checks: dict[str, int] = {}  # each problem's checks in this process (after collection)
        self.begun: set[str] = set()  # problems whose start the engine has been told

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.checks = {}
        for it in session.items:
            problem = self.layout.problem(it)
            self.checks[problem] = self.checks.get(problem, 0) + 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        problem = self.layout.problem(item)
        if problem and problem not in self.begun:
            self.begun.add(problem)
            self.pipe.send({"event": "start", "problem": problem, "checks": self.checks.get(problem, 0)})
        try:
            return (yield)
        finally:
            if problem:
                entry = item.stash.get(OUTCOME_KEY, None)
                self.pipe.send({"event": "check", "problem": problem,
                                "outcome": entry.outcome if entry is not None else "error"})


class ResultsSender:
    """Sends each problem's results as its last check ends (its worker retired
    first, so that every CPU second it used is in them), and the run's own
    figures at its end (a pytest plugin)."""

    def __init__(self, spec: GroupSpec, layout: Layout, impl: RemoteImpl, watch: ScratchWatch,
                 recorder: OutcomeRecorder, pipe: ResultsPipe, cuda: bool) -> None:
        self.spec, self.layout, self.impl, self.watch = spec, layout, impl, watch
        self.recorder, self.pipe, self.cuda = recorder, pipe, cuda
        self.start = time.monotonic()
        self.cpu_at_start = _own_cpu()  # this process's imports and start-up, until its session starts
        self.sent: set[str] = set()  # problems whose results the engine has been sent

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        try:
            return (yield)
        finally:
            problem = self.layout.problem(item)
            if problem and (nextitem is None or self.layout.problem(nextitem) != problem):  # problem by problem
                self.finish(problem)

    def finish(self, problem: str) -> None:
        """Send ``problem``'s results (once): its checks and its worker record."""
        if problem in self.sent:
            return
        self.sent.add(problem)
        self.impl.finish(problem)
        results = RunResults(checks=self.recorder.of(problem),
                             problems={problem: self.impl.states[problem].record()}, cuda=self.cuda)
        self.pipe.send({"event": "end", "problem": problem, "results": json.loads(results.to_json())})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for p in self.spec.problems:  # (a problem none of whose checks ran: collected none, say)
            self.finish(p.name)
        self.watch.stop()
        self.impl.close()
        results = RunResults(
            checks=self.recorder.collect_errors(), cuda=self.cuda,
            scratch={"peak_bytes": self.watch.peak_bytes, "peak_entries": self.watch.peak_entries},
            session_time=round(time.monotonic() - self.start, 4),
            cost=Cost(startup=round(self.cpu_at_start, 3), trusted=round(_own_cpu(), 3),
                      servers=self.impl.servers, server_start=round(self.impl.server_cpu, 3),
                      workers=sum(st.workers for st in self.impl.states.values()),
                      seal=round(self.impl.seal_cpu, 3)))
        self.pipe.send({"event": "session", "results": json.loads(results.to_json())})
        self.pipe.close()


class GpuLock:
    """One GPU problem per device (grader/mfu/gpulock.py): the device's lock
    is held from the first check of a GPU problem to its last; a problem that
    could not get it is not graded (a pytest plugin, registered only where a
    GPU problem runs: ``device`` "cuda", or "cpu" for the CPU standing in)."""

    def __init__(self, layout: Layout, problems: list[str], device: str) -> None:
        self.layout, self.problems, self.device = layout, problems, device
        self.held: tuple[str, contextlib.ExitStack] | None = None  # (problem, what releases it)
        self.busy: dict[str, str] = {}  # problems that could not get the device, and why

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        """Outside every other wrapper (where RemoteImpl.enter starts the
        problem's clock, and the check is timed) and outside pytest-timeout's
        per-test timer, so waiting for another grading's GPU problem costs this
        problem none of its time."""
        problem = self.layout.problem(item)
        if self.held is not None and self.held[0] != problem:
            self.release()
        if problem in self.problems and self.held is None and problem not in self.busy:
            self._acquire(problem)
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        busy = self.busy.get(self.layout.problem(item))
        if busy:
            raise GraderFault(f"not graded: {busy}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.release()  # (the kernel would drop it at exit anyway)

    def _acquire(self, problem: str) -> None:
        from grader.mfu import gpulock

        stack = contextlib.ExitStack()
        try:
            stack.enter_context(gpulock.device_lock(_device_key(self.device), timeout=gpulock.WAIT_SECONDS))
        except gpulock.DeviceBusy as e:
            self.busy[problem] = str(e)
            return
        self.held = (problem, stack)

    def release(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held[1].close()


def _device_key(device: str) -> str:
    import torch

    from grader.mfu import gpulock

    return gpulock.device_key(torch.cuda.current_device()) if device == "cuda" else gpulock.STAND_IN_KEY


def _limit_own_memory(limit: int, cuda: bool) -> None:
    """Cap this trusted process's data (private writable memory: the heap and
    every anonymous mapping, not mere address-space reservations, which grow
    with the number of CPUs). Soft limit only: the workers it starts inherit
    it and lift it first thing. Whatever a reply makes the checks allocate then
    ends this run with an error, not the machine. Not with CUDA."""
    if not limit or cuda:
        return
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, AttributeError, ValueError, OSError):  # not enforceable here: nothing to cap with
        pass


def _own_cpu() -> float:
    """This process's own CPU seconds so far (every thread; not its children's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def hidden_seed(run_seed: int, nodeid: str) -> int:
    """The seed of one hidden check's hypothesis draws: the run's seed (recorded
    in the instructors' JSON; ``--seed`` replays it) mixed with the check's id,
    so each check draws its own inputs and no two runs draw the same ones."""
    return int.from_bytes(hashlib.sha256(f"{run_seed}:{nodeid}".encode()).digest()[:8], "big")

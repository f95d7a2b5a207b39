"""The grader's pytest plugin, loaded with ``-p grader.plugin`` in the trusted
pytest process that :mod:`grader.groups` starts.

Nothing happens unless :data:`grader.protocol.PLAN_ENV` names a
:class:`grader.protocol.GroupSpec` file (written by the engine). Then
``pytest_configure`` puts a :class:`grader.sandbox.remote.RemoteImpl` into
``config.stash[IMPL_KEY]`` before tests/plugin.py would build a LocalImpl, so
the very same public tests and hidden checks run against the sandboxed
worker, and registers :class:`Grading`. At collection it finds each check's
place once (:data:`PLACE`: its problem, its file, its rank in the rubric's
order) and runs the checks problem by problem. Each check then goes through
these steps, in this order (:meth:`Grading.pytest_runtest_protocol`):

1. the device's lock (:class:`grader.mfu.gpulock.GpuLock`), only for a GPU
   problem where GPU problems run (on CUDA, or on the CPU standing in): taken
   before its first check, let go after its last; the wait is outside every
   clock of the check, so waiting for another grading costs it none of its time;
2. before a problem's first check, the ``start`` event (how many checks it has
   here; events that only inform, :mod:`grader.report.progress`);
3. the check itself, timed alone: duration (setup + call + teardown, on this
   trusted process's monotonic clock: nothing the worker reports about time is
   used) and the CPU seconds the problem's workers used meanwhile (read from
   outside). Its setup tells the RemoteImpl which problem it belongs to; hidden
   checks draw from the run's seed (:func:`hidden_seed`); ``gpu``-marked checks
   are skipped where CUDA is unavailable ("not run on a GPU"), but for a GPU
   problem's when the CPU stands in for the GPU (:func:`gpu_device`). Its
   :class:`grader.protocol.CheckOutcome` (in ``item.stash``) records its
   outcome and failure (:mod:`grader.outcomes`): a check ended by an exception
   that says its own outcome (:attr:`grader.sandbox.errors.WorkerError.outcome`:
   a grader error, a check not run, a timeout) gets it, never "failed"; for
   hidden checks, the public test their ``extends`` marker names and the kind
   of input they declared with ``input_kind`` (read here, on the trusted side:
   the submission's worker never sees the test items);
4. the ``check`` event (its outcome);
5. after a problem's last check, its results (a
   :class:`grader.protocol.ProblemRun`: its checks and its worker record, the
   worker retired first so that every CPU second it used is in them): the
   ``end`` event, so the engine scores and reports each problem as it comes
   and a run stopped from outside keeps what it finished.

At the session's end come the run's own figures (its cost: the ``session``
event). Every event goes over the inherited file descriptor ``results_fd``
(:class:`ResultsPipe`; a pipe: there is no results file a submission could
find and forge), one JSON line each (:mod:`grader.protocol`, "events").
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from grader import outcomes
from grader.mfu.gpulock import GpuLock
from grader.protocol import COLLECT_ERROR, PLAN_ENV, CheckOutcome, Cost, GroupSpec, ProblemRun
from grader.rubric import is_hidden
from grader.sandbox.errors import GraderFault
from grader.util import cuda_available
from tests.plugin import IMPL_KEY

if TYPE_CHECKING:
    from grader.sandbox.remote import RemoteImpl
    from grader.sandbox.scratch import ScratchWatch

#: The name the run's :class:`Grading` is registered under.
RUN_PLUGIN = "grader-run"


@dataclass(frozen=True)
class Place:
    """Where a check belongs: its problem, its check file as the spec names it,
    and its rank (problem's, file's within the problem). A stray test (in no
    problem's file) has problem "", its node id as file, and ranks last."""

    problem: str
    file: str
    rank: tuple[int, int]


#: Each check's :class:`Place`, found once at collection.
PLACE = pytest.StashKey[Place]()
#: Each check's :class:`CheckOutcome`, on its test item.
OUTCOME_KEY = pytest.StashKey[CheckOutcome]()
#: The outcome the exceptions of a check's first recorded failure give it ("": none).
_NO_VERDICT_KEY = pytest.StashKey[str]()


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
    gpu = GpuLock(spec.gpu_lock_problems if device else (), device)
    config.pluginmanager.register(Grading(spec, impl, watch, ResultsPipe(spec.results_fd), gpu, device),
                                  RUN_PLUGIN)


def gpu_device(config: pytest.Config) -> str:
    """Where this run's GPU problems run: "cuda", "cpu" where the CPU stands
    in for the GPU (the grader's ``--cpu-stand-in``, without CUDA), "" where
    they do not run. Outside the grader (pytest on the hidden checks): "cuda"
    where CUDA is available."""
    run = config.pluginmanager.get_plugin(RUN_PLUGIN)
    if isinstance(run, Grading):
        return run.gpu_device
    return "cuda" if cuda_available() else ""


class Layout:
    """Which problem each check file of a group spec belongs to."""

    def __init__(self, spec: GroupSpec) -> None:
        #: each check file (resolved) -> (problem, problem's rank, file's rank within the problem)
        self.files: dict[str, tuple[str, int, int]] = {
            str((Path(spec.repo) / f).resolve()): (p.name, i, j)
            for i, p in enumerate(spec.problems) for j, f in enumerate(p.files)}
        self.problem_files = {p.name: p.files for p in spec.problems}

    def place(self, item: pytest.Item) -> Place:
        """The place of a test item (resolves its path: once per check, at collection)."""
        found = self.files.get(str(Path(str(item.fspath)).resolve()))
        if found is None:
            return Place("", item.nodeid, (10**6, 0))
        problem, rank, index = found
        return Place(problem, self.problem_files[problem][index], (rank, index))


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


class Grading:
    """The grader's run of the checks (a pytest plugin: its methods are the
    hooks; the module docstring lists a check's steps)."""

    def __init__(self, spec: GroupSpec, impl: RemoteImpl, watch: ScratchWatch, pipe: ResultsPipe, gpu: GpuLock,
                 gpu_device: str) -> None:
        self.spec, self.impl, self.watch, self.pipe, self.gpu = spec, impl, watch, pipe, gpu
        self.gpu_device = gpu_device
        self.layout = Layout(spec)
        self.cpu_at_start = _own_cpu()  # this process's imports and start-up, until its session starts
        self.outcomes: dict[str, CheckOutcome] = {}  # node id -> outcome, in the order they ran
        self.checks: Counter[str] = Counter()  # each problem's checks in this process (after collection)
        self.begun: set[str] = set()  # problems whose start the engine has been told
        self.sent: set[str] = set()  # problems whose results the engine has been sent

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
        for it in items:
            it.stash[PLACE] = self.layout.place(it)
        items.sort(key=lambda it: it.stash[PLACE].rank)  # stable: file order kept within a problem

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.checks = Counter(it.stash[PLACE].problem for it in session.items)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        """A check's steps, in the module docstring's order. (tryfirst: outside
        other plugins' wrappers, pytest-timeout's per-test timer among them.)"""
        problem = item.stash[PLACE].problem
        self.gpu.hold(problem)  # 1. (may wait: before any clock starts)
        if problem and problem not in self.begun:  # 2.
            self.begun.add(problem)
            self.pipe.send({"event": "start", "problem": problem, "checks": self.checks[problem]})
        # 3. Timed from here: worker start-up included where this is the first
        # check of its problem (that is where the time goes).
        start, cpu = time.monotonic(), self.impl.cpu_used(problem) if problem else 0.0
        try:
            return (yield)
        finally:
            entry = item.stash.get(OUTCOME_KEY, None)
            if entry is not None:
                entry.duration = round(time.monotonic() - start, 4)
                if problem:
                    entry.cpu = round(self.impl.cpu_used(problem) - cpu, 4)
            if problem:
                self.pipe.send({"event": "check", "problem": problem,  # 4.
                                "outcome": entry.outcome if entry is not None else "error"})
                if nextitem is None or nextitem.stash[PLACE].problem != problem:
                    self._send_results(problem)  # 5.

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        place = item.stash[PLACE]
        self.impl.enter(place.problem)
        if place.problem and is_hidden(place.file) and hasattr(item, "obj") and hasattr(item.obj, "hypothesis"):
            # Hidden checks draw fresh inputs each run (a leak is not replayable);
            # public tests stay derandomized (students reproduce their failures).
            from hypothesis import seed

            seed(hidden_seed(self.spec.seed, item.nodeid))(item.obj)
        if item.get_closest_marker("gpu") is not None and self.gpu_device != "cuda" \
                and not (self.gpu_device == "cpu" and place.problem in self.spec.gpu_lock_problems):
            pytest.skip("needs a CUDA device: not run on a GPU")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        busy = self.gpu.busy_reason(item.stash[PLACE].problem)
        if busy:
            raise GraderFault(f"not graded: {busy}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        entry = self.outcome_of(item)
        entry.input_kind = outcomes.input_kind_of(item) or entry.input_kind
        entry.figures = outcomes.figures_of(item) or entry.figures
        if report.failed:
            entry.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and entry.outcome == "passed":
            entry.outcome = "skipped"
        if (report.failed or report.skipped) and not entry.message:
            if call.excinfo is not None and report.failed:
                chain = outcomes.chain(call.excinfo.value)
                entry.cause = outcomes.cause(chain)
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

    def outcome_of(self, item: pytest.Item) -> CheckOutcome:
        """The check's outcome, made on its first report (a check that never
        reported has none: its ``check`` event says "error")."""
        entry = item.stash.get(OUTCOME_KEY, None)
        if entry is None:
            place = item.stash[PLACE]
            entry = item.stash[OUTCOME_KEY] = self.outcomes[item.nodeid] = CheckOutcome(
                test=item.nodeid, problem=place.problem, file=place.file,
                gpu_marked=item.get_closest_marker("gpu") is not None, extends=outcomes.extends_of(item))
        return entry

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[f"<collect>{report.nodeid}"] = CheckOutcome(
                test=f"<collect>{report.nodeid}", problem="", file=report.nodeid, outcome=COLLECT_ERROR,
                message=str(report.longrepr)[-3000:])

    def of(self, problem: str) -> dict[str, CheckOutcome]:
        """``problem``'s checks, after the collect errors (which belong to every problem)."""
        return {**self.collect_errors(), **{k: v for k, v in self.outcomes.items() if v.problem == problem}}

    def collect_errors(self) -> dict[str, CheckOutcome]:
        return {k: v for k, v in self.outcomes.items() if v.outcome == COLLECT_ERROR}

    def _send_results(self, problem: str) -> None:
        """Send ``problem``'s results (once): its checks and its worker record."""
        if problem in self.sent:
            return
        self.sent.add(problem)
        self.impl.finish(problem)
        run = ProblemRun(problem, self.spec.hidden, list(self.of(problem).values()),
                         self.impl.states[problem].record())
        self.pipe.send({"event": "end", "problem": problem, "run": run.to_json()})

    def _send_session(self) -> None:
        """Send the run's own figures (its cost, the scratch folder's peaks)."""
        cost = Cost(startup=round(self.cpu_at_start, 3), trusted=round(_own_cpu(), 3),
                    servers=self.impl.servers, server_start=round(self.impl.server_cpu, 3),
                    workers=sum(st.workers for st in self.impl.states.values()), seal=round(self.impl.seal_cpu, 3),
                    scratch_peak_bytes=self.watch.peak_bytes, scratch_peak_entries=self.watch.peak_entries)
        self.pipe.send({"event": "session", "cost": asdict(cost)})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for p in self.spec.problems:  # (a problem none of whose checks ran: collected none, say)
            self._send_results(p.name)
        self.watch.stop()
        self.impl.close()
        self._send_session()
        self.pipe.close()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.gpu.release()  # (the kernel would drop it at exit anyway)


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

"""The grader's pytest plugin, loaded with ``-p grader.plugin`` in the trusted
pytest process that :mod:`grader.groups` starts.

It does nothing unless :data:`grader.protocol.PLAN_ENV` names a plan file (a
:class:`grader.protocol.Plan`, written by the engine). Then its
``pytest_configure``:

* puts a :class:`grader.sandbox.remote.RemoteImpl` into ``config.stash[IMPL_KEY]``
  before tests/plugin.py would build a LocalImpl, so the very same public tests
  and hidden checks run against the sandboxed worker;
* registers a :class:`GraderRun`, which holds this run's state and hooks, and:

  * runs the tests problem by problem (the rubric's order), telling the
    RemoteImpl which problem each test belongs to;
  * skips ``gpu``-marked tests where CUDA is unavailable ("not run on a GPU");
  * records every test's :class:`grader.protocol.CheckOutcome`: outcome,
    failure details, duration (setup + call + teardown, on this trusted
    process's monotonic clock: nothing the worker reports about time is used)
    and the CPU seconds the problem's workers used meanwhile (read from
    outside); a check stopped by a :class:`grader.sandbox.client.GraderFault`,
    :class:`grader.sandbox.client.NotRun` or :class:`grader.sandbox.client.WorkerTimeout` gets
    the outcome "grader error", "not run" or "timeout", never "failed",
    and for hidden checks the public test their ``extends`` marker names and the
    kind of input they declared with ``input_kind`` (read here, on the trusted
    side: the submission's worker never sees the test items);
  * tells the engine, over the inherited file descriptor ``results_fd`` (a
    pipe: there is no results file a submission could find and forge), one
    JSON line per event (:mod:`grader.protocol`, "events"): as each problem
    starts and each check ends (they only inform,
    :mod:`grader.report.progress`), and as each problem's last check ends its
    results, a :class:`grader.protocol.RunResults` with its checks and its
    worker record (timeouts, crashes, capped log), so the engine scores and
    reports each problem as it comes, and a run stopped from outside keeps
    what it finished; at the end, the run's own figures (its cost).
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

from grader.protocol import COLLECT_ERROR, PLAN_ENV, CheckOutcome, Cost, Plan, RunResults, WorkerRecord
from grader.rubric import is_hidden
from grader.util import cuda_available
from tests.plugin import IMPL_KEY

if TYPE_CHECKING:
    from grader.sandbox.remote import RemoteImpl
    from grader.sandbox.scratch import ScratchWatch

#: The name the run's :class:`GraderRun` is registered under.
RUN_PLUGIN = "grader-run"

#: Exceptions that end a check without a verdict on the submission's answers,
#: and the outcome each gives it (the first that applies).
_NOT_ANSWERS = (("GraderFault", "grader error"), ("NotRun", "not run"), ("WorkerTimeout", "timeout"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(PLAN_ENV)
    if not path:
        return
    plan = Plan.from_json(Path(path).read_text())
    from grader.sandbox.remote import RemoteImpl
    from grader.sandbox.scratch import ScratchWatch

    sandbox = plan.sandbox.sandbox()
    if sandbox.mode == "uid":  # the working copy and scratch to the worker's group; tmp_path shared as under bwrap
        from grader.sandbox.uidsandbox import hand_over, open_pytest_temp_dirs

        hand_over(Path(plan.work), Path(plan.scratch), sandbox.gid)
        open_pytest_temp_dirs()
    impl = RemoteImpl(
        plan.name, sandbox, Path(plan.work), Path(plan.scratch),
        problems={p.name: p.cpu_budget for p in plan.problems},
        reference_cpu={p.name: p.reference_cpu for p in plan.problems},
        call_cpu=plan.call_cpu, start_cpu=plan.start_cpu, wall_factor=plan.wall_factor, hidden=plan.hidden,
        max_reply=sandbox.limits.reply_bytes,
    )
    config.stash[IMPL_KEY] = impl
    watch = ScratchWatch(Path(plan.scratch), sandbox.limits, impl.stop_workers).start()
    _limit_own_memory(sandbox.limits.trusted_memory_bytes, gpu=sandbox.gpu)
    config.pluginmanager.register(GraderRun(plan, impl, watch, cuda_available()), RUN_PLUGIN)


class GraderRun:
    """One trusted pytest process's grading run: its plan, its RemoteImpl, the
    scratch folder's watch and every check's outcome so far (a pytest plugin:
    its methods are the hooks)."""

    def __init__(self, plan: Plan, impl: RemoteImpl | None, watch: ScratchWatch | None, cuda: bool) -> None:
        self.plan, self.impl, self.watch, self.cuda = plan, impl, watch, cuda
        self.start = time.monotonic()
        self.outcomes: dict[str, CheckOutcome] = {}
        #: each check file (resolved) -> (problem, problem's rank, file's rank within the problem)
        self.files: dict[str, tuple[str, int, int]] = {
            str((Path(plan.repo) / f).resolve()): (p.name, i, j)
            for i, p in enumerate(plan.problems) for j, f in enumerate(p.files)}
        self.problem_files = {p.name: p.files for p in plan.problems}
        self.gpu_lock: tuple[str, contextlib.ExitStack] | None = None  # (problem, what releases it)
        self.gpu_busy: dict[str, str] = {}  # problems that could not get the device, and why
        self.checks: dict[str, int] = {}  # each problem's checks in this process (after collection)
        self.begun: set[str] = set()  # problems whose start the engine has been told
        self.sent: set[str] = set()  # problems whose results the engine has been sent
        self.cpu_at_start = _own_cpu()  # this process's imports and start-up, until its session starts

    def where(self, item: pytest.Item) -> tuple[str, int, int]:
        """(problem, problem's rank, file's rank) of a test; ("", big, 0) for a stray one."""
        return self.files.get(str(Path(str(item.fspath)).resolve()), ("", 10**6, 0))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Grading is reproducible: derandomized public examples (hidden checks
        draw from the run's recorded seed, see :func:`hidden_seed`), no example
        database (a regrade gives the same verdict, whatever was graded before),
        and fast on failures (no shrinking)."""
        from hypothesis import Phase, settings

        base = settings.get_profile(self.plan.profile)
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
        items.sort(key=lambda it: self.where(it)[1:])  # stable: file order kept within a problem
        self.checks = {}
        for it in items:
            problem = self.where(it)[0]
            self.checks[problem] = self.checks.get(problem, 0) + 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        problem, _, index = self.where(item)
        assert self.impl is not None
        self.impl.enter(problem)
        if problem and is_hidden(self.problem_files[problem][index]) and hasattr(item, "obj") \
                and hasattr(item.obj, "hypothesis"):
            # Hidden checks draw fresh inputs each run (a leak is not replayable);
            # public tests stay derandomized (students reproduce their failures).
            from hypothesis import seed

            seed(hidden_seed(self.plan.seed, item.nodeid))(item.obj)
        if item.get_closest_marker("gpu") is not None and not self.cuda:
            pytest.skip("needs a CUDA device: not run on a GPU")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        """Hold a GPU problem's device lock (:meth:`hold_gpu_lock`), then time each
        test on the trusted side (worker start-up included where the test is the
        first of its problem: that is where the time goes); after a problem's
        last test, send its results."""
        self.hold_gpu_lock(item)
        problem = self.where(item)[0] if self.impl is not None else ""
        if problem and problem not in self.begun:
            self.begun.add(problem)
            self.send({"event": "start", "problem": problem, "checks": self.checks.get(problem, 0)})
        start, cpu = time.monotonic(), self.impl.cpu_used(problem) if problem and self.impl else 0.0
        try:
            return (yield)
        finally:
            entry = self.outcomes.get(getattr(item, "nodeid", ""))
            if entry is not None:
                entry.duration = round(time.monotonic() - start, 4)
                if problem and self.impl is not None:
                    entry.cpu = round(self.impl.cpu_used(problem) - cpu, 4)
            if problem:
                self.send({"event": "check", "problem": problem,
                           "outcome": entry.outcome if entry is not None else "error"})
                if nextitem is None or self.where(nextitem)[0] != problem:  # items run problem by problem
                    self.finish(problem)

    def send(self, event: dict[str, Any]) -> None:
        """One event line to the engine (grader/protocol.py, "events")."""
        data = memoryview(json.dumps(event).encode() + b"\n")
        while data:  # a pipe: written whole, however long (the engine reads as it comes)
            data = data[os.write(self.plan.results_fd, data):]

    def finish(self, problem: str) -> None:
        """Send ``problem``'s results (once): its checks and its worker record,
        its worker retired first so that every CPU second it used is in it."""
        if problem in self.sent or self.impl is None:
            return
        self.sent.add(problem)
        self.impl.finish(problem)
        st = self.impl.states[problem]
        collect = {k: v for k, v in self.outcomes.items() if v.outcome == COLLECT_ERROR}
        results = RunResults(
            checks={**collect, **{k: v for k, v in self.outcomes.items() if v.problem == problem}},
            problems={problem: WorkerRecord(
                calls=st.calls, crashes=st.crashes, timeouts=st.timeouts, cut=st.cut, fault=st.fault,
                cpu_used=round(self.impl.cpu_used(problem), 4), cpu_budget=st.cpu_budget,
                reference_cpu=st.reference_cpu, seccomp=st.seccomp, log=bytes(st.log).decode("utf-8", "replace"),
                log_dropped=st.log_dropped, started=bool(st.started), workers=st.workers,
                peak_bytes=st.peak_bytes)},
            cuda=self.cuda)
        self.send({"event": "end", "problem": problem, "results": json.loads(results.to_json())})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        busy = self.gpu_busy.get(self.where(item)[0])
        if busy:
            from grader.sandbox.client import GraderFault

            raise GraderFault(f"not graded: {busy}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        problem, _, index = self.where(item)
        entry = self.outcomes.get(item.nodeid)
        if entry is None:
            entry = self.outcomes[item.nodeid] = CheckOutcome(
                problem=problem, file=self.problem_files[problem][index] if problem else item.nodeid,
                gpu=item.get_closest_marker("gpu") is not None, extends=_extends(item))
        entry.input_kind = _input_kind(item) or entry.input_kind
        if report.failed:
            entry.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and entry.outcome == "passed":
            entry.outcome = "skipped"
        if (report.failed or report.skipped) and not entry.message:
            if call.excinfo is not None and report.failed:
                entry.exceptions = _exception_names(call.excinfo.value, set())
                entry.message, entry.example = _describe(call.excinfo.value)
            else:
                longrepr = report.longrepr
                entry.message = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))[-2000:]
        if report.failed:
            # No verdict on the answers: the grader's fault, a check that did
            # not run, a call past its limit (the first that applies).
            for name, outcome in _NOT_ANSWERS:
                if name in entry.exceptions:
                    entry.outcome = outcome
                    break
        return report

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[f"<collect>{report.nodeid}"] = CheckOutcome(
                problem="", file=report.nodeid, outcome=COLLECT_ERROR, message=str(report.longrepr)[-3000:])

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        assert self.impl is not None and self.watch is not None
        for p in self.plan.problems:  # (a problem none of whose checks ran: collected none, say)
            self.finish(p.name)
        self.watch.stop()
        self.impl.close()
        results = RunResults(
            checks={k: v for k, v in self.outcomes.items() if v.outcome == COLLECT_ERROR}, cuda=self.cuda,
            scratch={"peak_bytes": self.watch.peak_bytes, "peak_entries": self.watch.peak_entries},
            session_time=round(time.monotonic() - self.start, 4),
            cost=Cost(startup=round(self.cpu_at_start, 3), trusted=round(_own_cpu(), 3),
                      servers=self.impl.servers, server_start=round(self.impl.server_cpu, 3),
                      workers=sum(st.workers for st in self.impl.states.values()),
                      seal=round(self.impl.seal_cpu, 3)))
        self.send({"event": "session", "results": json.loads(results.to_json())})
        os.close(self.plan.results_fd)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.release_gpu_lock()  # (the kernel would drop it at exit anyway)

    # -------------------------------------------------------------- one GPU problem per device (grader/mfu/gpulock.py)
    def hold_gpu_lock(self, item: pytest.Item) -> None:
        """Hold the device's lock from the first check of a GPU problem to its last.

        Called from the runtest-protocol wrapper, outside setup (where
        RemoteImpl.enter starts the problem's clock) and outside pytest-timeout's
        per-test timer, so waiting for another grading's GPU problem costs this
        problem none of its time.
        """
        if not self.cuda:
            return
        problem = self.where(item)[0]
        if self.gpu_lock is not None and self.gpu_lock[0] != problem:
            self.release_gpu_lock()
        if problem in self.plan.gpu_problems and self.gpu_lock is None and problem not in self.gpu_busy:
            self._acquire_gpu_lock(problem)

    def _acquire_gpu_lock(self, problem: str) -> None:
        from grader.mfu import gpulock

        stack = contextlib.ExitStack()
        try:
            stack.enter_context(gpulock.device_lock(_device_key(), timeout=gpulock.WAIT_SECONDS))
        except gpulock.DeviceBusy as e:
            self.gpu_busy[problem] = str(e)
            return
        self.gpu_lock = (problem, stack)

    def release_gpu_lock(self) -> None:
        held, self.gpu_lock = self.gpu_lock, None
        if held is not None:
            held[1].close()


def _device_key() -> str:
    import torch

    from grader.mfu import gpulock

    return gpulock.device_key(torch.cuda.current_device())


def _limit_own_memory(limit: int, gpu: bool) -> None:
    """Cap this trusted process's data (private writable memory: the heap and
    every anonymous mapping, not mere address-space reservations, which grow
    with the number of CPUs). Soft limit only: the workers it starts inherit
    it and lift it first thing. Whatever a reply makes the checks allocate then
    ends this run with an error, not the machine. Not with CUDA."""
    if not limit or gpu:
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


def _exception_names(exc: BaseException | None, seen: set[int]) -> list[str]:
    if exc is None or id(exc) in seen:
        return []
    seen.add(id(exc))
    names = [type(exc).__name__]
    remote = getattr(exc, "remote_type", "")
    if remote:
        names.append(f"remote:{remote}")
    for sub in getattr(exc, "exceptions", ()) or ():
        names += _exception_names(sub, seen)
    return names + _exception_names(exc.__cause__, seen) + _exception_names(exc.__context__, seen)


def _describe(exc: BaseException) -> tuple[str, str]:
    """(message, falsifying example) of a failure."""
    message = f"{type(exc).__name__}: {exc}"
    notes = [str(n) for n in getattr(exc, "__notes__", []) or []]
    for sub in getattr(exc, "exceptions", ()) or ():  # hypothesis groups distinct failures
        notes += [str(n) for n in getattr(sub, "__notes__", []) or []]
    example = "\n".join(n for n in notes if n.startswith(("Falsifying", "Draw", "You can reproduce")))
    return message[:4000], example[:4000]


def _extends(item: pytest.Item) -> str:
    """The public test a hidden check names with ``@pytest.mark.extends(...)`` ("" if none)."""
    marker = item.get_closest_marker("extends")
    value = marker.args[0] if marker is not None and marker.args else ""
    return value if isinstance(value, str) else ""


def _input_kind(item: pytest.Item) -> dict[str, str]:
    """The facts a hidden check recorded with ``input_kind(...)`` (the last call wins)."""
    kinds = [v for k, v in item.user_properties if k == "input_kind" and isinstance(v, dict)]
    return {str(k): str(v) for k, v in kinds[-1].items()} if kinds else {}

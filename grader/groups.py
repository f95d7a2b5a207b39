"""Planning and running a grade's groups: which check files go to which
trusted pytest process, one process per group, then each problem's results
merged from the groups that ran its files.

**Planning.** The problems (a heavy one split into its check files) are split into K groups
run concurrently, one trusted pytest process each, with K = min(cores, check
files, memory slots of :func:`grader.sandbox.limits.worker_slots`) or the requested
number. Expected times (the reference's wall-clock seconds per check file in
``grader/budgets.toml``) only balance the groups; they never decide a verdict.

**Running.** Each group gets its own :class:`grader.protocol.Plan`, results pipe and
scratch folder; its pytest process loads :mod:`grader.plugin`, which routes
the tests' calls to one sandboxed worker per problem and writes
:class:`grader.protocol.RunResults` back over the pipe. Each problem's CPU
budget is computed here, for the files of it the group runs
(:func:`grader.sandbox.budgets.problem_budget`). A group that ends without results (a
crash, killed for memory, the hard time limit) yields a ``fatal`` record:
nothing the submission could cause (its code never runs in that process), so
its problems are grader errors rather than failures, and are regraded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from grader.protocol import PLAN_ENV, Plan, ProblemPlan, RunResults, SandboxSpec, WorkerRecord
from grader.report.progress import GradeProgress
from grader.rubric import Problem, Rubric, is_hidden
from grader.sandbox.budgets import Costs, problem_budget
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import LOG_CAP, worker_slots
from grader.sandbox.scratch import BASETEMP, GROUP_PREFIX
from grader.util import REPO, cores, memory_available

#: The expected seconds of a check file ``budgets.toml`` has no figure for.
UNMEASURED_FILE_SECONDS = 10.0

#: A problem with the check files it is planned to run (those that exist).
Planned = tuple[Problem, list[str]]

#: What the groups are made of: a problem with some of its check files (all of
#: them, unless the problem alone outweighs a group's fair share).
Unit = tuple[Problem, tuple[str, ...]]


def file_cost(f: str, costs: Costs, profile: str) -> float:
    """The expected seconds of check file ``f`` in ``profile``."""
    c = costs.file(profile, f)
    return c.seconds if c is not None else UNMEASURED_FILE_SECONDS


def units_of(planned: list[Planned], k: int, costs: Costs, profile: str) -> list[Unit]:
    """Whole problems (one worker each), except that a problem heavier than
    1/k of the total is split into its files (a second worker start is cheaper
    than one group waiting on it) when they are all public or all hidden.

    A problem with both is never split (the engine plans public and hidden
    files in separate phases, :func:`grader.groups.by_phase`; this holds for a
    caller that does not): its files in two groups would run at the same time,
    a worker that sees hidden inputs beside one whose answers reach students'
    failure messages."""
    total = sum(file_cost(f, costs, profile) for _, files in planned for f in files)
    out: list[Unit] = []
    for p, files in planned:
        one_kind = len({is_hidden(f) for f in files}) == 1
        if k > 1 and len(files) > 1 and one_kind and sum(file_cost(f, costs, profile) for f in files) > total / k:
            out += [(p, (f,)) for f in files]
        else:
            out.append((p, tuple(files)))
    return out


def parallelism(n_units: int, memory_bytes: int, requested: int | None = None) -> int:
    """K, the groups run at once: ``requested`` (when given) or the cores, never
    more than the check files nor the memory slots (each group has one worker at a
    time under ``memory_bytes``, plus its warm spare)."""
    want = requested if requested and requested > 0 else cores()
    return max(1, min(want, n_units, worker_slots(memory_bytes)))


def partition(units: list[Unit], k: int, costs: Costs, profile: str) -> list[list[Unit]]:
    """``units`` in ``k`` groups of about equal expected time (longest first,
    each to the lightest group). Within a group, the rubric's order is kept."""
    groups: list[list[Unit]] = [[] for _ in range(max(1, k))]
    load = [0.0] * len(groups)

    def cost(u: Unit) -> float:
        return sum(file_cost(f, costs, profile) for f in u[1])

    for u in sorted(units, key=lambda u: -cost(u)):  # stable: ties keep the rubric's order
        i = min(range(len(groups)), key=lambda j: (load[j], j))
        groups[i].append(u)
        load[i] += cost(u)
    order = {(p.name, f): i for i, (p, f) in enumerate(units)}
    return [sorted(g, key=lambda u: order[(u[0].name, u[1])]) for g in groups if g]


def group_plans(group: list[Unit]) -> list[Planned]:
    """One group's problems, each with its files in the group (a problem split
    into several units of the same group gets them back together)."""
    plan: dict[str, Planned] = {}
    for p, fs in group:
        plan.setdefault(p.name, (p, []))[1].extend(fs)
    return list(plan.values())


def run_groups(rub: Rubric, selected: list[Problem], plan: Plan, *, public_only: bool, parallel: int | None,
               cpu_budget: float | None, costs: Costs, speed: float, run: Path,
               progress: GradeProgress | None = None) -> tuple[dict[str, RunResults], list[str]]:
    """Run the selected problems' check files in K concurrent trusted pytest
    processes; return each planned problem's results (a problem absent was not
    run) and the groups' errors.

    ``plan`` is the run's plan without problems (each group gets its own copy
    with its problems, scratch folder and pipe); ``cpu_budget`` overrides every
    problem's budget (CPU seconds, as given); ``costs`` and ``speed`` are the
    reference's measured costs and this machine's speed (grader/sandbox/budgets.py);
    ``run`` is the run's temporary folder; ``progress``, when given, is told
    which process holds which problem and fed each process's progress events.
    """
    planned = [(p, p.check_files(REPO, public_only=public_only)) for p in selected]
    planned = [(p, files) for p, files in planned if files and not (p.gpu and not plan.sandbox.gpu)]
    if not planned:
        return {}, []
    # Every group of a phase runs at once; a phase starts when the one before it has ended.
    phases: list[list[list[Unit]]] = []
    for part in by_phase(planned):
        k = parallelism(sum(len(files) for _, files in part), plan.sandbox.limits.memory_bytes, parallel)
        phases.append(partition(units_of(part, k, costs, plan.profile), k, costs, plan.profile))
    groups = [g for phase in phases for g in phase]
    results: list[RunResults] = [RunResults() for _ in groups]
    failures: list[BaseException] = []
    s = rub.settings
    if progress is not None:
        progress.plan([[p.name for p, _ in group_plans(g)] for g in groups])

    def planned_problem(p: Problem, files: list[str]) -> ProblemPlan:
        budget, reference, _ = problem_budget(files, plan.profile, costs, slowdown=s.slowdown, floor=s.budget_floor,
                                              speed=speed, fixed=p.cpu_budget)
        if cpu_budget is not None:
            budget = cpu_budget
        return ProblemPlan(p.name, round(budget, 3), tuple(files), round(reference, 3), p.processes, p.gpu)

    def one(i: int, threads: int) -> None:
        problems = tuple(planned_problem(p, files) for p, files in group_plans(groups[i]))
        try:
            results[i] = run_pytest(rub, plan, problems, run / f"{GROUP_PREFIX}{i}", threads,
                                    progress=(lambda line: progress.event(i, line)) if progress else None)
        except BaseException as e:  # re-raised below, in the caller's thread
            failures.append(e)
        finally:
            if progress is not None:
                progress.group_ended(i)

    first = 0
    for phase in phases:
        indices = range(first, first + len(phase))
        first += len(phase)
        threads = max(1, cores() // len(phase))  # torch threads per process: the groups share the cores
        if len(phase) == 1:
            one(indices[0], threads)
        else:
            runners = [threading.Thread(target=one, args=(i, threads), daemon=True) for i in indices]
            for t in runners:
                t.start()
            for t in runners:
                t.join()
        if failures:
            raise failures[0]
    per_problem = {p.name: problem_results(p.name, files, [results[i] for i, g in enumerate(groups)
                                                           if any(q.name == p.name for q, _ in g)])
                   for p, files in planned}
    return per_problem, [r.error for r in results if r.error]


def by_phase(planned: list[Planned]) -> list[list[Planned]]:
    """The run's phases: every problem's public check files, then every
    problem's hidden ones (one phase where there is one kind only).

    No worker that has seen hidden inputs runs while one whose answers reach
    students' failure messages (a public check's) is alive: any channel between
    two sandboxes of one submission (a lock on a shared file, the page cache,
    the machine's load) could otherwise carry a hidden input of one problem into
    another problem's visible message. Hidden checks beside each other are
    harmless: nothing of theirs reaches a student-visible field."""
    public = [(p, [f for f in files if not is_hidden(f)]) for p, files in planned]
    hidden = [(p, [f for f in files if is_hidden(f)]) for p, files in planned]
    return [part for part in ([(p, f) for p, f in public if f], [(p, f) for p, f in hidden if f]) if part]


def run_pytest(rub: Rubric, base: Plan, problems: tuple[ProblemPlan, ...], run: Path,
               threads: int, progress: Callable[[bytes], None] | None = None) -> RunResults:
    """Run one trusted pytest process over ``problems``; return the plugin's
    results, or a ``fatal`` record saying why there are none. ``progress``, when
    given, gets each progress event line the process writes, as it comes."""
    run.mkdir(parents=True, exist_ok=True)
    run.chmod(0o711)  # a uid-isolated worker passes through to its scratch folder, lists nothing
    scratch = run / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    read_fd, write_fd = os.pipe()
    events_r, events_w = os.pipe() if progress is not None else (-1, -1)
    plan = replace(base, scratch=str(scratch), problems=problems, results_fd=write_fd, progress_fd=events_w)
    # The plan holds the hidden checks' seed: readable by the grader only.
    with open(os.open(run / "plan.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(plan.to_json())
    files = [f for p in problems for f in p.files]
    # No per-test wall-clock timeout (--timeout=0): on a busy machine a test
    # may take long without any fault of the submission, whose calls are
    # bounded by their CPU limits and wall-clock backstops in grader.sandbox.remote.
    argv = [sys.executable, "-m", "pytest", *files, "-p", "grader.plugin", "-q", "--no-header",
            "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--rootdir", str(REPO),
            "-c", str(REPO / "pyproject.toml"), f"--basetemp={scratch / BASETEMP}",
            "--hypothesis-profile", plan.profile, "--tb=no", "-o", "console_output_style=classic", "--timeout=0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRADER_", "HYPOTHESIS_"))}
    env.update({PLAN_ENV: str(run / "plan.json")}, HYPOTHESIS_PROFILE=plan.profile,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("OMP_NUM_THREADS", str(threads))  # an instructor's explicit setting wins
    chunks: list[bytes] = []

    def collect() -> None:
        with os.fdopen(read_fd, "rb") as f:
            while chunk := f.read(1 << 16):
                chunks.append(chunk)

    def relay() -> None:
        with os.fdopen(events_r, "rb") as f:
            for line in f:
                with contextlib.suppress(Exception):  # progress only informs: it never stops a grade
                    progress(line)  # type: ignore[misc]

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    relayer = threading.Thread(target=relay, daemon=True) if progress is not None else None
    if relayer is not None:
        relayer.start()
    hard_limit = hard_limit_of(plan)
    try:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, pass_fds=tuple(fd for fd in (write_fd, events_w) if fd >= 0),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        os.close(write_fd)
        if events_w >= 0:
            os.close(events_w)
    peak = _PeakMemory(proc.pid)
    try:
        out, _ = proc.communicate(timeout=hard_limit)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        killed = True
    finally:
        peak.stop()
    reader.join(timeout=30)
    if relayer is not None:
        relayer.join(timeout=30)
    text = out.decode("utf-8", "replace")
    try:
        return RunResults.from_json(b"".join(chunks)) if chunks else _no_results(killed, hard_limit, proc, text,
                                                                                 peak.bytes)
    except (ValueError, TypeError, AttributeError):
        return _no_results(killed, hard_limit, proc, text, peak.bytes)


def hard_limit_of(plan: Plan) -> float:
    """The wall-clock seconds a trusted pytest process may run before the
    engine stops it: far more than its problems' CPU budgets take on a very busy
    machine (every call within is bounded already; this catches the grader's
    own hang), plus the wait for a GPU another grading holds."""
    limit = 1800 + 4 * sum(p.cpu_budget for p in plan.problems)
    if plan.gpu_problems:  # waiting for another grading's GPU problem is not this run hanging
        from grader.mfu.gpulock import WAIT_SECONDS

        limit += WAIT_SECONDS
    return limit


class _PeakMemory:
    """The resident memory of the trusted pytest process, sampled every half
    second (so that a run the kernel killed for memory says how much it held)."""

    def __init__(self, pid: int) -> None:
        from grader.sandbox import proctree

        self.bytes = 0
        self._done = threading.Event()

        def sample() -> None:
            while not self._done.wait(0.5):
                p = proctree.read(pid)
                if p is not None and p.live:
                    self.bytes = max(self.bytes, p.rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def _no_results(killed: bool, hard_limit: float, proc: subprocess.Popen[bytes], text: str,
                peak: int) -> RunResults:
    held = f"; it held {peak / (1 << 20):.0f} MiB at its peak" if peak else ""
    if killed:
        why = f"the grader's test run ran past {hard_limit:g} s and was stopped"
    elif proc.returncode == -signal.SIGKILL:
        free = memory_available()
        why = (f"the grader's test run was killed by SIGKILL from outside (out of memory?{held}; "
               f"{free / (1 << 30):.1f} GiB of memory is available to the grader now)")
    else:
        why = f"the grader's test run ended without results (exit {proc.returncode}{held})"
    # Its output may hold what the submission said (failure messages of
    # hidden checks): it goes to the instructors' log, never to "error".
    return RunResults(error=why, log=text[-3000:], fatal=True)


def merge_records(records: list[WorkerRecord]) -> WorkerRecord:
    """One problem's worker record from the groups that ran its files."""
    if len(records) == 1:
        return records[0]
    seccomp = [r.seccomp for r in records if r.seccomp]
    log = "".join(r.log for r in records)
    return WorkerRecord(
        calls=sum(r.calls for r in records),
        crashes=[c for r in records for c in r.crashes],
        timeouts=[t for r in records for t in r.timeouts],
        cut="; ".join(dict.fromkeys(r.cut for r in records if r.cut)),
        fault="; ".join(dict.fromkeys(r.fault for r in records if r.fault)),
        cpu_used=sum(r.cpu_used for r in records),
        cpu_budget=sum(r.cpu_budget for r in records),
        reference_cpu=sum(r.reference_cpu for r in records),
        seccomp=next((v for v in seccomp if v != "on"), seccomp[0] if seccomp else ""),
        # One problem's log stays within one worker's cap, however many groups ran it.
        log=log[:LOG_CAP],
        log_dropped=sum(r.log_dropped for r in records) + max(0, len(log) - LOG_CAP),
        started=any(r.started for r in records),
    )


def problem_results(name: str, files: list[str], parts: list[RunResults]) -> RunResults:
    """Problem ``name``'s results from its groups' results: its checks in the
    order one process would have run them (its files' order), its worker
    records merged, ``fatal`` when any of its groups ended without results."""
    out = RunResults()
    checks = [item for o in parts for item in o.checks.items()]
    rank = {f: i for i, f in enumerate(files)}
    out.checks = dict(sorted(checks, key=lambda kv: rank.get(kv[1].file, len(files))))
    for o in parts:
        if o.fatal:
            out.fatal, out.error, out.log = True, o.error, o.log
    records = [o.problems[name] for o in parts if name in o.problems]
    if records:
        out.problems[name] = merge_records(records)
    return out


def base_plan(name: Path, work: Path, profile: str, sandbox: Sandbox, *, call_cpu: float, start_cpu: float,
              wall_factor: float, seed: int) -> Plan:
    """The run's plan, before a group fills in its problems, scratch folder and pipe."""
    return Plan(name=str(name), repo=str(REPO), work=str(work), scratch="", profile=profile, problems=(),
                sandbox=SandboxSpec.of(sandbox), call_cpu=call_cpu, start_cpu=start_cpu, wall_factor=wall_factor,
                results_fd=-1, seed=seed)


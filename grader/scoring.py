"""Scoring: verdicts and points from the checks' outcomes and the rubric.

Each check counts toward one item of its problem
(:meth:`grader.rubric.Problem.items_of`); an item earns its points when all its
checks ran and passed; a problem's score is the sum of its items', less any
withheld by a failed gate item. Each failed item carries its first failure as
a :class:`grader.protocol.Failure`, built here from trusted facts only (node
ids, the rubric, the public tests' source, the trusted test process's messages).

Three outcomes are no wrong answer and never carry a failure: a check that did
not run because the problem's CPU budget was spent ("not run": its item earns
nothing, as its checks did not all pass, but nothing of it is called wrong), a
fault of the machine or the grader ("grader error": not graded, regraded), and
a GPU check on a machine without one ("not run on a GPU"). A call that ran past
its own limit is a "timeout": the item's failure names it, with the limit.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

from grader.imports import NOT_IMPORTED
from grader.protocol import COLLECT_ERROR, IMPORT, CheckOutcome, Failure, ProblemRun, WorkerRecord
from grader.results import (
    ERROR,
    FAILED,
    GRADER_ERROR,
    NEEDS_GPU,
    NO_CHECKS,
    NO_CHECKS_YET,
    NOT_COUNTED,
    NOT_GRADED,
    NOT_RUN,
    NOT_RUN_GPU,
    PASSED,
    TIMEOUT,
    GradeResult,
    ItemResult,
    ProblemResult,
    fmt,
    item_text,
)
from grader.rubric import Item, Problem, function_name
from grader.util import REPO, printable


def score_problem(p: Problem, files: Sequence[str], runs: Sequence[ProblemRun], gpu_device: str, reveal: bool, *,
                  details: bool = True) -> ProblemResult:
    """Problem ``p``'s result from its phases' runs (``runs``: one per phase
    that ran it; ``files``: its check files that exist, this grade's);
    ``gpu_device`` is where GPU problems ran ("cuda"; "cpu": the CPU stood
    in for a GPU, :data:`STAND_IN_NOTE`; "": nowhere, they are "not run on a
    GPU"). Its public and hidden phases' worker records are kept apart where
    students read figures (those of its public checks only: the hidden run's
    are the instructors'), and combined where the problem needs one figure
    (:meth:`grader.protocol.WorkerRecord.combine`). Without ``details`` (a limit on
    probing, :mod:`grader.feedback`) a failed hidden check is said to have failed, nothing more."""
    if not files:
        return unavailable(p, NO_CHECKS, f"its check files do not exist yet ({', '.join(p.files)})", gpu_device)
    if p.gpu and not gpu_device:
        return unavailable(p, NOT_RUN_GPU, "", gpu_device)
    public = next((r.worker for r in runs if not r.hidden and r.worker is not None), None)
    hidden = next((r.worker for r in runs if r.hidden and r.worker is not None), None)
    broken = next((r.import_error for r in (public, hidden) if r is not None and r.import_error), "")
    if broken:  # (its checks were not run: grader.imports)
        return unavailable(p, ERROR, f"{NOT_IMPORTED} ({broken})", gpu_device)
    if lost := next((r.lost for r in runs if r.lost), ""):
        return unavailable(p, GRADER_ERROR, f"{NOT_GRADED} ({lost[:3000]})", gpu_device)
    res = _score_checks(p, files, checks_in_file_order(runs, files), reveal, public, hidden, details)
    if p.gpu and gpu_device == "cpu":
        res.output, res.stand_in = f"{STAND_IN_NOTE}\n{res.output}", True
    return res


#: What a GPU problem graded with the CPU standing in for the GPU says first.
STAND_IN_NOTE = ("graded on the CPU standing in for a GPU (--cpu-stand-in: a rehearsal of the GPU pipeline; "
                 "its verdicts are not a GPU's)")


def checks_in_file_order(runs: Sequence[ProblemRun], files: Sequence[str]) -> list[CheckOutcome]:
    """The checks of ``runs`` in the order of their ``files`` (as one process would
    run them, whichever phase came first: the rubric may interleave public and
    hidden files), each file's in the order they ran."""
    rank = {f: i for i, f in enumerate(files)}
    return sorted((c for r in runs for c in r.checks), key=lambda c: rank.get(c.file, len(files)))


def _score_checks(p: Problem, files: Sequence[str], outcomes: list[CheckOutcome], reveal: bool,
                  public: WorkerRecord | None, hidden: WorkerRecord | None, details: bool) -> ProblemResult:
    """Problem ``p``'s result from checks that ran (see :func:`score_problem`); each
    of its checks gets its rubric item."""
    records = [r for r in (public, hidden) if r is not None]
    state = WorkerRecord.combine(records) if records else None
    checks, collect_errors = [], []
    for c in outcomes:
        if c.outcome == COLLECT_ERROR and any(c.file.startswith(f) for f in files):
            collect_errors.append(f"{c.file}: {c.message}")
        elif c.problem == p.name:
            found = p.items_of(c.test, c.extends)
            c.item = found[0].name if len(found) == 1 else ""
            checks.append(c)
    res = ProblemResult(p.name, p.section, 0.0, p.points, FAILED, p.visibility, "", checks=checks, log=_log(public),
                        record=state)
    res.hidden_log = _log(hidden)
    if state is not None:
        res.cpu_budget, res.reference_cpu = round(state.cpu_budget, 3), round(state.reference_cpu, 3)
    res.cpu = round(public.cpu_used, 3) if public is not None else 0.0
    res.hidden_cpu = round(hidden.cpu_used, 3) if hidden is not None else 0.0
    res.not_run = sum(c.outcome == NOT_RUN for c in checks)
    if collect_errors:
        why = f"{NOT_GRADED} (the grader could not load its checks):\n" + "\n".join(collect_errors)[:3000]
        res.status, res.output = GRADER_ERROR, why
        res.items = [ItemResult(i.name, 0.0, i.points, GRADER_ERROR, note=NOT_GRADED) for i in p.items]
        return res
    res.items = [score_item(i, [c for c in checks if c.item in (i.name, "")], reveal, details) for i in p.items]
    for spec, gate in zip(p.items, res.items, strict=True):
        if spec.gate and gate.status != PASSED:
            for other in res.items:
                if other is not gate and other.score:
                    other.score, other.note = 0.0, f"not credited: it needs \"{gate.name}\", which did not pass"
    gpu_items = [i for i in res.items if i.status == NOT_RUN_GPU]
    for i in gpu_items:  # left out of every total, not failed
        i.max_score, i.not_counted = 0.0, i.max_score
    res.max_score = p.points - sum(i.not_counted for i in gpu_items)
    res.score = sum(i.score for i in res.items)
    ran = [c for c in checks if c.outcome not in _DID_NOT_RUN]
    gpu_skipped = [c for c in checks if c.outcome == "skipped" and c.gpu_marked]
    failed = [c for c in ran if c.outcome != PASSED]
    n_pub, n_hid = sum(not c.hidden for c in ran), sum(c.hidden for c in ran)
    counts = f"{len(ran)} checks ({n_pub} public, {n_hid} hidden)"
    note = f"; {len(gpu_skipped)} GPU checks not run on this machine" if gpu_skipped else ""
    unmapped = res.unmapped = sorted({function_name(c.test) for c in checks if not c.item})
    if not checks:
        res.status, res.output = GRADER_ERROR, f"{NOT_GRADED} (no checks were collected for this problem)"
        return res
    if len(gpu_items) == len(res.items):
        res.status, res.max_score, res.not_counted = NOT_RUN_GPU, 0.0, p.points
        res.output = f"{NEEDS_GPU}: all {len(gpu_skipped)} of its checks need a CUDA device, and this machine has none"
        return res
    if all(i.status in (PASSED, NOT_RUN_GPU) for i in res.items) and res.score == res.max_score:
        res.status, res.output = PASSED, f"passed all {counts}{note}"
        return res
    fault = state.fault if state is not None else ""
    cut, timeouts, crashes = (state.cut, state.timeouts, state.crashes) if state is not None else ("", [], [])
    fault = fault or next((_bare(c.message, p.name) for c in checks if c.outcome == GRADER_ERROR), "")
    if fault or any(i.status == GRADER_ERROR for i in res.items):
        res.status = GRADER_ERROR
    elif crashes or any(c.cause == IMPORT for c in failed):
        res.status = ERROR
    elif cut or timeouts or res.not_run:
        res.status = TIMEOUT
    lines = [f"{len(failed)} of {counts} failed{note}; {fmt(res.score)} of {fmt(res.max_score)} points."]
    if res.status == GRADER_ERROR:
        lines.insert(0, f"{NOT_GRADED} ({fault[:1500] or 'see the items below'})")
    if cut or res.not_run:
        lines.append(_budget_text(res, cut))
    for timeout in timeouts[:3]:
        lines.append(f"Timeout: {timeout[:500]}")
    if crashes:
        lines.append(f"The worker crashed: {crashes[0][:1500]}")
    if unmapped:
        lines.append(f"Checks the rubric maps to no single item (they count toward every item): {', '.join(unmapped)}")
    for i in res.items:
        if i.score < i.max_score and i.status != NOT_RUN_GPU:
            lines.append(item_text(i))
    res.output = "\n".join(lines)
    return res


def _bare(message: str, problem: str) -> str:
    """A grader fault's words without what its exception put first (its class,
    the problem, "not graded: "), which the problem's output says once already."""
    for prefix in ("GraderFault: ", f"{problem}: ", f"{NOT_GRADED_PREFIX} "):
        message = message.removeprefix(prefix)
    return message


#: How a grader fault's exception starts its message (grader/sandbox/remote.py, grader/plugin.py).
NOT_GRADED_PREFIX = "not graded:"
#: Check outcomes that are no verdict on the submission: the check did not run (to its end).
_DID_NOT_RUN = ("skipped", NOT_RUN, GRADER_ERROR)


def _log(record: WorkerRecord | None) -> str:
    if record is None:
        return ""
    return record.log + (f"\n[... {record.log_dropped} more bytes of output dropped]" if record.log_dropped else "")


def _budget_text(res: ProblemResult, cut: str) -> str:
    """What the student reads about a problem cut short: why, the CPU its code
    used against its budget and the reference's for the same checks (when the
    public checks were cut: the CPU of hidden checks is the submission's to
    steer, so it is never shown), and how many checks did not run."""
    why = cut or "the problem's CPU budget ran out"
    ref = f"; the reference uses {res.reference_cpu:.1f} CPU s for these checks on this machine" \
        if res.reference_cpu else ""
    used = f" (your code used {res.cpu:.1f} CPU s of its budget of {res.cpu_budget:.4g}{ref})"
    if any(c.outcome == NOT_RUN and c.hidden for c in res.checks):
        used = " (during its hidden checks)"
    return (f"Cut short: {why}{used}. {res.not_run} of its {len(res.checks)} checks did not run: the items "
            "they belong to earn nothing, those whose checks all ran and passed keep their points.")


def score_item(item: Item, checks: list[CheckOutcome], reveal: bool, details: bool = True) -> ItemResult:
    """An item earns its points when every check of it ran and passed. A wrong
    answer outranks a timeout, which outranks a grader error, which outranks
    checks that did not run: the item's status is the first that applies."""
    ran = [c for c in checks if c.outcome not in _DID_NOT_RUN]
    not_run = [c for c in checks if c.outcome == NOT_RUN]
    faults = [c for c in checks if c.outcome == GRADER_ERROR]
    failed = [c for c in ran if c.outcome != PASSED]
    res = ItemResult(item.name, 0.0, item.points, FAILED, len(ran), len(failed), not_run=len(not_run))
    wrong = [c for c in failed if c.outcome != TIMEOUT]
    if wrong:
        if any(c.cause for c in wrong):  # the submission's code did not load, or its worker crashed
            res.status = ERROR
        first = next((c for c in wrong if not c.hidden), None) or wrong[0]
        res.failure = first_failure(first, reveal, details)
        return res
    if failed:  # only timeouts
        res.status = TIMEOUT
        first = next((c for c in failed if not c.hidden), None) or failed[0]
        res.failure = first_failure(first, reveal, details)
        # The message is the grader's own account of the limit (no input, no
        # output of the submission): shown for hidden checks too, without the
        # example, unless their details are withheld.
        if details or not first.hidden:
            res.failure.message, res.failure.example = _clean(first.message, 1000), ""
        return res
    if faults:
        res.status, res.note = GRADER_ERROR, NOT_GRADED
        return res
    if not_run:
        res.status = NOT_RUN
        res.note = (f"{len(not_run)} of its {len(checks)} checks did not run (the problem was cut short before "
                    "them); it earns its points when they all run and pass")
        return res
    if not ran:
        if any(c.gpu_marked for c in checks):
            res.status, res.note = NOT_RUN_GPU, "its checks need a CUDA device, and this machine has none"
        else:
            res.status, res.note = GRADER_ERROR, f"{NOT_GRADED} (none of its checks ran)"
        return res
    res.status, res.score = PASSED, item.points
    return res


def unavailable(p: Problem, status: str, output: str, gpu_device: str) -> ProblemResult:
    """Problem ``p`` not graded (``status`` and why), or not run for want of a
    GPU (``gpu_device`` "": GPU problems do not run here). A problem that
    needs a GPU here, or has no checks yet, is left out of every total:
    max_score 0, its points in ``not_counted``."""
    if p.gpu and not gpu_device:
        status, output = NOT_RUN_GPU, f"{p.name} needs a CUDA device, and this machine has none"
    if status in NOT_COUNTED:
        head = NEEDS_GPU if status == NOT_RUN_GPU else NO_CHECKS_YET
        return ProblemResult(p.name, p.section, 0.0, 0.0, status, p.visibility, f"{head}: {output}",
                             not_counted=p.points,
                             items=[ItemResult(i.name, 0.0, 0.0, status, note=output, not_counted=i.points)
                                    for i in p.items])
    return ProblemResult(p.name, p.section, 0.0, p.points, status, p.visibility, output,
                         items=[ItemResult(i.name, 0.0, i.points, status, note=output) for i in p.items])


def total(result: GradeResult, elapsed: float) -> GradeResult:
    """Fill in the run's totals from its problems (``elapsed``: its seconds)."""
    result.execution_time = round(elapsed, 3)
    result.score = sum(p.score for p in result.problems)
    result.max_score = sum(p.max_score for p in result.problems)  # 0 for those not counted
    result.gpu_points_not_run = sum(p.not_counted for p in result.problems if p.status == NOT_RUN_GPU) + sum(
        i.not_counted for p in result.problems if p.status != NOT_RUN_GPU for i in p.items if i.status == NOT_RUN_GPU)
    result.points_without_checks = sum(p.not_counted for p in result.problems if p.status == NO_CHECKS)
    return result


def strip_controls(result: GradeResult) -> None:
    """The engine's own run-level strings made printable (:func:`grader.util.printable`).
    Everything a grading run reports per check was normalised once already, where
    it reached the engine (:meth:`grader.protocol.ProblemRun.from_json`); the
    trusted run's output that stands in for a run without results (a log, for
    instructors) did not cross there and is normalised here."""
    result.notes = [printable(n) for n in result.notes]
    result.error = printable(result.error)
    for p in result.problems:
        p.log = printable(p.log)


# --------------------------------------------------------------------------- the first failure, as fields
def _clean(text: str, limit: int) -> str:
    """``text`` printable (a message may quote a string the submission returned), cut to ``limit``."""
    text = printable(text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_WORD_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _parameters(test: str) -> list[str]:
    """The word-like parts of a node id's parametrize ids ("Adam", "torch.float16"):
    numbers, reprs and pytest's generated ``args3`` could carry values or say nothing."""
    if "[" not in test:
        return []
    ids = test.split("[", 1)[1].rstrip("]")
    return [part for part in ids.split("-") if _WORD_ID.fullmatch(part) and not re.fullmatch(r"[a-z]+\d+", part)]


_DOCS: dict[str, dict[str, str]] = {}


def public_docstring(test: str) -> str:
    """The first docstring line of the public test ``tests/test_x.py::test_y`` (read
    from the trusted source, never imported); "" when it has none."""
    path, _, name = test.split("[")[0].partition("::")
    if not path.startswith("tests/") or ".." in Path(path).parts:
        return ""
    if path not in _DOCS:
        try:
            tree = ast.parse((REPO / path).read_text())
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        _DOCS[path] = {f.name: (ast.get_docstring(f) or "").strip().split("\n\n")[0].replace("\n", " ")
                       for f in tree.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    return _DOCS[path].get(name, "")


def first_failure(c: CheckOutcome, reveal: bool, details: bool = True) -> Failure:
    """Check ``c``'s failure as fields; a hidden one's message and example only when revealed,
    and nothing of it but its outcome without ``details`` (the test left empty).
    The reproduction line is the command the student runs in their own checkout
    (``pytest tests/test_x.py::test_y``: the default ``--impl`` is their ``student/``)."""
    if c.hidden and not details:
        return Failure(test="", hidden=True, outcome=c.outcome, withheld=True)
    prop = c.test.split("[")[0] if not c.hidden else c.extends
    f = Failure(test=c.test, hidden=c.hidden, outcome=c.outcome, property_test=prop,
                property=public_docstring(prop) if prop else "", input_kind=dict(c.input_kind),
                parameters=_parameters(c.test))
    if prop:
        f.reproduce = f"pytest {prop}"
    if c.hidden and not reveal:
        f.test, f.withheld = function_name(c.test), True
        return f
    f.message, f.example = _clean(c.message, 4000), _clean(c.example, 4000)
    return f

"""Public and hidden check files run in separate phases: a problem with hidden
checks is never split over groups, and no hidden check runs while a public
one does, at any parallelism (grader/groups.py, with a fake pytest run)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_problem_with_hidden_checks_is_never_split_over_groups():
    """Its public and hidden files would run at once in two groups: they stay
    in one group, in order; a problem of public files alone may still split."""
    from grader.groups import partition, units_of
    from grader.rubric import is_hidden, load
    from grader.sandbox import budgets

    costs, profile = budgets.load(), "grade"
    rub = load()
    for public_only in (False, True):
        planned = [(p, p.check_files(REPO, public_only=public_only)) for p in rub.problems]
        planned = [(p, fs) for p, fs in planned if fs]
        for k in (2, 4, 8):
            for p, fs in planned:
                alone = units_of([(p, fs)], k, costs, profile)
                mixed = len({is_hidden(f) for f in fs}) > 1
                if mixed:
                    assert alone == [(p, tuple(fs))], (p.name, k)
                groups = partition(units_of(planned, k, costs, profile), k, costs, profile)
                holding = [g for g in groups if any(q.name == p.name for q, _ in g)]
                assert len(holding) == 1 or not mixed, (p.name, k)


def test_public_checks_never_run_after_hidden_ones(tmp_path, monkeypatch):
    """A full grade runs every problem's public files, then (once they have all
    ended) the hidden ones, at any parallelism, and regrades a phase's grader
    errors before the next phase starts: no worker that has seen hidden inputs
    runs before one whose answers reach a student's message, of the same
    problem or another (a trace it leaves, in the page cache say, could carry
    an input there). Each problem still gets all its files' results."""
    import shutil
    import threading

    from grader import engine, groups
    from grader.protocol import CheckOutcome, RunResults, WorkerRecord
    from grader.rubric import is_hidden, load

    rub = load()
    selected = [p.name for p in rub.problems if not p.gpu]
    sub = tmp_path / "sub"
    shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
    runs: list[tuple[bool, tuple[str, ...]]] = []  # (hidden files?, problems), as each process starts
    running: list[tuple[str, ...]] = []
    overlaps: list[tuple] = []
    lock = threading.Lock()
    faulty_once = {"views": False, "model": True}  # (problem -> in the hidden phase?) a first attempt's grader error

    def fake_run_pytest(template, problems, run, progress=None, on_problem=None):
        files = tuple(f for p in problems for f in p.files)
        hidden = any(is_hidden(f) for f in files)
        with lock:
            kinds = {is_hidden(f) for f in files} | {is_hidden(f) for fs in running for f in fs}
            if len(kinds) > 1:
                overlaps.append((files, list(running)))
            running.append(files)
            runs.append((hidden, tuple(p.name for p in problems)))
        threading.Event().wait(0.05)  # long enough for the groups of a phase to overlap each other
        out = RunResults()
        for p in problems:
            fault = "the machine failed" if faulty_once.get(p.name) == hidden and (hidden, (p.name,)) not in runs \
                and len(problems) > 1 else ""
            res = RunResults(checks={f"{f}::test_x": CheckOutcome(problem=p.name, file=f) for f in p.files},
                             problems={p.name: WorkerRecord(fault=fault, started=True)})
            out.checks.update(res.checks)
            out.problems.update(res.problems)
            if on_problem is not None:
                on_problem(p.name, res)
        with lock:
            running.remove(files)
        return out

    monkeypatch.setattr(groups, "run_pytest", fake_run_pytest)
    for parallel in (1, 2, 4):
        runs.clear()
        result = engine.grade(sub, engine.Options(profile="dev", parallel=parallel, problems=selected))
        assert not overlaps, overlaps[0]
        first_hidden = next(i for i, (hidden, _) in enumerate(runs) if hidden)
        assert all(not hidden for hidden, _ in runs[:first_hidden]), runs
        assert all(hidden for hidden, _ in runs[first_hidden:]), f"public checks ran after hidden ones: {runs}"
        assert (False, ("views",)) in runs[:first_hidden] and (True, ("model",)) in runs[first_hidden:], runs
        assert [p.name for p in result.problems if p.status != "grader error"] == selected, \
            [(p.name, p.status) for p in result.problems]

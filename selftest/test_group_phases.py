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


def test_no_hidden_check_runs_while_a_public_check_runs(tmp_path, monkeypatch):
    """A full grade runs every problem's public files, then (once they have all
    ended) the hidden ones, at any parallelism: no worker that has seen hidden
    inputs is alive beside one whose answers reach a student's message, of the
    same problem or another. Each problem still gets all its files' results."""
    import threading

    from grader import groups
    from grader.protocol import RunResults
    from grader.rubric import is_hidden, load
    from grader.sandbox import budgets
    from grader.sandbox.isolation import Sandbox

    rub = load()
    selected = [p for p in rub.problems if not p.gpu]
    assert any(is_hidden(f) for p in selected for f in p.check_files(REPO)), "no hidden checks to order here"
    running: list[tuple[str, ...]] = []
    overlaps: list[tuple] = []
    lock = threading.Lock()

    def fake_run_pytest(rub, base, problems, run, threads, progress=None):
        files = tuple(f for p in problems for f in p.files)
        with lock:
            kinds = {is_hidden(f) for f in files} | {is_hidden(f) for fs in running for f in fs}
            if len(kinds) > 1:
                overlaps.append((files, list(running)))
            running.append(files)
        threading.Event().wait(0.05)  # long enough for the groups of a phase to overlap each other
        with lock:
            running.remove(files)
        return RunResults()

    monkeypatch.setattr(groups, "run_pytest", fake_run_pytest)
    plan = groups.base_plan(tmp_path, tmp_path, "dev", Sandbox(want="rlimits"), call_cpu=1.0, start_cpu=1.0,
                            wall_factor=1.0, seed=0)
    costs = budgets.load()
    for parallel in (1, 2, 4, 8):
        for public_only in (False, True):
            out, errors = groups.run_groups(rub, selected, plan, public_only=public_only, parallel=parallel,
                                            cpu_budget=None, costs=costs, speed=1.0, run=tmp_path / f"{parallel}")
            assert sorted(out) == sorted(p.name for p in selected) and not errors
    assert not overlaps, overlaps[0]

"""Public and hidden check files run in separate phases, one trusted pytest
process each: no hidden check runs while a public one does, nor before one;
a process that ends early loses only the problems whose runs it had not sent
(grader/groups.py, with a fake pytest run)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_public_checks_never_run_after_hidden_ones(tmp_path, monkeypatch):
    """A full grade runs every problem's public files, then (once they have all
    ended) the hidden ones, and regrades a phase's grader
    errors before the next phase starts: no worker that has seen hidden inputs
    runs before one whose answers reach a student's message, of the same
    problem or another (a trace it leaves, in the page cache say, could carry
    an input there). Each problem still gets all its files' results."""
    import shutil
    import threading

    from grader import engine, groups
    from grader.protocol import CheckOutcome, ProblemRun, WorkerRecord
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
        out = {}
        for p in problems:
            fault = "the machine failed" if faulty_once.get(p.name) == hidden and (hidden, (p.name,)) not in runs \
                and len(problems) > 1 else ""
            out[p.name] = ProblemRun(p.name, hidden, [CheckOutcome(f"{f}::test_x", p.name, f) for f in p.files],
                                     WorkerRecord(fault=fault, started=True))
            if on_problem is not None:
                on_problem(p.name, out[p.name])
        with lock:
            running.remove(files)
        return groups.PhaseRun(out, None)

    monkeypatch.setattr(groups, "run_pytest", fake_run_pytest)
    result = engine.grade(sub, engine.Options(profile="dev", problems=selected))
    assert not overlaps, overlaps[0]
    first_hidden = next(i for i, (hidden, _) in enumerate(runs) if hidden)
    assert all(not hidden for hidden, _ in runs[:first_hidden]), runs
    assert all(hidden for hidden, _ in runs[first_hidden:]), f"public checks ran after hidden ones: {runs}"
    assert (False, ("views",)) in runs[:first_hidden] and (True, ("model",)) in runs[first_hidden:], runs
    assert [p.name for p in result.problems if p.status != "grader error"] == selected, \
        [(p.name, p.status) for p in result.problems]


def test_a_process_that_ends_early_loses_only_the_problems_it_had_not_sent(tmp_path, monkeypatch):
    """A trusted process that exits before its session event (a crash, say): the
    problem whose run it sent keeps it, as sent; the other's run is ``lost``,
    saying why (its exit status), with the process's output for instructors
    (here a stand-in for pytest that sends one ``end`` event and exits 3)."""
    import stat
    import sys

    from grader import groups
    from grader.protocol import GroupSpec, ProblemSpec, SandboxSpec
    from grader.sandbox.limits import Limits

    fake = tmp_path / "python"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys
spec = json.load(open(os.environ["GRADER_PLAN"]))
name = spec["problems"][0]["name"]
run = {{"problem": name, "hidden": spec["hidden"], "worker": {{"calls": 2}},
       "checks": [{{"test": "tests/test_views.py::test_a", "problem": name, "file": "tests/test_views.py"}}]}}
os.write(spec["results_fd"], (json.dumps({{"event": "end", "problem": name, "run": run}}) + "\\n").encode())
print("the trusted run's own words")
sys.exit(3)
""")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(fake))
    template = GroupSpec(name="sub", repo=str(REPO), work=str(tmp_path), scratch="", profile="dev", problems=(),
                         sandbox=SandboxSpec("rlimits", "a test", False, Limits()), results_fd=-1, seed=1)
    problems = (ProblemSpec("views", 10.0, ("tests/test_views.py",)),
                ProblemSpec("memory", 10.0, ("tests/test_memory.py",)))
    sent: list[str] = []
    phase = groups.run_pytest(template, problems, tmp_path / "phase", on_problem=lambda name, run: sent.append(name))
    assert sent == ["views"] and phase.cost is None
    views, memory = phase.runs["views"], phase.runs["memory"]
    assert not views.lost and [c.test for c in views.checks] == ["tests/test_views.py::test_a"]
    assert views.worker is not None and views.worker.calls == 2
    assert memory.lost == phase.error and "ended without results (exit 3" in memory.lost, memory
    assert "the trusted run's own words" in memory.log and not memory.checks and memory.worker is None
    # A hidden phase's figures (exit status, memory held) are the instructors': students read words only.
    from dataclasses import replace

    hidden = groups.run_pytest(replace(template, hidden=True), problems, tmp_path / "hidden").runs["memory"]
    assert hidden.lost == "the grader's test run ended without results", hidden.lost
    assert "ended without results (exit 3" in hidden.log, hidden.log

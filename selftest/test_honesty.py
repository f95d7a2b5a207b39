"""No vacuous tests: every public test fails on the untouched stubs, and fails
there because of the stub's NotImplementedError (not a collection error, not an
assertion that happens to be false on ``None``). And what a student's ``pytest``
prints for them: each untouched stub once (no traceback, no hypothesis output),
the problems in handout order, and where each problem stands at the end."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.harness import HANDOUT_MODULES

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(1200)  # every public test, on two cores shared with the other selftests
def test_every_public_test_fails_on_the_stubs(tmp_path):
    out = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--impl", "student", "-p", "selftest.outcomes",
         f"--outcomes={out}", "-q", "-p", "no:cacheprovider", "-n", "2", "--hypothesis-profile", "detect"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert out.exists(), f"pytest wrote no outcomes:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = json.loads(out.read_text())
    assert len(results) >= 50, f"only {len(results)} tests ran:\n{proc.stdout[-3000:]}"
    problems = []
    for nodeid, r in sorted(results.items()):
        if r["outcome"] == "skipped" and "gpu" in r["markers"]:
            continue  # cannot be run here; the GPU run checks them
        if r["outcome"] != "failed":
            problems.append(f"{nodeid}: {r['outcome']} on the stubs {r['messages'][:1]}")
        elif "NotImplementedError" not in r["exceptions"]:
            problems.append(f"{nodeid}: failed with {r['exceptions'][:3]}, not the stub's NotImplementedError")
        elif not any(re.search(r": see handout §\d", m) for m in r["messages"]):
            problems.append(f"{nodeid}: the stub's message does not point to the handout: {r['messages'][:1]}")
        elif not set(r["markers"]) & set(HANDOUT_MODULES):
            problems.append(f"{nodeid}: has no problem marker")
    assert not problems, "vacuous or broken tests:\n" + "\n".join(problems)


def test_stubs_raise_with_handout_pointer():
    """Every public function in student/ is a stub naming its handout section."""
    missing = []
    for module in HANDOUT_MODULES:
        path = REPO / "student" / f"{module}.py"
        if not path.exists():
            continue
        text = path.read_text()
        for name in re.findall(r"^def ([a-z]\w*)\(", text, flags=re.M):
            if not re.search(rf'NotImplementedError\("{name}: see handout §\d', text):
                missing.append(f"student/{module}.py: {name}")
    assert not missing, "stubs without a NotImplementedError naming the handout: " + ", ".join(missing)


# --------------------------------------------------------------------------- what a student sees on the stubs

STUB_LINE = re.compile(r"^§(?P<section>[\d.]+)\s+(?P<function>[\w.]+)\s+(?P<tests>\d+) tests?$")


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One student's default ``pytest`` output over three problems, alphabetically
    memory < precision < views, in handout order precision (§1.1, the reference:
    passing), views (§1.2, the untouched stubs: not started), memory (§1.3, a
    wrong-corpus entry: failing)."""
    from grader.corpus import build_wrong, wrong_submissions

    wrong = next(s for s in wrong_submissions() if s.name == "memory-adam_state_once")
    folder = build_wrong(wrong, tmp_path_factory.mktemp("mixed"))
    shutil.copy(REPO / "student" / "views.py", folder / "student" / "views.py")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--impl", str(folder), "-m", "precision or views or memory",
         "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    return {"returncode": proc.returncode, "lines": (proc.stdout + proc.stderr).splitlines(),
            "output": proc.stdout + proc.stderr}


def _test_names(problem: str) -> set[str]:
    return set(re.findall(r"^def (test_\w+)\(", (REPO / "tests" / f"test_{problem}.py").read_text(), flags=re.M))


@pytest.mark.timeout(900)
def test_a_stub_is_one_line_per_function_and_real_failures_keep_their_report(mixed_run):
    out, lines = mixed_run["output"], mixed_run["lines"]
    stubs = {m["function"]: m for line in lines if (m := STUB_LINE.match(line))}
    views_stubs = set(re.findall(r'NotImplementedError\("(\w+): see handout §1\.2"\)',
                                 (REPO / "student" / "views.py").read_text()))
    assert set(stubs) == views_stubs, f"expected one line per views stub, got {sorted(stubs)}:\n{out[-3000:]}"
    assert all(m["section"] == "1.2" for m in stubs.values())
    assert sum(1 for line in lines if STUB_LINE.match(line)) == len(views_stubs), "a stub listed twice"
    reached = sum(int(m["tests"]) for m in stubs.values())
    assert re.search(rf"\b{reached} not implemented\b", lines[-1]), f"the final count: {lines[-1]}"
    # Nothing per test for the stubs: no traceback, no FAILURES block, no short-summary line, no hypothesis seed.
    blocks = {m[1] for line in lines if (m := re.match(r"^_{2,} (test_\w+)", line))}
    assert not blocks & _test_names("views"), f"a stub's test got a FAILURES block: {blocks & _test_names('views')}"
    for text in ("test_views.py::", "NotImplementedError", "@seed(", "Falsifying example"):
        assert text not in out, f"{text!r} in the output of a stub's tests:\n{out[-3000:]}"
    # The wrong entry's failures keep their whole report: block, assertion, hypothesis's example, summary line.
    assert blocks and blocks <= _test_names("memory"), blocks
    assert "AssertionError: optimizer_state_floats('adam'" in out
    assert "@reproduce_failure(" in out, "a property test's failure lost its example"
    # The short summary's line (with CI set, pytest appends the whole message after " - ").
    summary = re.escape("FAILED tests/test_memory.py::test_optimizer_state_floats_matches_torch[adam]")
    assert any(re.match(rf"{summary}( - |$)", line) for line in lines), out[-3000:]
    assert mixed_run["returncode"] == 1, "tests that reach a stub still fail the run"


@pytest.mark.timeout(900)
def test_problems_run_in_handout_order(mixed_run):
    files = [m[1] for line in mixed_run["lines"] if (m := re.match(r"^(tests/test_\w+\.py) ", line))]
    assert files == ["tests/test_precision.py", "tests/test_views.py", "tests/test_memory.py"], files


def test_collection_sorts_every_problem_by_handout_section():
    from tests import plugin

    class Item:
        def __init__(self, path: str, name: str) -> None:
            self.path, self.name, self.markers = REPO / path, name, []

        def add_marker(self, marker: Any) -> None:
            self.markers.append(marker.name)

    alphabetical = sorted(HANDOUT_MODULES)
    assert alphabetical != list(HANDOUT_MODULES), "the check needs an order that sorting by name would get wrong"
    items = [Item(f"tests/test_{p}.py", f"{p}-{i}") for p in alphabetical for i in range(2)]
    items += [Item("grader/hidden/test_precision_hidden.py", "precision-hidden"), Item("tests/test_x.py", "other")]
    plugin.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    expected = [f"{p}-{i}" for p in HANDOUT_MODULES for i in range(2)]
    expected.insert(2, "precision-hidden")
    assert [i.name for i in items] == [*expected, "other"]
    assert all(i.markers == [i.name.split("-")[0]] for i in items if i.name != "other")


@pytest.mark.timeout(900)
def test_overview_says_where_each_problem_stands_in_handout_order(mixed_run):
    lines = mixed_run["lines"]
    start = next(i for i, line in enumerate(lines) if "problems, in handout order" in line)
    overview = lines[start + 1:-1]
    assert len(overview) == 3, overview
    assert re.fullmatch(r"precision\s+passing: all \d+ tests", overview[0]), overview
    assert re.fullmatch(r"views\s+not started: every test reaches a stub \(pytest -m views\)", overview[1]), overview
    assert re.fullmatch(r"memory\s+failing: \d+ of \d+ tests", overview[2]), overview


@pytest.mark.parametrize("readme", ["README.md", "grader/instructor/templates/release/README.md"])
def test_readme_starts_students_with_the_first_handout_problem(readme):
    """The first pytest command a student reads (this repository's student
    section, and the release's README) runs §1.1's problem alone, and none
    passes the default hypothesis profile explicitly."""
    from grader.util import tomllib

    rubric = tomllib.loads((REPO / "grader" / "rubric.toml").read_text())
    first = next(p["name"] for p in rubric["problem"] if p["section"] == "1.1")
    text = (REPO / readme).read_text()
    if readme == "README.md":
        text = text[text.index("## For students"):text.index("## For instructors")]
    commands = re.findall(r"^\s*(pytest\b[^#\n]*)", text, flags=re.M)
    assert commands, f"no pytest command in {readme}"
    assert commands[0].split() == ["pytest", "-m", first], f"{readme}: the first command is {commands[0]!r}"
    assert "--hypothesis-profile dev" not in text, f"{readme} passes the default profile explicitly"


@pytest.mark.timeout(900)
def test_a_students_first_pytest_on_the_release_is_short():
    """``benchmarks/stubs.py`` (what it measures cannot rot): the student release's
    plain ``pytest`` on its stubs prints under 200 lines, every test that ran
    reached a stub (none is a failure of another kind), and the overview calls
    every problem not started. Its time is the benchmark's figure, not checked here."""
    from benchmarks import stubs

    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        run = stubs.run_pytest(stubs.build_student_release(Path(tmp) / "release"))
    out = run["output"]
    assert run["returncode"] == 1, out[-3000:]
    assert run["lines"] < stubs.TARGET_LINES, f"{run['lines']} lines:\n{out[-3000:]}"
    assert re.search(r"\b\d+ not implemented\b", run["summary"]), run["summary"]
    assert not re.search(r"\b(failed|errors?|passed)\b", run["summary"]), run["summary"]
    for problem in HANDOUT_MODULES:
        assert re.search(rf"^{problem}\s+not started: ", out, flags=re.M), f"{problem} is not 'not started':\n{out}"


def test_only_an_untouched_stub_skips_the_child_process(tmp_path):
    """``fail_if_only_stubs`` (a scenario whose every call into the
    implementation is an untouched stub fails before a process starts) tells a
    stub from a started function, and leaves scenarios that hand ``lab`` on alone."""
    from tests import harness
    from tests.local import LocalImpl
    from tests.scenarios import optimizers, training

    stub = LocalImpl("student").modules.training
    done = LocalImpl("reference").modules.training
    assert harness.stub_message(stub.checkpointed_forward) == "checkpointed_forward: see handout §6"
    assert harness.stub_message(done.checkpointed_forward) is None
    (tmp_path / "started.py").write_text(
        'def f(x):\n    """Doc."""\n    if x:\n        return 1\n    raise NotImplementedError("f: see handout §6")\n'
        'def g(x):\n    """Doc."""\n    raise NotImplementedError("g: see handout §6")\n')
    namespace: dict[str, Any] = {}
    exec(compile((tmp_path / "started.py").read_text(), str(tmp_path / "started.py"), "exec"), namespace)
    assert harness.stub_message(namespace["f"]) is None, "a started function is no stub"
    assert harness.stub_message(namespace["g"]) == "g: see handout §6"
    with pytest.raises(harness.NotImplementedYet) as caught:
        harness.fail_if_only_stubs(LocalImpl("student").modules, training.checkpointed_memory)
    assert (caught.value.function, caught.value.section) == ("checkpointed_forward", "6")
    assert isinstance(caught.value.__cause__, NotImplementedError)
    harness.fail_if_only_stubs(LocalImpl("reference").modules, training.checkpointed_memory)  # no raise
    # trajectory hands lab to a helper (build), which might call something else first: it runs.
    harness.fail_if_only_stubs(LocalImpl("student").modules, optimizers.trajectory)

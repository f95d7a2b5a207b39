"""``python -m grader mutants`` (grader/instructor/mutants.py): a small, fast subset.

The full run (every mutant of every problem) takes hours of CPU; here a handful
of mutants of views.py show that the driver writes mutants where ``--impl``
finds them, tells a killed mutant from a surviving one, recognises equivalent
mutants and never touches reference/.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("cosmic_ray", reason="grader mutants needs cosmic-ray (the dev extra)")

from grader.instructor import mutants

REPO = Path(__file__).resolve().parent.parent
#: one quick public test that checks storage_index's arithmetic
QUICK = ["tests/test_views.py::test_storage_index_worked_example"]


def _digest() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted((REPO / "reference").glob("*.py")))).hexdigest()


def _mutant(key: str) -> mutants.Mutant:
    problem, operator, _ = key.split(":")
    found = {m.key: m for m in mutants.generate(problem, (operator,))}
    assert key in found, f"{key} is not among the mutants of {problem}: {sorted(found)[:10]}"
    return found[key]


def test_generate_makes_distinct_mutants_with_their_line():
    ms = list(mutants.generate("views", ("ReplaceBinaryOperator_Add_Sub", "NumberReplacer")))
    assert len(ms) >= 5 and len({m.key for m in ms}) == len(ms)
    original = (REPO / "reference" / "views.py").read_text()
    for m in ms:
        assert m.source != original and m.before in original and m.after in m.source


def test_a_killed_and_a_surviving_mutant_are_told_apart():
    before = _digest()
    killed = _mutant("views:ReplaceBinaryOperator_Add_Sub:0")  # offset - sum(...)
    survivor = _mutant("views:ReplaceTrueWithFalse:0")  # strict=False after a length check: equivalent
    assert mutants.run_mutant(killed, tests=QUICK, timeout=300)[0] == "killed"
    assert mutants.run_mutant(survivor, tests=QUICK, timeout=300)[0] == "survived"
    assert _digest() == before, "running mutants changed reference/"


def test_equivalent_mutants_are_recognised():
    original = (REPO / "reference" / "memory.py").read_text()
    annotation_only = [m for m in mutants.generate("memory", ("ReplaceBinaryOperator_BitOr_BitAnd",))
                       if "max_trainable_parameters" in m.after]
    assert annotation_only, "expected mutants of max_trainable_parameters' annotations"
    for m in annotation_only:
        assert mutants.equivalence(m, {}, original) == "changes only an annotation or a docstring"
    listed = mutants.load_equivalent()
    views = (REPO / "reference" / "views.py").read_text()
    assert mutants.equivalence(_mutant("views:ReplaceTrueWithFalse:0"), listed, views)
    assert mutants.equivalence(_mutant("views:ReplaceBinaryOperator_Add_Sub:0"), listed, views) is None
    # an entry written for another line no longer applies
    stale = {k: "some other line\x00reason" for k in listed}
    assert mutants.equivalence(_mutant("views:ReplaceTrueWithFalse:0"), stale, views) is None


def test_summary_counts_timeouts_as_killed_and_leaves_out_equivalents():
    outs = [mutants.Outcome(f"k{i}", "views", 1, "", "", s, 0.0) for i, s in
            enumerate(["killed", "timeout", "survived", "equivalent"])]
    assert mutants.summary(outs) == (2, 3, 1)
    assert "survived  k2" in mutants.table({"views": outs})


def test_a_mutant_meets_only_the_tests_that_execute_its_line():
    """The coverage baseline narrows a mutant to the tests that run its line: they
    kill it, while tests that never run the line cannot (so the narrowing is
    sound, and a narrowed run that passes still falls back to the whole file)."""
    base = mutants.baseline("views")
    assert base.seconds and all(t.startswith("tests/test_views.py::") for t in base.seconds)
    killed = _mutant("views:ReplaceBinaryOperator_Add_Sub:0")
    assert killed.line in mutants.function_body_lines((REPO / "reference" / "views.py").read_text())
    tests = base.tests_for(killed.line)
    assert tests and len(tests) < len(base.seconds)
    assert [base.seconds[t] for t in tests] == sorted(base.seconds[t] for t in tests), "cheapest first"
    assert mutants.run_mutant(killed, select=tests, timeout=300)[0] == "killed"
    elsewhere = [t for t in sorted(base.seconds, key=base.seconds.get) if t not in tests][:5]
    assert mutants.run_mutant(killed, select=elsewhere, timeout=300)[0] == "survived"


def test_cuda_only_mutants_are_left_out_without_cuda_and_run_with_it():
    """A mutant listed in cuda_only_mutants.toml is reported as cuda-only (not
    run, in neither count) on a machine without CUDA, and runs like any other
    where CUDA is available."""
    cuda_only = mutants.load_equivalent(mutants.CUDA_ONLY_FILE)
    assert cuda_only, "cuda_only_mutants.toml lists no mutant"
    ops = ("ReplaceTrueWithFalse",)
    without = mutants.mutate_problem("data", operators=ops, max_mutants=0, progress=False, cuda=False)
    marked = {o.key for o in without if o.status == "cuda-only"}
    assert marked and marked <= set(cuda_only), marked
    assert all(o.reason for o in without if o.status == "cuda-only")
    with_cuda = mutants.mutate_problem("data", operators=ops, max_mutants=0, progress=False, cuda=True)
    assert not any(o.status == "cuda-only" for o in with_cuda), "with CUDA, CUDA-only mutants must run"
    outs = [*without, mutants.Outcome("k", "data", 1, "", "", "killed", 0.0)]
    killed, run, _ = mutants.summary(outs)
    assert (killed, run) == (1, 1), "cuda-only mutants count neither as run nor as killed"
    assert "cuda" in mutants.table({"data": outs}).splitlines()[0]


def test_module_level_lines_are_never_narrowed():
    source = "X = 1\n\n@dec\ndef f(a=2):\n    y = a\n    return y + X\n"
    assert mutants.function_body_lines(source) == {5, 6}

"""Each known-wrong submission in grader/corpus/wrong is caught by the public
tests of its problem, and the tests that catch it belong to rubric items its
``breaks`` list names (the grader tests check it loses exactly those items'
points: a hidden check extending another item's public test may catch the bug
there too, e.g. a bf16 bug in a bf16 resume)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.corpus import build_wrong, wrong_submissions
from grader.rubric import load
from selftest.sampling import FULL, sample
from tests.harness import HANDOUT_MODULES

REPO = Path(__file__).resolve().parent.parent
#: CI runs a sample, and stops each run at its first failure (selftest/sampling.py)
WRONG = sample(wrong_submissions(), 30, lambda s: s.problem)


def _outcomes(folder: Path, tmp_path: Path, tests: list[str]) -> dict:
    out = tmp_path / "outcomes.json"
    subprocess.run(
        [sys.executable, "-m", "pytest", *tests, f"--impl={folder}", "-p", "selftest.outcomes",
         f"--outcomes={out}", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--hypothesis-profile", "detect",
         *([] if FULL else ["-x"])],  # the full run records every failing test (for the breaks check)
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    return json.loads(out.read_text())


@pytest.mark.parametrize("sub", WRONG, ids=[s.name for s in WRONG])
def test_public_tests_catch_the_bug(sub, tmp_path):
    assert sub.problem in HANDOUT_MODULES, f"{sub.name}: unknown problem {sub.problem!r}"
    folder = build_wrong(sub, tmp_path)
    public = [f for f in load().problem(sub.problem).files if f.startswith("tests/")]  # a problem may have several
    results = _outcomes(folder, tmp_path, public)
    assert results, f"{sub.name}: no test ran"
    # A GPU test skipped on this machine neither catches nor misses the bug.
    failed = [k for k, r in results.items() if r["outcome"] not in ("passed", "skipped")]
    assert failed, f"{sub.name} ({sub.description}) passes every public test of {sub.problem}"
    assert not any(r["outcome"] == "collect-error" for r in results.values()), results
    if sub.breaks:
        problem = load().problem(sub.problem)
        caught = {i.name for k in failed for i in problem.items_of(k)}
        assert caught <= set(sub.breaks), (
            f"{sub.name}: its failing public tests belong to items {sorted(caught)}, its breaks list says "
            f"{sorted(sub.breaks)} (failing: {sorted({k.split('::')[-1].split('[')[0] for k in failed})})")

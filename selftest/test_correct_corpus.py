"""Every correct implementation gets full marks: each entry of
grader/corpus/correct (a correct solution written in another style than the
reference) passes every public test and every hidden check of its problem, in
the ``ci`` hypothesis profile (an entry patching one function may name, with
``only``, the tests that reach it). The counterpart of test_wrong_corpus.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.corpus import build_correct, correct_submissions
from grader.rubric import load
from tests.harness import HANDOUT_MODULES

REPO = Path(__file__).resolve().parent.parent
CORRECT = correct_submissions()


def _outcomes(folder: Path, tmp_path: Path, tests: list[str]) -> tuple[dict, str]:
    out = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, f"--impl={folder}", "-p", "selftest.outcomes",
         f"--outcomes={out}", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--hypothesis-profile", "ci"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )
    return (json.loads(out.read_text()) if out.is_file() else {}), proc.stdout[-4000:]


def test_the_corpus_covers_the_styles_students_write():
    """Textbook formulas, other segment counts and batch indexing, and the
    deliberately slow solutions the handout's time budget promises full marks."""
    names = {s.name for s in CORRECT}
    assert {"optimizers-textbook_loops", "training-round_sqrt_segments", "training-checkpoint_sequential",
            "data-index_matrix", "optimizers-slow_per_parameter", "optimizers-five_times_slower",
            "einops_ops-slow_loops", "einops_ops-five_times_slower"} <= names, names


#: CI runs the entries whose problems' checks are quick; the rest with LAB_FULL_CORPUS=1 (selftest/sampling.py)
QUICK = ("memory", "precision", "data")


@pytest.mark.parametrize("sub", [pytest.param(s, id=s.name, marks=() if s.problem in QUICK else pytest.mark.full)
                                 for s in CORRECT])
def test_correct_reformulation_passes_public_and_hidden_checks(sub, tmp_path):
    assert sub.problem in HANDOUT_MODULES, f"{sub.name}: unknown problem {sub.problem!r}"
    folder = build_correct(sub, tmp_path)
    tests = list(load().problem(sub.problem).files)  # its public files, then its hidden checks (the rubric)
    results, log = _outcomes(folder, tmp_path, [*tests, *(["-k", sub.only] if sub.only else [])])
    assert results, f"{sub.name}: no test ran\n{log}"
    hidden = [k for k in results if k.startswith("grader/hidden/")]
    assert hidden, f"{sub.name}: no hidden check ran"
    # Only the GPU checks may be skipped here (they are reported as not run).
    bad = {k: r for k, r in results.items()
           if r["outcome"] != "passed" and not (r["outcome"] == "skipped" and "gpu" in r["markers"])}
    assert not bad, f"{sub.name} ({sub.description}) is correct but fails:\n" + "\n".join(
        f"  {k}: {r['outcome']} {r.get('messages', [])[:1]}" for k, r in bad.items()) + f"\n{log}"

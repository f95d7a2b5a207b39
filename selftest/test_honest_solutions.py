"""Every complete solution of grader/corpus/honest (each written apart, from the
handout alone) gets full marks: every public test and hidden check of every
problem passes, in the ``ci`` hypothesis profile. The similarity report measures
its false flags on these solutions (docs/instructors.md), so each must be a
correct solution, not a variant of one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.corpus import build_honest, honest_solutions
from grader.rubric import load
from tests.harness import HANDOUT_MODULES

REPO = Path(__file__).resolve().parent.parent
HONEST = honest_solutions()


def test_the_honest_set_is_complete_and_its_writers_are_named():
    """Seven solutions, each with every handout module, each named in the README."""
    readme = (REPO / "grader" / "corpus" / "honest" / "README.md").read_text()
    assert len(HONEST) >= 7
    for sol in HONEST:
        assert {m.stem for m in sol.modules} >= set(HANDOUT_MODULES), sol.name
        assert f"| `{sol.name}` |" in readme, sol.name


@pytest.mark.full  # every problem's checks, once per solution: minutes each
@pytest.mark.parametrize("sol", HONEST, ids=[s.name for s in HONEST])
def test_an_honest_solution_passes_every_public_and_hidden_check(sol, tmp_path):
    folder = build_honest(sol, tmp_path)
    tests = [f for p in load().problems if p.name in HANDOUT_MODULES for f in p.files]
    out = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, f"--impl={folder}", "-p", "selftest.outcomes", f"--outcomes={out}",
         "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--hypothesis-profile", "ci"],
        cwd=REPO, capture_output=True, text=True, timeout=3600)
    results = json.loads(out.read_text()) if out.is_file() else {}
    assert results and any(k.startswith("grader/hidden/") for k in results), proc.stdout[-4000:]
    bad = {k: r for k, r in results.items()
           if r["outcome"] != "passed" and not (r["outcome"] == "skipped" and "gpu" in r["markers"])}
    assert not bad, f"{sol.name} fails:\n" + "\n".join(
        f"  {k}: {r['outcome']} {r.get('messages', [])[:1]}" for k, r in bad.items())

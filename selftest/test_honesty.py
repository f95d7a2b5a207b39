"""No vacuous tests: every public test fails on the untouched stubs, and fails
there because of the stub's NotImplementedError (not a collection error, not an
assertion that happens to be false on ``None``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

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

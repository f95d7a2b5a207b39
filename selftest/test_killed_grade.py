"""A grade stopped from outside, as a platform stops one at its time limit,
leaves a valid results.json: the points of the problems it finished, and
the others named as not graded yet, with why. The grader rewrites its
reports after each problem (grader/engine.py), atomically."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from selftest.test_bundle import GRADESCOPE_SCHEMA

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(900)
def test_a_grade_killed_midway_keeps_the_points_it_finished(tmp_path):
    sub = tmp_path / "ref"
    shutil.copytree(REPO / "reference", sub / "student", ignore=shutil.ignore_patterns("__pycache__"))
    results = tmp_path / "results.json"
    proc = subprocess.Popen([sys.executable, "-m", "grader", str(sub), "--problems", "precision,views,memory",
                             "--profile", "dev", "--gradescope", str(results), "--no-progress"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    seen_early, killed = False, None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if results.is_file():
                doc = json.loads(results.read_text())  # written atomically: always whole
                seen_early = seen_early or all(t["score"] == 0 for t in doc["tests"])
                if any(t["score"] > 0 for t in doc["tests"]):  # one problem finished: stop it now
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = doc
                    break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert seen_early, "no results.json was written before the first problem finished"
    assert killed is not None, "the grade ended before a problem was seen finished"
    doc = json.loads(results.read_text())
    jsonschema.validate(doc, GRADESCOPE_SCHEMA)
    assert doc["score"] > 0, doc["score"]
    by_problem: dict[str, list[dict]] = {}
    for t in doc["tests"]:
        by_problem.setdefault(t["name"].split(" ")[0], []).append(t)
    finished = [p for p, tests in by_problem.items() if all(t.get("status") == "passed" for t in tests)]
    unfinished = [p for p, tests in by_problem.items() if all("not graded yet" in t["output"] for t in tests)]
    assert finished and unfinished and set(finished) | set(unfinished) == set(by_problem), by_problem
    assert doc["score"] == sum(t["score"] for p in finished for t in by_problem[p])
    for p in unfinished:
        for t in by_problem[p]:
            assert t["score"] == 0 and t["max_score"] > 0 and "not your code" in t["output"], t

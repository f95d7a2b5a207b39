"""Instructor commands answer at once: ``--help`` and an argument error of the
grade command and of every workflow (grader.cli.WORKFLOWS) exit within a
second, having imported no torch (the pipeline and torch come only once the
arguments are good).

This is a check of the project's own tooling, not of student code. The time
is the best of a few runs of each command (a run on a busy machine only waits
longer; the best shows what the command itself costs), against a limit ten
times what they take on an idle machine (about 0.05-0.2 s each)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.cli import WORKFLOWS

REPO = Path(__file__).resolve().parent.parent
MISSING = "/no/such/folder"

#: An argument error of each command: what it must refuse before doing any work.
BAD_ARGUMENTS = {
    "grade": [MISSING],
    "batch": ["batch", MISSING],
    "similarity": ["similarity", MISSING],
    "release": ["release"],
    "gradescope": ["gradescope"],
    "calibrate": ["calibrate", "--runs"],
    "mutants": ["mutants", "--problems", "no_such_problem"],
    "check": ["check", "--root", MISSING],
}
COMMANDS = ["grade", *WORKFLOWS]
LIMIT_S = 1.0
RUNS = 3

#: Runs ``python -m grader ARGS`` in this process's interpreter and prints, last,
#: whether torch was imported by the time the command exited.
_PROBE = """
import runpy, sys
sys.argv = ["grader", *sys.argv[1:]]
try:
    runpy.run_module("grader", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("torch imported:", "torch" in sys.modules)
"""


def test_every_workflow_has_an_argument_error_here():
    assert set(BAD_ARGUMENTS) == set(COMMANDS), "a new workflow needs its argument error in BAD_ARGUMENTS"


def _args(command: str, kind: str) -> list[str]:
    if kind == "help":
        return ["--help"] if command == "grade" else [command, "--help"]
    return BAD_ARGUMENTS[command]


@pytest.mark.parametrize("kind", ["help", "bad-arguments"])
@pytest.mark.parametrize("command", COMMANDS)
def test_answers_within_a_second_without_torch(command, kind):
    args = _args(command, kind)
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "grader", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        best = min(best, time.perf_counter() - start)
    assert proc.returncode == (0 if kind == "help" else 2), proc.stdout + proc.stderr
    assert ("usage:" in proc.stdout) if kind == "help" else proc.stderr.strip(), proc.stdout + proc.stderr
    assert best < LIMIT_S, f"python -m grader {' '.join(args)}: {best:.2f} s at best of {RUNS}"
    probe = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert probe.stdout.splitlines()[-1] == "torch imported: False", probe.stdout[-2000:] + probe.stderr[-2000:]


def test_the_help_lists_every_workflow():
    out = subprocess.run([sys.executable, "-m", "grader", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120).stdout
    listed = [line.split()[0] for line in out.partition("Instructor commands")[2].splitlines()[1:] if line.strip()]
    assert listed == list(WORKFLOWS), out
    assert "calibrate" in listed and "check" in listed

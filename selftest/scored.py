"""Problems scored from check outcomes written by hand, with no grade run:
one small optimizers rubric (an item per property, one without checks), its
public and hidden files, and the outcome records the worker would send.
Shared by the scoring selftests (test_scoring.py, test_feedback_limit.py,
test_batch_gpu_recipe.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.protocol import ProblemRun
from grader.rubric import Problem, load

RUBRIC = """
[[problem]]
name = "optimizers"
section = "4"
points = 10
files = ["tests/test_optimizers.py", "grader/hidden/test_optimizers_hidden.py"]

[[problem.item]]
name = "update rules"
points = 6
checks = ["test_trajectory_matches_torch"]

[[problem.item]]
name = "state_dict"
points = 3
checks = ["test_state_dict_*"]

[[problem.item]]
name = "bad hyperparameters"
points = 1
checks = ["test_bad_*"]
"""

PUBLIC = "tests/test_optimizers.py"
HIDDEN = "grader/hidden/test_optimizers_hidden.py"


def problem_of(tmp_path: Path, text: str = RUBRIC) -> Problem:
    """The one problem of rubric ``text``, written into ``tmp_path``."""
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return load(path).problems[0]


def check(file: str, outcome: str = "passed", message: str = "", **extra: Any) -> dict[str, Any]:
    """One check's outcome record, as the worker's trusted side sends it."""
    return {"problem": "optimizers", "file": file, "outcome": outcome, "message": message, "example": "",
            "gpu_marked": False, **extra}


def run_of(outcome: dict[str, Any], hidden: bool = False) -> ProblemRun:
    """One phase's run of a problem (``hidden``: the hidden checks' phase), read as
    the engine reads the trusted process's (:meth:`ProblemRun.from_json`), from an
    outcome written by hand: ``checks`` maps node ids to :func:`check` records,
    ``problems`` the problem's name to its worker record (none: no record)."""
    records = outcome.get("problems", {})
    return ProblemRun.from_json({
        "problem": next(iter(records), ""), "hidden": hidden,
        "checks": [{"test": test, **c} for test, c in outcome.get("checks", {}).items()],
        "worker": next(iter(records.values()), None)})

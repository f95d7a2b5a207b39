"""The public tests and the harness they reach the implementation through (harness.py).

:func:`handout_problems` is the one list of the handout's problems, read from the
rubric (``grader/rubric.toml``), so that adding or retiring a problem there is
all its markers, its order in a run and the modules the harness accepts need.
This module imports nothing heavy (no torch): the grader's command line reads
the list before it has checked its arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["RUBRIC", "handout_problems"]

#: The rubric, relative to the repository (or the student release) that holds ``tests/``.
RUBRIC = Path("grader") / "rubric.toml"


def handout_problems(root: Path | None = None) -> dict[str, str]:
    """The handout's modules, in handout order (the rubric's), each with its handout section.

    A handout module is a rubric problem with public check files (``tests/...``;
    a problem without ``files`` has ``tests/test_<name>.py``): the GPU-only MFU
    problem, checked by hidden checks alone, is a problem but not a module.
    ``root`` holds ``tests/`` (default: this file's repository).

    A grader worker's working copy holds the public harness but no rubric; there
    every plain module of its ``student/`` is accepted, section unknown (""): the
    trusted side checked each request against the rubric's list before sending it.
    """
    root = Path(__file__).resolve().parent.parent if root is None else root
    rubric = root / RUBRIC
    if not rubric.is_file():
        modules = sorted(p.stem for p in (root / "student").glob("*.py")
                         if p.stem.isidentifier() and not p.stem.startswith("_"))
        return dict.fromkeys(modules, "")
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pyproject.toml installs tomli on 3.10, the parser tomllib was made from
        import tomli as tomllib
    problems = tomllib.loads(rubric.read_text()).get("problem", [])
    out: dict[str, str] = {}
    for problem in problems:
        name = problem.get("name")
        files = problem.get("files", [f"tests/test_{name}.py"])
        if isinstance(name, str) and any(str(f).startswith("tests/") for f in files):
            out[name] = str(problem.get("section", ""))
    return out

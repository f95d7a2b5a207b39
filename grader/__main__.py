"""``python -m grader``: grade a submission, or run an instructor workflow.

``python -m grader batch|release|gradescope|similarity|mutants|calibrate ...``
dispatch to ``main(argv)`` of ``grader.instructor.batch``, ``.release``,
``.bundle``, ``.similarity``, ``.mutants`` and ``.calibrate`` (absent from the
student release: then the command says so); anything else grades one
submission (see grader/cli.py).
"""

from __future__ import annotations

import importlib
import sys

_WORKFLOWS = {"batch": "grader.instructor.batch", "release": "grader.instructor.release",
              "gradescope": "grader.instructor.gradescope", "similarity": "grader.instructor.similarity",
              "mutants": "grader.instructor.mutants", "calibrate": "grader.instructor.calibrate"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _WORKFLOWS:
        name = _WORKFLOWS[argv[0]]
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):  # or a package above it
                raise
            print(f"grader: '{argv[0]}' is not available in this checkout ({name} is missing)", file=sys.stderr)
            return 1
        return int(module.main(argv[1:]) or 0)
    from grader.cli import main as grade_main

    return grade_main(argv)


if __name__ == "__main__":
    sys.exit(main())

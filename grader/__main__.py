"""``python -m grader``: grade a submission, or run an instructor workflow.

``python -m grader NAME ...`` for a workflow of :data:`grader.cli.WORKFLOWS`
(batch, similarity, release, gradescope, calibrate, mutants, check) dispatches
to ``main(argv)`` of its module in ``grader.instructor`` (absent from the
student release: then the command says so); anything else grades one
submission (see grader/cli.py). Nothing heavy is imported before a workflow
has parsed its arguments, so ``--help`` and argument errors answer at once.
"""

from __future__ import annotations

import importlib
import sys

from grader.cli import WORKFLOWS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in WORKFLOWS:
        name = f"grader.instructor.{argv[0]}"
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

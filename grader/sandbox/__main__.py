"""``python -m grader.sandbox lock|check``: lock this checkout for uid isolation
(:func:`grader.sandbox.uidsandbox.lock`), or say which isolation the grader
would use here."""

from __future__ import annotations

import sys

from grader.sandbox import uidsandbox
from grader.sandbox.isolation import Sandbox
from grader.util import REPO


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.sandbox lock|check``: lock this checkout; say which
    isolation the grader would use here (as ``--sandbox auto`` decides, so
    ``$LAB_ISOLATION`` counts): exit 1 when it would refuse to grade."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m grader.sandbox", description=main.__doc__)
    ap.add_argument("action", choices=("lock", "check"))
    args = ap.parse_args(argv)
    if args.action == "lock":
        changed = uidsandbox.lock(REPO)
        print(f"locked {REPO}: {len(changed)} modes changed (the reference, hidden checks and grader are root's only)")
        return 0
    try:
        sandbox = Sandbox()
    except (RuntimeError, ValueError) as e:
        print(f"isolation: none: {e}", file=sys.stderr)
        return 1
    print(f"isolation: {sandbox.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

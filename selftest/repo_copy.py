"""A copy of this repository's files (what git tracks, and untracked files git
does not ignore) for selftests that change the assignment and check the result."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def copy_repo(dest: Path, *, skip: tuple[str, ...] = ("grader/corpus/cheat/",)) -> Path:
    """Copy the repository's files into ``dest`` (created) and return it; paths
    starting with one of ``skip`` are left out (the cheat corpus: large, and
    nothing a change to the assignment touches)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    for name in sorted({n for n in out.decode().split("\0") if n}):
        src = REPO / name
        if name.startswith(skip) or not src.is_file():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest

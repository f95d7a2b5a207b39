"""The working copy: the only files a worker sees of the grader's side.

:func:`make_working_copy` fills a fresh folder with the submission's
``student/`` (regular files only, capped by :data:`MAX_FILES`,
:data:`MAX_BYTES`, :data:`MAX_DEPTH`; symlinks never followed), the public
harness the worker needs (``tests/__init__.py``, ``tests/wire.py``,
``tests/harness.py``, ``tests/scenarios/``) and the worker script
(:data:`WORKER_SCRIPT`, a copy of grader/worker.py): nothing of
``reference/`` or of ``grader/hidden``.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from grader.util import REPO

WORKER_SCRIPT = "_grader_worker.py"

#: Caps on what is copied from a submission's student/ folder.
MAX_FILES = 2000
MAX_BYTES = 64 << 20
MAX_DEPTH = 32


class SubmissionError(Exception):
    """The submission cannot be graded (no student/, too big, unreadable)."""


def make_working_copy(student: Path, dest: Path) -> Path:
    """Fill ``dest`` with the submission's ``student/`` and the public harness."""
    if not student.is_dir():
        raise SubmissionError(f"no student/ folder in the submission ({student})")
    dest.mkdir(parents=True, exist_ok=True)
    files = total = 0
    for root, dirs, names in os.walk(student, followlinks=False):
        rel = Path(root).relative_to(student)
        if len(rel.parts) >= MAX_DEPTH:  # before os.walk recurses into thousands of levels
            raise SubmissionError(f"student/ is more than {MAX_DEPTH} folders deep")
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (Path(root) / d).is_symlink())
        (dest / "student" / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(names):
            src = Path(root) / name
            st = src.lstat()
            if not stat.S_ISREG(st.st_mode) or name.endswith((".pyc", ".pyo")):
                continue  # symlinks, devices, FIFOs: never followed
            files, total = files + 1, total + st.st_size
            if files > MAX_FILES or total > MAX_BYTES:
                raise SubmissionError(f"student/ is too big (more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB)")
            shutil.copyfile(src, dest / "student" / rel / name, follow_symlinks=False)
    if not (dest / "student" / "__init__.py").is_file():
        (dest / "student" / "__init__.py").write_text("")
    tests = dest / "tests"
    (tests / "scenarios").mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "wire.py", "harness.py"):
        shutil.copyfile(REPO / "tests" / name, tests / name)
    for src in sorted((REPO / "tests" / "scenarios").glob("*.py")):
        shutil.copyfile(src, tests / "scenarios" / src.name)
    shutil.copyfile(Path(__file__).with_name("worker.py"), dest / WORKER_SCRIPT)
    for path in [dest, *dest.rglob("*")]:  # world-readable, read-only for the worker
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest

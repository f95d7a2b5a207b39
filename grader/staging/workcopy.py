"""The working copy: the only files a worker sees of the grader's side.

:func:`make_working_copy` fills a fresh folder with the submission's
``student/`` (its plain modules, regular files only, capped by :data:`MAX_FILES`
and :data:`MAX_BYTES`; symlinks never followed), the public
harness the worker needs (``tests/__init__.py``, ``tests/codec.py``, ``tests/wire.py``,
``tests/harness.py``, ``tests/memwatch.py``, ``tests/scenarios/``), the rubric
(``grader/rubric.toml``, which names the handout's modules, as the student
release ships it) and the worker script (:data:`WORKER_SCRIPT`, a copy of
grader/worker/main.py, with :data:`CONFINE_MODULE` and :data:`SEAL_MODULE`, of
grader/worker/confine.py and seal.py): nothing of ``reference/`` or of
``grader/hidden``.

What Python imports from the working copy must be what the trusted side reads
(the sources of :attr:`grader.sandbox.remote.RemoteImpl`, the similarity report): so
``student/`` may hold plain modules only, ``student/<name>.py``. A folder (a
package, or a namespace package, that would shadow a module), an extension
module, bytecode or a ``.pth`` file makes the submission a
:class:`SubmissionError` (:func:`check_plain_modules`). Other files (notes,
``.DS_Store``) import as nothing and are not copied; ``__pycache__`` is dropped.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import stat
import tempfile
from pathlib import Path

from grader.util import REPO

WORKER_SCRIPT = "_grader_worker.py"
#: The worker's torch.optim seal (a copy of grader/worker/seal.py), beside it.
SEAL_MODULE = "_grader_seal.py"
#: How the worker confines itself (a copy of grader/worker/confine.py), beside it.
CONFINE_MODULE = "_grader_confine.py"

#: Caps on what is copied from a submission's student/ folder.
MAX_FILES = 2000
MAX_BYTES = 64 << 20
#: Caps on what a submission's archive may make when unpacked (grader/staging/submission.py):
#: path depth, and folders (empty ones cost no bytes, but creating, copying and
#: removing each costs time: 60,000 empty folders took minutes to copy and remove).
MAX_DEPTH = 32
MAX_FOLDERS = 1000


class SubmissionError(Exception):
    """The submission cannot be graded (no student/, too big, unreadable)."""


#: Endings of files Python would import or load code from, besides plain ``.py``.
IMPORTABLE_SUFFIXES = tuple(sorted({*importlib.machinery.all_suffixes(), ".so", ".pyd", ".pyc", ".pyo", ".pyw",
                                    ".pth", ".dylib", ".dll"} - {".py"}))


def is_plain_module(name: str) -> bool:
    """Whether ``name`` is a file name Python imports as a plain module (``x.py``)."""
    return name.endswith(".py") and name[:-3].isidentifier()


def check_plain_modules(student: Path) -> None:
    """Raise :class:`SubmissionError` unless every module ``student/`` could
    import is a plain ``.py`` file in it: no folder but ``__pycache__``, no
    extension module, bytecode or ``.pth`` file (links are ignored: never followed)."""
    for entry in sorted(student.iterdir()):
        if entry.is_symlink() or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            raise SubmissionError(
                f"student/{entry.name}/ is a folder: the grader reads and imports plain modules only "
                f"(student/<name>.py), so a package would not be what it reads; move its code into student/*.py")
        if entry.name.endswith(IMPORTABLE_SUFFIXES) or ".so." in entry.name:
            raise SubmissionError(
                f"student/{entry.name} is not a plain Python module (extension modules, bytecode and .pth files "
                "are not graded): submit the .py sources only")


def make_working_copy(student: Path, dest: Path) -> Path:
    """Fill ``dest`` with the submission's ``student/`` and the public harness."""
    if not student.is_dir():
        raise SubmissionError(f"no student/ folder in the submission ({student})")
    check_plain_modules(student)  # so its modules are files directly in it: no folder to walk
    (dest / "student").mkdir(parents=True, exist_ok=True)
    files = total = 0
    for src in sorted(student.iterdir()):
        st = src.lstat()
        if not stat.S_ISREG(st.st_mode) or not is_plain_module(src.name):
            continue  # links, devices, FIFOs: never followed; other files import as nothing
        files, total = files + 1, total + st.st_size
        if files > MAX_FILES or total > MAX_BYTES:
            raise SubmissionError(f"student/ is too big (more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB)")
        shutil.copyfile(src, dest / "student" / src.name, follow_symlinks=False)
    if not (dest / "student" / "__init__.py").is_file():
        (dest / "student" / "__init__.py").write_text("")
    (dest / "grader").mkdir(exist_ok=True)  # the handout's modules, as the trusted side reads them (tests/__init__.py)
    shutil.copyfile(REPO / "grader" / "rubric.toml", dest / "grader" / "rubric.toml")
    tests = dest / "tests"
    (tests / "scenarios").mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "codec.py", "wire.py", "harness.py", "memwatch.py"):
        shutil.copyfile(REPO / "tests" / name, tests / name)
    for src in sorted((REPO / "tests" / "scenarios").glob("*.py")):
        shutil.copyfile(src, tests / "scenarios" / src.name)
    worker = Path(__file__).resolve().parent.parent / "worker"
    shutil.copyfile(worker / "main.py", dest / WORKER_SCRIPT)
    shutil.copyfile(worker / "seal.py", dest / SEAL_MODULE)
    shutil.copyfile(worker / "confine.py", dest / CONFINE_MODULE)
    for path in [dest, *dest.rglob("*")]:  # world-readable, read-only for the worker
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def private_copy(work: Path) -> Path:
    """A copy of the working copy ``work`` for one worker, beside it: its own
    files and inodes, so that nothing one worker does to them (an ``flock``,
    a lease) is seen by another worker of the same submission. ``work`` is the
    grader's own copy (regular files and folders only); remove the copy with
    :func:`grader.sandbox.scratch.remove_tree` once its worker is gone."""
    dest = Path(tempfile.mkdtemp(prefix=f"{work.name}-", dir=work.parent))
    shutil.copytree(work, dest, dirs_exist_ok=True, symlinks=True)
    # The copy's owners and modes are the original's: in uid mode the working
    # copy is root:gid 0750/0640 (grader/sandbox/uidsandbox.py hand_over), readable by
    # this grading's worker only, not by another grading's.
    for path in [dest, *dest.rglob("*")]:
        st = (work / path.relative_to(dest)).lstat()
        if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
        path.chmod(st.st_mode & 0o777)
    return dest

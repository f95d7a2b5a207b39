"""What the grader is handed for one submission, or why it cannot be graded.

Contract: nothing here follows a symbolic link (it could name the reference, a
classmate's files or a device); links are rejected with their name. Nothing is
extracted or run: zips are only listed and tested. The only files written are
the staged copy of loose modules, under the ``staging`` folder given.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from pathlib import Path

from grader.instructor.discovery import IGNORED, entry_kind
from grader.sandbox.scratch import remove_tree
from grader.staging.submission import EXPECTED_LAYOUT, find_student, names_hold_work
from grader.staging.workcopy import MAX_BYTES, SubmissionError
from tests import handout_problems

__all__ = ["precheck"]


def _zip_student(path: Path) -> tuple[str, str]:
    """("graded", "") when ``path`` is a readable zip holding the work in a layout the grader finds
    (:func:`grader.staging.submission.names_hold_work`), else the status ("bad zip", "no student/")
    and the reason, which never repeats the status (reports print "status: reason")."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                return "bad zip", f"its member {bad} is corrupt"
            names = z.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError,
            NotImplementedError) as e:  # corrupt streams, encrypted or unsupported members
        return "bad zip", f"it cannot be read as a zip ({type(e).__name__}: {str(e)[:200]})"
    if names_hold_work(names):
        return "graded", ""
    return "no student/", EXPECTED_LAYOUT


def precheck(path: Path, staging: Path | None = None) -> tuple[Path | None, str, str]:
    """What to hand the grader for this submission, or why not.

    Returns ``(target, status, reason)``: ``target`` is ``None`` when the
    submission cannot be graded (``status`` "bad zip", "no student/" or
    "rejected", ``reason`` says why, without repeating the status), else
    ``status`` is "graded".
    A folder holding no ``student/`` but exactly one zip (a student who uploaded
    their zip to Gradescope) is graded through that zip; one holding the handout's
    modules loose (``precision.py``... dragged into Gradescope's upload box) is
    graded as if they were in ``student/``: a copy is staged under ``staging``.
    Anything else goes to the grader's own search
    (:func:`grader.staging.submission.find_student`: ``student/`` deeper down, a
    repository, modules loose in a folder), exactly as the Gradescope bundle's
    run_autograder grades an upload; the reason when nothing is found is the
    grader's one sentence on the layouts expected.
    """
    try:
        return _precheck(path, staging)
    except (OSError, ValueError, RuntimeError) as e:  # unreadable entries, names too long, too deep...
        return None, "rejected", f"the submission could not be read: {type(e).__name__}: {str(e)[:200]}"


def _precheck(path: Path, staging: Path | None) -> tuple[Path | None, str, str]:
    kind = entry_kind(path)
    if kind == "link":
        return None, "rejected", f"{path.name} is a symbolic link (never followed)"
    if kind == "file":
        status, reason = _zip_student(path)
        return (path if status == "graded" else None), status, reason
    if kind != "dir":
        return None, "rejected", f"{path.name} is not a regular file or folder"
    entries = sorted(path.iterdir(), key=lambda p: p.name)
    kinds = {p.name: entry_kind(p) for p in entries}
    if kinds.get("student") == "dir":
        return path, "graded", ""
    if kinds.get("student") == "link":
        return None, "rejected", "student is a symbolic link (never followed)"
    subdirs = [p for p in entries if kinds[p.name] == "dir" and p.name not in IGNORED and not p.name.startswith(".")]
    nested = {p.name: entry_kind(p / "student") for p in subdirs}
    if "link" in nested.values():
        return None, "rejected", f"{next(n for n, k in nested.items() if k == 'link')}/student is a symbolic link " \
                                 "(never followed)"
    if "dir" in nested.values():
        return path, "graded", ""
    zips = [p for p in entries if p.suffix.lower() == ".zip" and kinds[p.name] in ("file", "link")]
    if len(zips) == 1:
        if kinds[zips[0].name] == "link":
            return None, "rejected", f"{zips[0].name} is a symbolic link (never followed)"
        status, reason = _zip_student(zips[0])
        if status == "graded":
            return zips[0], status, ""
        return None, status, f"{zips[0].name}: {reason}"
    loose = [p for p in entries if p.suffix == ".py" and p.stem in handout_problems()]
    if loose and staging is not None:
        odd = [p.name for p in entries if p.suffix == ".py" and kinds[p.name] != "file"]
        if odd:
            return None, "rejected", f"{', '.join(odd)}: not regular files (symbolic links are never followed)"
        pkg = staging / "student"
        remove_tree(staging)
        pkg.mkdir(parents=True)
        for p in entries:
            if p.suffix == ".py" and kinds[p.name] == "file":
                _copy_regular(p, pkg / p.name)
        if not (pkg / "__init__.py").exists():
            (pkg / "__init__.py").write_text("")
        return staging, "graded", ""
    if staging is not None:  # student/ deeper down, or loose modules in a folder: as the grader finds them
        remove_tree(staging)
        try:
            found = find_student(path, staging)
            return (staging if found == staging else path), "graded", ""  # (the grader finds a student/ again)
        except SubmissionError as e:
            return None, "no student/", str(e)
    return None, "no student/", EXPECTED_LAYOUT


def _copy_regular(src: Path, dest: Path, cap: int = MAX_BYTES) -> None:
    """Copy the regular file ``src``: opened without following a link (so a
    link swapped in after the check is refused, not followed), checked to be
    a regular file, at most ``cap`` bytes."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise ValueError(f"{src.name} is not a regular file of at most {cap >> 20} MiB")
        dest.write_bytes(f.read(cap + 1)[:cap])

"""Finding a submission's ``student/`` folder, in a folder or a zip archive.

Zip archives are extracted defensively: no absolute paths or ``..``, no
symlinks or special files, caps on the number of members, on the folders they
make and on their total uncompressed size (a zip bomb stops at the cap), a
time limit, and ``student/`` may sit one
folder deep (as Gradescope and GitHub exports nest it).
"""

from __future__ import annotations

import os
import stat
import time
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from grader.sandbox.workcopy import MAX_BYTES, MAX_DEPTH, MAX_FILES, MAX_FOLDERS, SubmissionError

MAX_MEMBERS = 4 * MAX_FILES
#: Wall-clock seconds unpacking may take (a bound on the grader's own work,
#: which no per-call limit covers).
UNPACK_SECONDS = 60.0


def _find_student(root: Path) -> Path:
    """The folder holding ``student/``: ``root`` itself or one folder below it."""
    if (root / "student").is_dir() and not (root / "student").is_symlink():
        return root
    candidates = sorted(d for d in root.iterdir()
                        if d.is_dir() and not d.is_symlink() and (d / "student").is_dir()
                        and not (d / "student").is_symlink() and not d.name.startswith(("__MACOSX", ".")))
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise SubmissionError(f"several student/ folders in the submission: {[c.name for c in candidates]}")
    raise SubmissionError("the submission holds no student/ folder (expected student/__init__.py and "
                          "your modules, at the top or one folder deep)")


def extract_zip(archive: Path, dest: Path) -> Path:
    """Safely extract ``archive`` into ``dest``; return the folder holding ``student/``.

    Whatever is wrong with the archive (a corrupt member, a path too long or too
    deep, a file where a folder must go, an unsupported compression) is a
    :class:`SubmissionError` saying so, never a crash of the grader."""
    try:
        return _extract(archive, dest)
    except SubmissionError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
            RuntimeError, NotImplementedError) as e:  # RecursionError is a RuntimeError
        raise SubmissionError(f"{archive.name} could not be unpacked: {type(e).__name__}: {str(e)[:300]}") from None


def _extract(archive: Path, dest: Path) -> Path:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise SubmissionError(f"{archive.name} is not a readable zip archive ({e})") from None
    dest.mkdir(parents=True, exist_ok=True)
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise SubmissionError(f"the archive has {len(infos)} members (limit {MAX_MEMBERS})")
        _check_folders(archive.name, infos)
        deadline = time.monotonic() + UNPACK_SECONDS
        total = 0
        for info in infos:
            if time.monotonic() > deadline:
                raise SubmissionError(f"{archive.name} could not be unpacked within {UNPACK_SECONDS:g} s")
            name = PurePosixPath(info.filename.replace("\\", "/"))
            if name.is_absolute() or ".." in name.parts or (name.parts and ":" in name.parts[0]):
                raise SubmissionError(f"unsafe path in the archive: {info.filename!r}")
            mode = info.external_attr >> 16
            if info.is_dir():
                if len(name.parts) > MAX_DEPTH:
                    raise SubmissionError(f"{archive.name}: a path in it is more than {MAX_DEPTH} folders deep")
                (dest / name).mkdir(parents=True, exist_ok=True)
                continue
            if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                continue  # symlinks and special files are dropped, never followed
            if "__pycache__" in name.parts:
                continue
            if len(name.parts) > MAX_DEPTH:
                raise SubmissionError(f"{archive.name}: a path in it is more than {MAX_DEPTH} folders deep")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            # A new regular file, never through a link (nothing here makes links,
            # and O_EXCL|O_NOFOLLOW would refuse one).
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with zf.open(info) as src, open(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    total += len(chunk)
                    if total > MAX_BYTES:
                        raise SubmissionError(f"the archive holds more than {MAX_BYTES >> 20} MiB")
                    out.write(chunk)
    return _find_student(dest)


def _check_folders(archive: str, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse, before anything is written, an archive whose members make more
    than :data:`MAX_FOLDERS` folders (empty folder entries and the parents of
    every member alike) or any path more than :data:`MAX_DEPTH` deep."""
    folders: set[PurePosixPath] = set()
    for info in infos:
        name = PurePosixPath(info.filename.replace("\\", "/"))
        if len(name.parts) > MAX_DEPTH:
            raise SubmissionError(f"{archive}: a path in it is more than {MAX_DEPTH} folders deep")
        folders.update(name.parents if not info.is_dir() else (name, *name.parents))
        if len(folders) > MAX_FOLDERS + 1:  # + 1: PurePosixPath(".") is every path's last parent
            raise SubmissionError(f"{archive} could not be unpacked: it makes more than {MAX_FOLDERS} folders")


def locate(submission: Path, scratch: Path) -> Path:
    """The folder holding the submission's ``student/`` (extracting a zip into ``scratch``)."""
    if not submission.exists():
        raise SubmissionError(f"{submission} does not exist")
    if submission.is_file():
        return extract_zip(submission, scratch)
    if submission.name == "student" and (submission / "__init__.py").is_file():
        return submission.parent  # the student/ folder itself was given
    return _find_student(submission)

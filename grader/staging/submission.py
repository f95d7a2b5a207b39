"""Finding a submission's ``student/`` folder, in a folder or a zip archive.

Uploads come as students make them (:func:`find_student`): a ``student/``
folder at the top, or up to :data:`MAX_NESTING` folders down (a zip of a
folder, a repository), else the handout's modules loose (``precision.py``...
dragged into Gradescope's upload box, or zipped without their folder), which
are staged into a ``student/`` of the grader's own. Nothing here follows a
symbolic link.

Zip archives are extracted defensively: no absolute paths or ``..``, no
symlinks or special files, caps on the number of members, on the folders they
make and on their total uncompressed size (a zip bomb stops at the cap), a
time limit.
"""

from __future__ import annotations

import os
import stat
import time
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from grader.staging.workcopy import MAX_BYTES, MAX_DEPTH, MAX_FILES, MAX_FOLDERS, SubmissionError

MAX_MEMBERS = 4 * MAX_FILES
#: Wall-clock seconds unpacking may take (a bound on the grader's own work,
#: which no per-call limit covers).
UNPACK_SECONDS = 60.0


#: How many folders deep ``student/`` (or the loose modules) may sit below an
#: upload's top: ``Downloads/lab-main/student/`` in a zip is 2.
MAX_NESTING = 3
#: Folders never searched (besides hidden ones: ``.git``, ``.venv``).
_NOT_SEARCHED = frozenset({"__MACOSX", "__pycache__", "node_modules", "site-packages", "venv", "env"})
#: What a student reads when nothing is found: the layouts accepted, in one sentence.
EXPECTED_LAYOUT = ("neither a student/ folder nor any of the handout's modules (precision.py, views.py, ...) "
                   "was found: upload your student/ folder, a zip holding it, or the modules themselves, "
                   "loose or zipped")


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder, never following a link."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _levels(root: Path) -> list[list[Path]]:
    """The folders searched, by depth below ``root`` (0 to :data:`MAX_NESTING`):
    no links, hidden folders or :data:`_NOT_SEARCHED`; at most MAX_FOLDERS in all."""
    levels, count = [[root]], 1
    for _ in range(MAX_NESTING):
        below = []
        for folder in levels[-1]:
            with os.scandir(folder) as entries:
                for e in sorted(entries, key=lambda e: e.name):
                    if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") \
                            and e.name not in _NOT_SEARCHED:
                        below.append(Path(e.path))
                        count += 1
                if count > MAX_FOLDERS:
                    raise SubmissionError(f"the submission has more than {MAX_FOLDERS} folders near its top")
        if not below:
            break
        levels.append(below)
    return levels


def _modules() -> frozenset[str]:
    """The handout's module file names (``precision.py``...), from the rubric."""
    from tests import handout_problems  # (reads the rubric: nothing heavy)

    return frozenset(f"{name}.py" for name in handout_problems())


def names_hold_work(names: list[str]) -> bool:
    """Whether an archive's member ``names`` hold what :func:`find_student`
    looks for (a ``student/`` folder, or a handout module, within
    :data:`MAX_NESTING` folders of the top, not under a hidden or never-searched
    folder): a listing's answer, for whoever must decide without extracting."""
    modules = _modules()
    for name in names:
        *folders, base = name.replace("\\", "/").split("/")
        for depth, folder in enumerate(folders):
            if folder.startswith(".") or folder in _NOT_SEARCHED or depth > MAX_NESTING:
                break
            if folder == "student":
                return True
        else:
            if base in modules and len(folders) <= MAX_NESTING:
                return True
    return False


def _one(holders: list[Path], root: Path, what: str) -> Path | None:
    if len(holders) > 1:
        names = ", ".join(str(h.relative_to(root)) or "." for h in holders)
        raise SubmissionError(f"several {what} in the submission ({names}): upload one")
    return holders[0] if holders else None


def find_student(root: Path, staging: Path) -> Path:
    """The folder holding the submission's ``student/``, searched in ``root``.

    The shallowest ``student/`` folder wins (two at that depth: an error naming
    them); without one, the shallowest folder holding handout modules loose has
    its ``.py`` files (regular files only; a link among them is refused) copied
    to ``staging/student/`` (with an empty ``__init__.py`` unless uploaded), and
    ``staging`` is returned. Neither: a :class:`SubmissionError` saying, in one
    sentence, which layouts are accepted (:data:`EXPECTED_LAYOUT`)."""
    levels = _levels(root)
    for level in levels:
        found = _one([d for d in level if _is_dir(d / "student")], root, "student/ folders")
        if found is not None:
            return found
    modules = _modules()
    for level in levels:
        found = _one([d for d in level if any((d / m).is_file() or (d / m).is_symlink() for m in modules)],
                     root, "folders of loose modules")
        if found is not None:
            return _stage_loose(found, staging)
    raise SubmissionError(EXPECTED_LAYOUT)


def _stage_loose(folder: Path, staging: Path) -> Path:
    """Copy ``folder``'s ``.py`` files into ``staging/student/``; return ``staging``."""
    pkg = staging / "student"
    pkg.mkdir(parents=True)
    total = 0
    for path in sorted(folder.iterdir()):
        if path.suffix != ".py":
            continue
        # Opened without following a link, then checked to be a regular file.
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            raise SubmissionError(f"{path.name} is not a regular file (symbolic links are never followed)") from None
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise SubmissionError(f"{path.name} is not a regular file")
            data = f.read(MAX_BYTES + 1)
        total += len(data)
        if total > MAX_BYTES:
            raise SubmissionError(f"the submission's modules hold more than {MAX_BYTES >> 20} MiB")
        (pkg / path.name).write_bytes(data)
    if not (pkg / "__init__.py").exists():
        (pkg / "__init__.py").write_text("")
    return staging


def extract_zip(archive: Path, dest: Path) -> Path:
    """Safely extract ``archive`` into ``dest/zip``; return the folder holding
    ``student/`` (:func:`find_student`; loose modules are staged in ``dest/loose``).

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


def _extract(archive: Path, scratch: Path) -> Path:
    dest = scratch / "zip"
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
    return find_student(dest, scratch / "loose")


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
    """The folder holding the submission's ``student/`` (a zip is extracted, loose
    modules staged, under ``scratch``). A folder holding no ``student/`` nor loose
    modules but exactly one zip at its top (an upload of the zip) is that zip."""
    if not submission.exists():
        raise SubmissionError(f"{submission} does not exist")
    if submission.is_file():
        return extract_zip(submission, scratch)
    if submission.name == "student" and (submission / "__init__.py").is_file():
        return submission.parent  # the student/ folder itself was given
    try:
        return find_student(submission, scratch / "loose")
    except SubmissionError as e:
        zips = [p for p in submission.iterdir() if p.suffix.lower() == ".zip"]
        if str(e) != EXPECTED_LAYOUT or len(zips) != 1 or zips[0].is_symlink() or not zips[0].is_file():
            raise
        return extract_zip(zips[0], scratch / "upload")

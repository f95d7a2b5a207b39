"""Which submissions a class holds: discovery, ids, shards and export zips.

Contract: a submission is a folder, a ``.zip`` or a symbolic link (listed so
that the precheck rejects it by name; never followed) directly inside the
submissions folder; hidden entries, ``__MACOSX`` and Gradescope's
``submission_metadata.yml`` are not submissions. Each gets an ``id`` that is a
safe file name, distinct from every other entry's, stable across runs (it
names the results file and the gradebook row) and independent of the other
entries, so that a shard (a hash of the id) never moves.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import stat
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor.gradescope_export import MetadataError, parse_gradescope_metadata

__all__ = ["IGNORED", "Submission", "discover", "entry_kind", "parse_shard", "shard_index", "unpack_export"]

#: Entries of an export that are never submissions.
IGNORED = frozenset({"__MACOSX", "submission_metadata.yml", "submission_metadata.yaml"})


@dataclass
class Submission:
    """One submission: ``id`` names its results file and gradebook row;
    ``submitters`` (name, sid, email) come from Gradescope's metadata, if any."""

    id: str
    path: Path
    submitters: list[dict[str, str]] = field(default_factory=list)


def _safe_id(name: str) -> str:
    stem = name[:-4] if name.lower().endswith(".zip") else name
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem).strip("._") or "submission"


def record_id(name: str) -> str:
    """The id of the entry ``name``: its name (without ``.zip``) when that is
    already a safe file name, else the safe form plus a hash of the original,
    so that two different names ("a b", "a_b") never share a record."""
    stem = name[:-4] if name.lower().endswith(".zip") else name
    safe = _safe_id(name)
    return safe if safe == stem else f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def entry_kind(path: Path) -> str:
    """"dir", "file", "link" or "other" (device, FIFO, socket), never following a link."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "other"
    return ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
            else "link" if stat.S_ISLNK(mode) else "other")


def _metadata(root: Path) -> dict[str, list[dict[str, str]]]:
    """Gradescope's submitters for the export in ``root`` ({} without metadata, or
    with metadata outside what :mod:`.gradescope_export` reads: then a warning)."""
    meta_file = next((root / n for n in ("submission_metadata.yml", "submission_metadata.yaml")
                      if (root / n).is_file()), None)
    if meta_file is None:
        return {}
    try:
        return parse_gradescope_metadata(meta_file.read_text(errors="replace"))
    except MetadataError as e:
        print(f"{meta_file}: not read ({e}); submitters left blank", file=sys.stderr, flush=True)
        return {}


def discover(root: Path, exclude: Iterable[Path] = ()) -> list[Submission]:
    """The submissions directly inside ``root`` (folders, zips and links), sorted by
    id; ``exclude``: paths inside ``root`` that are not submissions (the output folder)."""
    excluded = {p.resolve() for p in exclude}
    meta = _metadata(root)
    subs: list[Submission] = []
    seen: set[str] = set()
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name in IGNORED or entry.resolve() in excluded:
            continue
        kind = entry_kind(entry)
        # A link is listed (and rejected by precheck, so the instructor sees it), never followed.
        if not (kind in ("dir", "link") or (kind == "file" and entry.suffix.lower() == ".zip")):
            continue
        sid = base = record_id(entry.name)
        k = 2
        while sid in seen:  # "alice/" and "alice.zip": both are graded, under distinct ids
            sid, k = f"{base}-{k}", k + 1
        seen.add(sid)
        people = meta.get(entry.name) or meta.get(entry.stem) or []
        subs.append(Submission(sid, entry, people))
    return subs


def shard_index(submission_id: str, shards: int) -> int:
    """The shard of a submission: a hash of its id, so it does not move when
    other submissions are added or removed (a resumed shard stays valid)."""
    digest = hashlib.sha256(submission_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` as ``(i, N)`` with ``0 <= i < N`` (argparse's type for ``--shard``)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--shard expects i/N with 0 <= i < N, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def unpack_export(archive: Path, dest: Path) -> Path:
    """Extract an export zip into ``dest`` (refusing members that escape it, before
    extracting any); return the folder holding the submissions (the zip's single
    top folder if it has one, else ``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            target = (dest / name).resolve()
            if not target.is_relative_to(dest.resolve()):
                raise ValueError(f"{archive}: member {name!r} escapes the extraction folder")
        z.extractall(dest)
    entries = [p for p in dest.iterdir() if p.name not in IGNORED and not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest

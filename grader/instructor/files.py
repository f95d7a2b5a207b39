"""Files the instructor workflows write: atomically, and from templates.

Contract: a reader of a file written here only ever sees the old file or the
complete new one (temporary file in the same folder, fsync, rename), even when
the writer is killed midway.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["TEMPLATES", "render", "write_atomic", "write_json_atomic"]

#: The workflows' templates (Slurm, Gradescope, the release's README and CI).
TEMPLATES = Path(__file__).resolve().parent / "templates"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8, newlines untranslated) to ``path`` atomically,
    creating its folder if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def render(template: str, values: dict[str, str]) -> str:
    """Fill the ``{{name}}`` placeholders of ``template`` from ``values`` (a
    missing name raises KeyError); the templates' own ``${...}`` belong to bash
    and are left alone."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)

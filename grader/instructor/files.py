"""Files the instructor workflows write: atomically, and from templates.

Contract: a reader of a file written here only ever sees the old file or the
complete new one, even when the writer is killed midway (``grader.util.write_atomic``,
re-exported here for the workflows).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grader.util import write_atomic

__all__ = ["TEMPLATES", "render", "write_atomic", "write_json_atomic"]

#: The workflows' templates (Slurm, Gradescope, the release's README and CI).
TEMPLATES = Path(__file__).resolve().parent / "templates"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def render(template: str, values: dict[str, str]) -> str:
    """Fill the ``{{name}}`` placeholders of ``template`` from ``values`` (a
    missing name raises KeyError); the templates' own ``${...}`` belong to bash
    and are left alone."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)

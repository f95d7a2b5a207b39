"""Files the instructor workflows write: atomically, and from templates.

Contract: a reader of a file written here only ever sees the old file or the
complete new one, even when the writer is killed midway (built on
``grader.util.write_atomic``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from grader.util import write_atomic

__all__ = ["TEMPLATES", "csv_text", "render", "spreadsheet_cell", "write_json_atomic"]

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


#: What makes a spreadsheet read a cell as a formula (or a command): OWASP's
#: "CSV injection" list. TAB and CR hide a formula behind leading white space.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text, never runs: a string
    that starts like a formula (``=HYPERLINK(...)``, ``@SUM(...)``, ``+1+1``, a
    leading TAB or CR, or one of those after spaces) gets a leading apostrophe,
    which spreadsheets hide. A CR inside becomes a newline: the csv module
    would not quote it, and a reader would start a row (and a formula) there.
    Numbers, and strings that are plain numbers (``-1.5``), stay as they are."""
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        return value
    if value.startswith(_FORMULA_START) or value.lstrip(" ").startswith(_FORMULA_START):
        value = "'" + value
    return value.replace("\r\n", "\n").replace("\r", "\n")


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A CSV file (``\\n`` line ends) of ``header`` and ``rows``, every cell through
    :func:`spreadsheet_cell`: names, ids and emails come from students and
    Gradescope's metadata, and a spreadsheet must not run them."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([spreadsheet_cell(c) for c in header])
    for row in rows:
        w.writerow([spreadsheet_cell(c) for c in row])
    return buf.getvalue()

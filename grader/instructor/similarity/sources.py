"""The sources the similarity report compares: submissions staged as the
grader stages them, the reference, torch.optim's modules, the correct corpus's
solutions and the stubs, each as text per handout module (never imported).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import tokenize
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader.corpus import REFERENCE_LINE, correct_lineage, correct_submissions, honest_solutions
from grader.instructor.discovery import Submission, discover
from grader.instructor.precheck import precheck
from grader.instructor.similarity.settings import (
    HANDOUT_MODULES,
    HONEST_PREFIX,
    LIBRARY_ID,
    LIBRARY_SKIPPED,
    MAX_FILE_BYTES,
    REFERENCE_ID,
)
from grader.staging.submission import locate
from grader.staging.workcopy import SubmissionError, is_plain_module, make_working_copy
from grader.util import REPO


@dataclass
class Source:
    """One submission's code per handout module (or the reference's, or
    torch.optim's): what :func:`module_units` makes of its files."""

    id: str
    submitters: str = ""
    files: dict[str, str] = field(default_factory=dict)
    skipped: str = ""  # why it could not be staged (then ``files`` is empty)


@dataclass(frozen=True)
class Solution:
    """A correct solution the project holds (the reference or an entry of the
    correct corpus): its code per handout module, and its line (solutions of
    different lines were written apart; :func:`grader.corpus.correct_lineage`)."""

    name: str
    line: str
    files: dict[str, str]




def _people(sub: Submission) -> str:
    text = "; ".join(p.get("name") or p.get("email") or p.get("sid", "") for p in sub.submitters)
    return "'" + text if text.startswith(("=", "+", "-", "@")) else text  # no spreadsheet formulas


def _read(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return None
    with open(path, "rb") as f:
        return f.read(MAX_FILE_BYTES).decode("utf-8", "replace")


def _own_imports(text: str) -> set[str] | None:
    """The package's own modules ``text`` imports statically (``from . import x``,
    ``from ._x import y``, ``import student.x``...); None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            if node.level == 0:
                if not parts or parts[0] not in ("student", "reference"):
                    continue
                parts = parts[1:]
            elif node.level > 1:
                continue  # above the package
            if parts:
                found.add(parts[0])
            else:  # from . import x, y
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] in ("student", "reference") and len(parts) > 1:
                    found.add(parts[1])
    return found


def module_units(files: dict[str, str]) -> dict[str, str]:
    """Per handout module in ``files`` (module name -> text, every plain module of
    a package), the code importing it runs: the module, then the other modules
    it and ``__init__`` import (transitively, handout modules excepted: each is
    compared as itself), then every helper that no handout module imports
    statically. Each file starts with a ``# student/<name>.py`` line (a comment:
    not compared)."""
    handout = set(HANDOUT_MODULES)
    imports = {name: _own_imports(text) for name, text in files.items()}

    def closure(start: str) -> list[str]:
        seen, todo = [], [start, "__init__"]
        while todo:
            name = todo.pop(0)
            if name in seen or name not in files or (name in handout and name != start):
                continue
            seen.append(name)
            todo += sorted(imports[name] or ())
        return seen

    units = {m: closure(m) for m in HANDOUT_MODULES if m in files}
    reached = {n for names in units.values() for n in names}
    helpers = sorted(n for n in files if n not in handout and n not in reached)
    if any(v is None for v in imports.values()):  # what it imports is unknown: every helper may be
        helpers = sorted(n for n in files if n not in handout)
    return {m: "\n".join(f"# student/{n}.py\n{files[n]}" for n in dict.fromkeys([*names, *helpers]))
            for m, names in units.items()}


def _modules(package: Path) -> dict[str, str]:
    """Every plain module of ``package`` (a staged ``student/``), by name."""
    files = {}
    for path in sorted(package.iterdir()):
        if is_plain_module(path.name) and (text := _read(path)) is not None:
            files[path.name[:-3]] = text
    return files


def stage(root: Path, tmp: Path, exclude: Iterable[Path] = ()) -> list[Source]:
    """The submissions in ``root`` as texts, staged exactly as the batch grades them."""
    sources = []
    for sub in discover(root, exclude=exclude):
        src = Source(sub.id, _people(sub))
        sources.append(src)
        target, _, reason = precheck(sub.path, tmp / "staged" / sub.id)
        if target is None:
            src.skipped = reason
            continue
        try:
            folder = locate(target.resolve(), tmp / "unpacked" / sub.id)
            work = make_working_copy(folder / "student", tmp / "work" / sub.id)
        except (SubmissionError, OSError, zipfile.BadZipFile) as e:
            src.skipped = str(e)
            continue
        src.files = module_units(_modules(work / "student"))
    return sources


def reference_source(repo: Path = REPO) -> Source | None:
    """The reference solutions as a source, where this checkout has them."""
    if not (repo / "reference").is_dir():
        return None
    return Source(REFERENCE_ID, "", module_units(_modules(repo / "reference")))


def library_source() -> Source | None:
    """torch.optim's optimizer sources (read from the installed torch, which is
    not imported) as the ``optimizers`` of one more source; None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    optim = Path(spec.origin).parent / "optim"
    texts = [f"# torch/optim/{path.relative_to(optim)}\n{text}" for path in sorted(optim.rglob("*.py"))
             if path.name not in LIBRARY_SKIPPED and (text := _read(path)) is not None]
    return Source(LIBRARY_ID, "", {"optimizers": "\n".join(texts)}) if texts else None


def correct_solutions(repo: Path = REPO) -> list[Solution]:
    """The reference and every entry of the correct corpus as solutions, with
    their lines; [] without ``reference/`` (a checkout without solutions).
    A ``.toml`` entry is the reference patched; a folder entry is its own
    modules only (what it imports from the reference is the reference's)."""
    if not (repo / "reference").is_dir():
        return []
    reference = _modules(repo / "reference")
    out = [Solution(REFERENCE_ID, REFERENCE_LINE, module_units(reference))]
    lines = correct_lineage()
    for entry in correct_submissions():
        if entry.patches:
            files = dict(reference)
            for file, find, replace in entry.patches:
                files[file.removesuffix(".py")] = files[file.removesuffix(".py")].replace(find, replace, 1)
        else:
            files = {path.stem: text for path in entry.modules if (text := _read(path)) is not None}
        out.append(Solution(entry.name, lines[entry.name], module_units(files)))
    for sol in honest_solutions():
        files = {path.stem: text for path in sol.modules if (text := _read(path)) is not None}
        out.append(Solution(f"{HONEST_PREFIX}{sol.name}", f"{HONEST_PREFIX}{sol.name}", module_units(files)))
    return out


def stubs_of(repo: Path = REPO) -> dict[str, str]:
    """The handout's stubs by module, as :func:`module_units` makes them (each
    stub with the stubs' ``__init__``): their fingerprints never count."""
    return module_units(_modules(repo / "student")) if (repo / "student").is_dir() else {}


def without_imports(text: str) -> str:
    """``text`` with every import statement blanked to spaces (newlines kept,
    so offsets into it are offsets into ``text``); ``text`` itself when Python
    cannot tokenize it. The handout says what to import, and the same imports
    in the same order are no evidence of copying."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):  # IndentationError included
        return text
    starts = np.cumsum([0, *map(len, text.splitlines(keepends=True))])  # offset of each line (1-based rows)
    chars = list(text)
    begin, at_start = None, True
    for tok in tokens:
        if tok.type == tokenize.NEWLINE:  # the end of a logical line
            if begin is not None:
                for i in range(begin, starts[tok.end[0] - 1] + tok.end[1]):
                    if chars[i] != "\n":
                        chars[i] = " "
            begin, at_start = None, True
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            if at_start and tok.type == tokenize.NAME and tok.string in ("import", "from"):
                begin = int(starts[tok.start[0] - 1] + tok.start[1])
            at_start = False
    return "".join(chars)



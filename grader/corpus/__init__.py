"""The corpus of known-wrong and cheating submissions (instructors only).

``wrong/<problem>-<bug>.toml`` describes one classic bug as a patch to the
reference: the submission is ``reference/`` copied as ``student/`` with the
patch's ``find`` text replaced by ``replace`` in ``file``. It must lose points
in ``problem`` only: exactly the points of the rubric items listed in ``breaks``
(the items whose public tests catch the bug) where it has that list, and keep
the other items' points. Keeping patches (not copies) shows the bug at a glance
and fails loudly when the reference changes under it.

``correct/<problem>-<style>`` is the opposite: a correct solution written in
another style than the reference (per-parameter loops, textbook formulas, other
segmentations), which must get full marks. It is either a ``.toml`` patch like
the wrong ones, or a folder of whole modules that replace the reference's.


``honest/<name>/`` is one complete solution of every handout module (the
modules of a ``student/`` package), written by one writer from the handout and
the stubs alone, apart from the reference and from every other solution, in a
style of its own (``honest/README.md`` says who wrote each and how). Each gets
full marks; the similarity report measures its false flags on their pairs
(:func:`honest_solutions`).

``correct_lineage.toml`` says which correct entries are edited copies of
another entry or of the reference (:func:`correct_lineage`): the similarity
report treats what solutions written apart share as expected code.

``cheat/<name>/`` holds whole hostile submissions (see its README). A cheat
that needs an otherwise correct module (to show that its attack, not a missing
function, is what loses the points) has a ``from_reference.toml``: its
submission is ``reference/`` patched like a wrong submission, with the
folder's ``student/`` files laid over it (:func:`build_cheat`).
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.util import tomllib

CORPUS = Path(__file__).resolve().parent
REPO = CORPUS.parent.parent


@dataclass(frozen=True)
class WrongSubmission:
    name: str
    problem: str
    description: str
    patches: tuple[tuple[str, str, str], ...]  # (file, find, replace)
    breaks: tuple[str, ...] = ()  # the rubric items of ``problem`` it must lose (empty: not stated)


def wrong_submissions() -> list[WrongSubmission]:
    out = []
    for path in sorted((CORPUS / "wrong").glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        patches = tuple((p["file"], p["find"], p["replace"]) for p in spec["patch"])
        out.append(WrongSubmission(path.stem, spec["problem"], spec["description"], patches,
                                   tuple(spec.get("breaks", ()))))
    return out


def build_wrong(sub: WrongSubmission, dest: Path) -> Path:
    """Write the submission folder (holding ``student/``) under ``dest``; return it."""
    folder = dest / sub.name
    pkg = folder / "student"
    shutil.copytree(REPO / "reference", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for file, find, replace in sub.patches:
        target = pkg / file
        text = target.read_text()
        if text.count(find) != 1:
            raise ValueError(f"{sub.name}: the text to replace occurs {text.count(find)} times in {file}")
        target.write_text(text.replace(find, replace))
    return folder


def build_cheat(name: str, dest: Path) -> Path:
    """The submission folder of cheat ``name``: the folder itself, or (with a
    ``from_reference.toml``) the patched reference with its files laid over it,
    written under ``dest``."""
    folder = CORPUS / "cheat" / name
    spec_path = folder / "from_reference.toml"
    if not spec_path.is_file():
        return folder
    spec = tomllib.loads(spec_path.read_text())
    patches = tuple((p["file"], p["find"], p["replace"]) for p in spec.get("patch", []))
    built = build_wrong(WrongSubmission(name, "", spec.get("description", ""), patches), dest)
    for src in sorted((folder / "student").rglob("*")):
        if src.is_file():
            target = built / "student" / src.relative_to(folder / "student")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
    return built


@dataclass(frozen=True)
class CorrectSubmission:
    name: str
    problem: str
    description: str
    patches: tuple[tuple[str, str, str], ...]  # (file, find, replace), for a .toml entry
    modules: tuple[Path, ...]  # whole modules replacing the reference's, for a folder entry
    #: a pytest -k expression: the tests that reach the patched function (a patch
    #: to one function need not rerun the whole problem); "" runs them all
    only: str = ""


def correct_submissions() -> list[CorrectSubmission]:
    out = []
    for path in sorted((CORPUS / "correct").iterdir()):
        problem = path.name.partition("-")[0]
        if path.suffix == ".toml":
            spec = tomllib.loads(path.read_text())
            patches = tuple((p["file"], p["find"], p["replace"]) for p in spec["patch"])
            out.append(CorrectSubmission(path.stem, spec["problem"], spec["description"], patches, (),
                                         spec.get("only", "")))
        elif path.is_dir():
            modules = tuple(sorted(path.glob("*.py")))
            # The description is the first line of the first module's docstring.
            doc = modules[0].read_text().partition('"""')[2].partition("\n")[0] if modules else ""
            out.append(CorrectSubmission(path.name, problem, doc, (), modules))
    return out


#: The correct entries that were not written apart, and what each was copied from.
LINEAGE_FILE = CORPUS / "correct_lineage.toml"
#: :func:`correct_lineage`'s name for ``reference/``.
REFERENCE_LINE = "reference"


def correct_lineage() -> dict[str, str]:
    """Each correct entry's line: ``"reference"`` for a ``.toml`` entry (a
    patch to the reference) and for an entry copied from it; for an entry
    ``correct_lineage.toml`` lists as copied, its origin's line; for one of a
    ``same_writers`` group, the group's name; else the entry's own name. Two
    entries (or an entry and the reference) of different lines were written
    independently. A listed name that is no entry raises ValueError."""
    entries = {e.name: e for e in correct_submissions()}
    spec = tomllib.loads(LINEAGE_FILE.read_text())
    derived: dict[str, str] = spec.get("derived_from", {})
    group = {name: writers for writers, names in spec.get("same_writers", {}).items() for name in names}
    for name, origin in [*derived.items(), *((n, n) for n in group)]:
        if name not in entries or (origin != REFERENCE_LINE and origin not in entries):
            raise ValueError(f"{LINEAGE_FILE.name}: {name} (from {origin!r}) names no correct entry")
    lines = {}
    for name, entry in entries.items():
        origin, seen = name, {name}
        while origin in derived:
            origin = derived[origin]
            if origin in seen:
                raise ValueError(f"{LINEAGE_FILE.name}: {name} is derived from itself")
            seen.add(origin)
        lines[name] = REFERENCE_LINE if entry.patches or origin == REFERENCE_LINE else group.get(origin, origin)
    return lines


def copied_entries() -> set[str]:
    """The correct entries that are edited copies: every ``.toml`` entry (a
    patch to the reference) and those ``correct_lineage.toml`` derives."""
    derived = tomllib.loads(LINEAGE_FILE.read_text()).get("derived_from", {})
    return {e.name for e in correct_submissions() if e.patches or e.name in derived}


def build_correct(sub: CorrectSubmission, dest: Path) -> Path:
    """Write the submission folder (holding ``student/``) under ``dest``; return it.

    A whole module of the entry replaces the reference's, so it must define
    every function its stub has: ValueError names the module to extend when a
    function was added to the assignment after it was written."""
    from grader.sourcefacts import stubs_of  # the stubs' functions, read from the source

    for module in sub.modules:
        stub = REPO / "student" / module.name
        have = {n.name for n in ast.parse(module.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        lacking = [n for n in stubs_of(ast.parse(stub.read_text())) if n not in have] if stub.is_file() else []
        if lacking:
            where = module.relative_to(REPO) if module.is_relative_to(REPO) else module
            raise ValueError(f"{where}: extend it with {', '.join(lacking)} (student/{module.name} "
                             "stubs them, and this whole module replaces the reference's)")
    folder = build_wrong(WrongSubmission(sub.name, sub.problem, sub.description, sub.patches), dest)
    for module in sub.modules:
        shutil.copyfile(module, folder / "student" / module.name)
    return folder


@dataclass(frozen=True)
class HonestSolution:
    """One complete solution of ``honest/``: its name and its modules (by file name)."""

    name: str
    modules: tuple[Path, ...]


def honest_solutions() -> list[HonestSolution]:
    """The complete, independently written solutions of ``honest/``, by name."""
    root = CORPUS / "honest"
    return [HonestSolution(path.name, tuple(sorted(path.glob("*.py"))))
            for path in sorted(root.iterdir()) if path.is_dir()] if root.is_dir() else []


def build_honest(sol: HonestSolution, dest: Path) -> Path:
    """Write the solution as a submission folder (holding ``student/``) under ``dest``; return it."""
    folder = dest / sol.name
    (folder / "student").mkdir(parents=True)
    for module in sol.modules:
        shutil.copyfile(module, folder / "student" / module.name)
    return folder

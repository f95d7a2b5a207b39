"""A class of honest solutions and disguised copies, built from the project's
correct corpus, for the similarity report's selftest (and for measuring it).

Honest students are whole submissions made only of the corpus's folder
entries (``grader/corpus/correct/<module>-<style>/``), one student per line
(:func:`grader.corpus.correct_lineage`: who wrote them, apart from whom). The
``.toml`` entries are patches to the reference, and ``einops_ops-slow_loops``
and ``optimizers-slow_per_parameter`` are edited copies of the reference and
of ``optimizers-textbook_loops`` (:func:`grader.corpus.copied_entries`): they
share code by copying, not by necessity, so none of them is a student here.
Two students never hold the same file:

* ``from_the_handout``: every ``*-from_the_handout`` module (one line: its two
  writers, one solution of every module);
* ``textbook_loops``: ``optimizers-textbook_loops``'s optimizers, the rest of
  its ``student/`` the stubs (the same for any other line a new entry adds).

Every pair of them, and each with ``(reference)`` and ``torch.optim
(library)``, is an honest pair: solutions written apart from one contract.

The copies (:func:`disguise`, :func:`move_into_helper`) change what a copier
changes and keep what a copier must keep (the handout's public names and
parameters, so the copy still passes the public tests): docstrings and
comments dropped, local and private names renamed, top-level definitions and
methods in another order, code moved into a helper module that the handout
module imports.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path

from grader.corpus import (
    REFERENCE_LINE,
    build_honest,
    copied_entries,
    correct_lineage,
    correct_submissions,
    honest_solutions,
)

REPO = Path(__file__).resolve().parent.parent
#: The complete solution of grader/corpus/honest that the class holds, with a
#: copy of it with a few lines changed (``copy_of_objects``).
EDITED = "objects"


def _stubs(pkg: Path) -> None:
    """``pkg`` as the handout's ``student/``: every stub, the package's ``__init__``."""
    shutil.copytree(REPO / "student", pkg, ignore=shutil.ignore_patterns("__pycache__"))


def student_lines() -> set[str]:
    """The corpus lines the honest students are made of (every line but the reference's)."""
    lines, copied = correct_lineage(), copied_entries()
    return {line for name, line in lines.items() if name not in copied} - {REFERENCE_LINE}


def honest_students(root: Path) -> dict[str, Path]:
    """Write the honest students (see the module docstring) under ``root``,
    one per line of the corpus but the reference's, named by the line's style;
    return their ``student/`` folders by id."""
    lines, copied = correct_lineage(), copied_entries()
    made: dict[str, Path] = {}
    for entry in correct_submissions():
        if entry.name in copied or lines[entry.name] == REFERENCE_LINE:
            continue
        student = lines[entry.name].rpartition("-")[2]
        if student not in made:
            made[student] = root / student / "student"
            _stubs(made[student])
        for path in entry.modules:
            stub = REPO / "student" / path.name
            assert not stub.is_file() or (made[student] / path.name).read_text() == stub.read_text(), \
                f"{entry.name}: another entry of this line holds {path.name}"
            shutil.copyfile(path, made[student] / path.name)
    return made


def public_names(module: str) -> set[str]:
    """The names the handout's stub of ``module`` defines at top level (a copy
    keeps them); none for a module the handout has no stub of (a helper)."""
    stub = REPO / "student" / f"{module}.py"
    if not stub.is_file():
        return set()
    tree = ast.parse(stub.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


def _drop_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body.pop(0)
                if not body:
                    body.append(ast.Pass())


def _reverse_definitions(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that are not definitions first (imports, constants), in their
    order; then the definitions, last first, except that a class still comes
    after the classes of the module it derives from (or it would not run)."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    todo = [s for s in body if isinstance(s, defs)][::-1]
    here = {n for s in todo for n in _defined(s)}
    ordered: list[ast.stmt] = []
    while todo:
        done = {n for s in ordered for n in _defined(s)}
        ready = next(s for s in todo if not isinstance(s, ast.ClassDef)
                     or {b.id for b in s.bases if isinstance(b, ast.Name)} & here <= done)
        todo.remove(ready)
        ordered.append(ready)
    return [s for s in body if not isinstance(s, defs)] + ordered


class _Renamer(ast.NodeTransformer):
    """Renames by ``names`` (old -> new) every Name, parameter, definition and
    keyword argument in the nodes it visits."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        return node


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names ``fn`` binds: parameters (``self``/``cls`` kept) and assignment targets."""
    bound = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} - {"self", "cls"}
    bound |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return bound


def disguise(text: str, module: str, tag: str) -> str:
    """``text`` (a module of the handout's ``module``) as a copier hides it:
    docstrings and comments gone (the code is re-printed by ``ast.unparse``),
    definitions in reverse order (methods too), the module's private names and
    every function's locals renamed (``<tag>_<n>``), and the parameters of the
    private functions (with the keywords of their calls). The public names of
    the stub are kept, and so are the parameters of public functions and of
    methods (callers may pass them by keyword), so the copy still answers the
    tests."""
    tree = ast.parse(text)
    _drop_docstrings(tree)
    keep = public_names(module)
    counter = iter(range(10**6))
    private = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
               and n.name.startswith("_") and n.name not in keep}
    module_names = {name: f"_{tag}_{next(counter)}" for name in sorted(private)}
    _Renamer(module_names).visit(tree)
    top = {id(n) for n in tree.body}
    renamed_params: dict[str, dict[str, str]] = {}  # private top-level function -> its parameters renamed
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        own = id(fn) in top and fn.name in module_names.values()  # its callers are all in this module
        names = sorted(_locals(fn) - (set() if own else params) - set(module_names.values()))
        mapping = {name: f"{tag}_{next(counter)}" for name in names}
        for stmt in fn.body:
            _Renamer(mapping).visit(stmt)
        for a in ast.walk(fn.args):
            if isinstance(a, ast.arg) and a.arg in mapping:
                a.arg = mapping[a.arg]
        if own:
            renamed_params[fn.name] = {p: mapping[p] for p in params if p in mapping}
    for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
        if isinstance(call.func, ast.Name) and call.func.id in renamed_params:
            for kw in call.keywords:
                if kw.arg is not None:
                    kw.arg = renamed_params[call.func.id].get(kw.arg, kw.arg)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = _reverse_definitions(node.body)
    tree.body = _reverse_definitions(tree.body)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _defined(stmt: ast.stmt) -> list[str]:
    """The names a top-level statement defines (a function, a class, an assignment's plain targets)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def move_into_helper(text: str, names: Iterable[str],
                     helper: str) -> tuple[str, list[ast.Import | ast.ImportFrom], list[ast.stmt]]:
    """Split ``text``: the top-level definitions and assignments of ``names``
    leave it, and the module imports them back by name from ``helper``.
    Returns the module, its imports (the helper needs them too) and the
    statements moved."""
    tree = ast.parse(text)
    moving = set(names)
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    moved = [s for s in tree.body if _defined(s) and set(_defined(s)) <= moving]
    kept = [s for s in tree.body if s not in moved]
    if moved:
        back = ast.ImportFrom(module=helper, names=[ast.alias(n) for s in moved for n in _defined(s)], level=1)
        first_code = next((i for i, s in enumerate(kept) if not isinstance(s, (ast.Import, ast.ImportFrom))),
                          len(kept))
        kept.insert(first_code, back)
    return ast.unparse(ast.fix_missing_locations(ast.Module(kept, []))) + "\n", imports, moved


def _helper_module(imports: list[ast.Import | ast.ImportFrom], defs: list[ast.stmt]) -> str:
    """One module of ``defs`` under those of ``imports`` that they use (each
    once, ``__future__`` first; an unused ``from .precision import ...`` would
    make an import cycle)."""
    used = {n.id for d in defs for n in ast.walk(d) if isinstance(n, ast.Name)}
    lines: list[str] = []
    for stmt in imports:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            lines.insert(0, ast.unparse(stmt))
            continue
        wanted = [a for a in stmt.names if (a.asname or a.name.partition(".")[0]) in used]
        if wanted:
            stmt.names = wanted
            lines.append(ast.unparse(stmt))
    lines = list(dict.fromkeys(lines))
    return "\n".join(lines) + "\n\n" + ast.unparse(ast.fix_missing_locations(ast.Module(defs, []))) + "\n"


def disguised_copy(original: Path, dest: Path, tag: str, helper: str, move_public: bool) -> Path:
    """A copy of the ``student/`` folder ``original`` at ``dest``: every module
    that is not a stub :func:`disguise`\\ d, and its private definitions and
    constants (all of them with ``move_public``) moved into
    ``student/<helper>.py``, which the module imports them from. Returns ``dest``."""
    _stubs(dest)
    imports: list[ast.Import | ast.ImportFrom] = []
    defs: list[ast.stmt] = []
    for path in sorted(original.glob("*.py")):
        module = path.stem
        stub = REPO / "student" / path.name
        if module == "__init__" or (stub.is_file() and stub.read_text() == path.read_text()):
            continue
        if not stub.is_file():  # a helper of the original's: disguised as it is
            (dest / path.name).write_text(disguise(path.read_text(), module, tag))
            continue
        text = disguise(path.read_text(), module, f"{tag}{module[:2]}")
        names = [n for s in ast.parse(text).body for n in _defined(s) if not n.startswith("__")]
        text, needed, moved = move_into_helper(text, names if move_public else
                                               [n for n in names if n.startswith("_")], helper)
        (dest / path.name).write_text(text)
        imports += needed
        defs += moved
    (dest / f"{helper}.py").write_text(_helper_module(imports, defs))
    return dest


def edited_copy(original: Path, dest: Path, tag: str) -> Path:
    """A copy of the ``student/`` folder ``original`` at ``dest``, every module
    :func:`disguise`\\ d and a few lines changed: in each function of more than
    two statements, one new statement in the middle (what a copier adds to
    break the runs of shared code). Returns ``dest``."""
    _stubs(dest)
    for path in sorted(original.glob("*.py")):
        stub = REPO / "student" / path.name
        if path.stem == "__init__" or (stub.is_file() and stub.read_text() == path.read_text()):
            continue
        tree = ast.parse(disguise(path.read_text(), path.stem, f"{tag}{path.stem[:2]}"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(node.body) > 2:
                node.body.insert(len(node.body) // 2, ast.parse(f"{tag}_changed = {len(node.body)}").body[0])
        (dest / path.name).write_text(ast.unparse(ast.fix_missing_locations(tree)) + "\n")
    return dest


def reference_copy(dest: Path) -> Path:
    """``reference/`` copied whole as ``student/`` at ``dest``."""
    shutil.copytree(REPO / "reference", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def build_class(root: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Write the class under ``root``: the honest students, ``copy_of_handout``
    (all of ``from_the_handout`` disguised, every private helper and constant
    moved into ``student/_util.py``), ``copy_of_textbook`` (``textbook_loops``'s
    optimizers disguised and moved whole into ``student/_optim.py``),
    ``objects`` (a complete solution of grader/corpus/honest) with
    ``copy_of_objects`` (disguised, a few lines changed in every function) and
    ``copy_of_reference``. Returns the honest ids and the copies as (copy, original)."""
    honest = honest_students(root)
    disguised_copy(honest["from_the_handout"], root / "copy_of_handout" / "student", "h", "_util",
                   move_public=False)
    disguised_copy(honest["textbook_loops"], root / "copy_of_textbook" / "student", "t", "_optim",
                   move_public=True)
    (solution,) = [s for s in honest_solutions() if s.name == EDITED]
    honest[EDITED] = build_honest(solution, root) / "student"
    edited_copy(honest[EDITED], root / f"copy_of_{EDITED}" / "student", "e")
    reference_copy(root / "copy_of_reference" / "student")
    return sorted(honest), [("copy_of_handout", "from_the_handout"), ("copy_of_textbook", "textbook_loops"),
                            (f"copy_of_{EDITED}", EDITED), ("copy_of_reference", "(reference)")]

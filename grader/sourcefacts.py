"""What a module's source says, read with ``ast`` (never imported).

The stubs' handout functions (the ``raise NotImplementedError("...")`` they
hold), a module's public functions and classes, methods through the bases of
the same module, signatures as comparable strings, and the tests and pytest
marks of a check file. Used by ``python -m grader check`` and by the corpus
builders; it depends on nothing of the grader.
"""

from __future__ import annotations

import ast
from pathlib import Path


def parse_file(path: Path) -> ast.Module | None:
    """The file's syntax tree; None when it cannot be read or does not parse."""
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def public_defs(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The module's public top-level functions and classes, by name."""
    return {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not n.name.startswith("_")}


def classes_of(tree: ast.Module) -> dict[str, ast.ClassDef]:
    """The module's top-level classes, by name."""
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def methods_of(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The class's own methods (none of its bases'), by name."""
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def find_method(name: str, cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> ast.FunctionDef | None:
    """``name`` as ``cls`` has it: its own, or the nearest base's of the same
    module (None: inherited from another module's class)."""
    seen: set[str] = set()
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if c.name in seen:
            continue
        seen.add(c.name)
        method = methods_of(c).get(name)
        if method is not None:
            return method  # type: ignore[return-value]
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    return None


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Each parameter as ``kind name[=default]`` (kinds: positional-only, either, *args, keyword-only, **kwargs)."""
    a = fn.args
    either = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(either) - len(a.defaults)) + list(a.defaults)
    out = []
    for i, (arg, default) in enumerate(zip(either, defaults, strict=True)):
        kind = "positional-only" if i < len(a.posonlyargs) else "positional"
        out.append(f"{kind} {arg.arg}" + (f"={ast.unparse(default)}" if default is not None else ""))
    if a.vararg:
        out.append(f"*{a.vararg.arg}")
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append(f"keyword-only {arg.arg}" + (f"={ast.unparse(default)}" if default is not None else ""))
    if a.kwarg:
        out.append(f"**{a.kwarg.arg}")
    return out



def stub_messages(node: ast.AST) -> list[str]:
    """The messages of the ``raise NotImplementedError("...")`` statements under ``node``."""
    out = []
    for n in ast.walk(node):
        if (isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and isinstance(n.exc.func, ast.Name)
                and n.exc.func.id == "NotImplementedError" and n.exc.args
                and isinstance(n.exc.args[0], ast.Constant) and isinstance(n.exc.args[0].value, str)):
            out.append(n.exc.args[0].value)
    return out


def stubs_of(tree: ast.Module) -> list[str]:
    """The handout functions and classes of a stub module: those that raise their stub's NotImplementedError."""
    return [name for name, node in public_defs(tree).items() if stub_messages(node)]


def decorator_marks(fn: ast.FunctionDef) -> list[tuple[str, list[ast.expr]]]:
    """``(name, args)`` of each ``@pytest.mark.<name>(...)`` (or bare ``@pytest.mark.<name>``) of ``fn``."""
    out = []
    for dec in fn.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        target = call.func if call else dec
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            out.append((target.attr, list(call.args) if call else []))
    return out


def tests_of(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level ``test_*`` functions, by name."""
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def marks_used(tree: ast.Module) -> set[str]:
    """Every ``pytest.mark.<name>`` the module mentions (decorators, ``pytestmark``, ``pytest.param(marks=)``)."""
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
            and isinstance(n.value.value, ast.Name) and n.value.value.id == "pytest"}

"""No hidden property: every hidden check names, with an ``extends`` marker, a
public test whose property it runs on more or larger inputs, and that public
test exists. Read from the source (AST), so nothing is run or imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HIDDEN = sorted((REPO / "grader" / "hidden").glob("test_*.py"))


def _extends(fn: ast.FunctionDef) -> list[str]:
    """The arguments of the function's ``@pytest.mark.extends(...)`` decorators."""
    out = []
    for dec in fn.decorator_list:
        if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "extends"
                and ast.unparse(dec.func.value) == "pytest.mark"):
            assert len(dec.args) == 1 and isinstance(dec.args[0], ast.Constant), ast.unparse(dec)
            out.append(dec.args[0].value)
    return out


def _tests(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


CASES = [(path, fn) for path in HIDDEN for fn in _tests(path)]


def test_the_hidden_checks_are_found():
    assert len(HIDDEN) >= 9 and len(CASES) >= 40, f"found {len(CASES)} hidden tests in {len(HIDDEN)} files"


@pytest.mark.parametrize(("path", "fn"), CASES, ids=[f"{p.stem}::{f.name}" for p, f in CASES])
def test_hidden_check_extends_an_existing_public_test(path, fn):
    marks = _extends(fn)
    where = f"{path.relative_to(REPO)}::{fn.name}"
    assert len(marks) == 1, f"{where}: needs exactly one @pytest.mark.extends(\"tests/test_<m>.py::test_<name>\")"
    file, sep, name = marks[0].partition("::")
    assert sep and file.startswith("tests/test_") and file.endswith(".py") and "[" not in name, (
        f"{where}: extends {marks[0]!r} is not a public test node id without parameters"
    )
    public = REPO / file
    assert public.is_file(), f"{where}: extends {marks[0]!r}, but {file} does not exist"
    names = {f.name for f in _tests(public)}
    assert name in names, f"{where}: extends {marks[0]!r}, but {file} has no test function {name}"


def test_the_marker_is_registered():
    text = (REPO / "pyproject.toml").read_text()
    assert '"extends(public_test): a hidden check extends the public test it names (grader/hidden)",' in text

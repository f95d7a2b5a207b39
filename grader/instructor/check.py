"""``python -m grader check``: every place a change to the assignment still needs, in seconds.

It reads the sources (``ast``), the rubric, the handout and the corpus; it imports
no student, reference or test module and no torch, so it answers in about a
second. It checks what the selftests would otherwise find minutes later, each
finding naming the file to change and what to change there:

* the rubric's problems (grader/rubric.toml, the one list of problems) each have
  their check files (and every check file belongs to one), a stub
  ``student/<m>.py`` and a reference ``reference/<m>.py``, a handout section and
  a row of the handout's table, and an entry
  ``grader/corpus/correct/<m>-from_the_handout/<m>.py``;
* a stub and its reference define the same public functions and classes, with
  the same parameters (names, kinds, defaults), and each stub says
  ``NotImplementedError("<name>: see handout §<the rubric's section>")``;
* the handout's list of each section's functions ("You write in ...") is the
  stub's list, and every function appears in a public test of its problem;
* every public test counts toward exactly one rubric item, no item pattern is
  dead, and every hidden check extends (``@pytest.mark.extends``) one existing
  public test of its own problem;
* every ``pytest.mark.<name>`` used is a declared marker or a problem's;
* each whole module of the correct corpus, and each honest solution (one
  module per problem), defines every function of its stub, and each
  wrong-corpus entry names a problem and items the rubric has;
* each wrong entry's ``breaks`` list is right for an item the wrong corpus was
  never checked against (a new function's; ``grader/corpus/wrong_checked.toml``
  lists the others): the one thing it runs code for, that item's checks on the
  entries whose patch they may reach, in a child process (seconds).

Notes (to do before a release, not errors): check files ``grader/budgets.toml``
has no figure for (``python -m grader calibrate``). Exit status 0 when nothing is
missing, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from grader import rubric as rubric_module
from grader.util import REPO, tomllib

__all__ = ["Findings", "check", "main", "wrong_reach"]

#: Markers pytest and its plugins (pytest-timeout) declare themselves.
_BUILTIN_MARKS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "timeout"}
#: The handout line listing a section's functions: "You write in `student/<m>.py`: `a`, `b`."
_YOU_WRITE = re.compile(r"^You write in `student/(\w+)\.py`: (.+)$", re.M)
#: A module's handout heading: "### 1.1 Bytes and float formats (`precision`)".
_HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)*)\.? [^\n]*\(`(\w+)`\)\s*$", re.M)
#: A row of the handout's table of problems: "| 1.1 | `precision` | `student/precision.py` |".
_TABLE_ROW = re.compile(r"^\| ([\d.]+) \| `(\w+)` \| `student/(\w+)\.py` \|\s*$", re.M)
_STUB_MESSAGE = re.compile(r"^([\w.]+): see handout §([\w./]+)$")


@dataclass
class Findings:
    """What the check found: ``errors`` fail it, ``notes`` are reminders."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: int = 0  # how many things were compared

    def need(self, ok: bool, message: str) -> bool:
        self.checked += 1
        if not ok:
            self.errors.append(message)
        return ok


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _public(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The module's public top-level functions and classes, by name."""
    return {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not n.name.startswith("_")}


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _find_method(name: str, cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> ast.FunctionDef | None:
    """``name`` as ``cls`` has it: its own, or the nearest base's of the same
    module (None: inherited from another module's class)."""
    seen: set[str] = set()
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if c.name in seen:
            continue
        seen.add(c.name)
        method = _methods(c).get(name)
        if method is not None:
            return method  # type: ignore[return-value]
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    return None


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
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


def _compare_signatures(where: str, stub: list[str], ref: list[str], f: Findings) -> None:
    if stub == ref:
        f.checked += 1
        return
    diff = next((i for i, (s, r) in enumerate(zip(stub, ref, strict=False)) if s != r), min(len(stub), len(ref)))

    def said(params: list[str]) -> str:
        return params[diff] if diff < len(params) else "nothing"

    f.need(False, f"{where}: parameter {diff + 1} is `{said(stub)}` in the stub but `{said(ref)}` in the "
                  "reference: make them the same (the tests pass arguments by keyword as well as by position)")


def _stub_messages(node: ast.AST) -> list[str]:
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
    return [name for name, node in _public(tree).items() if _stub_messages(node)]


def _decorator_marks(fn: ast.FunctionDef) -> list[tuple[str, list[ast.expr]]]:
    """``(name, args)`` of each ``@pytest.mark.<name>(...)`` (or bare ``@pytest.mark.<name>``) of ``fn``."""
    out = []
    for dec in fn.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        target = call.func if call else dec
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            out.append((target.attr, list(call.args) if call else []))
    return out


def _tests(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def _marks_used(tree: ast.Module) -> set[str]:
    """Every ``pytest.mark.<name>`` the module mentions (decorators, ``pytestmark``, ``pytest.param(marks=)``)."""
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
            and isinstance(n.value.value, ast.Name) and n.value.value.id == "pytest"}


def _handout_sections(text: str) -> dict[str, tuple[str, str]]:
    """Each module's (section number, section text up to the next module's heading) in the handout."""
    heads = list(_HEADING.finditer(text))
    return {m[2]: (m[1], text[m.start():heads[i + 1].start() if i + 1 < len(heads) else len(text)])
            for i, m in enumerate(heads)}


def _check_problem(problem: rubric_module.Problem, root: Path, handout: str, f: Findings) -> None:
    name = problem.name
    for file in problem.files:
        f.need((root / file).is_file(), f"{file}: missing; grader/rubric.toml lists it among {name}'s files")
    if not any(not rubric_module.is_hidden(c) for c in problem.files):
        return  # a problem of hidden checks only (the GPU's MFU): no module of its own
    stub_path, ref_path = root / "student" / f"{name}.py", root / "reference" / f"{name}.py"
    stub = _parse(stub_path) if f.need(stub_path.is_file(), f"student/{name}.py: missing (the stub of problem {name}; "
                                                             "each function raising NotImplementedError)") else None
    ref = _parse(ref_path) if f.need(ref_path.is_file(), f"reference/{name}.py: missing (the reference solution of "
                                                          f"problem {name})") else None
    stubbed = stubs_of(stub) if stub else []
    if stub is not None:
        f.need(bool(stubbed), f"student/{name}.py: no function raises NotImplementedError(\"<name>: see handout "
                              f"§{problem.section}\")")
        for node in _public(stub).values():
            for message in _stub_messages(node):
                m = _STUB_MESSAGE.match(message)
                f.need(m is not None and m[2] == problem.section and m[1].split(".")[0] == node.name,
                       f"student/{name}.py: {node.name} raises NotImplementedError({message!r}); say "
                       f"\"{node.name}: see handout §{problem.section}\" (the rubric's section of {name})")
    if stub is not None and ref is not None:
        _check_signatures(name, stub, ref, f)
    # The handout: its table, the section's heading and its list of functions.
    rows = {m[2]: (m[1], m[3]) for m in _TABLE_ROW.finditer(handout)}
    f.need(rows.get(name) == (problem.section, name),
           f"handout.md: the table of problems needs the row "
           f"\"| {problem.section} | `{name}` | `student/{name}.py` |\"")
    sections = _handout_sections(handout)
    if f.need(name in sections, f"handout.md: no section for {name}: add a heading "
                                f"\"### {problem.section} <title> (`{name}`)\" (or ## for a whole part)"):
        number, text = sections[name]
        f.need(number == problem.section, f"handout.md: {name}'s heading says §{number}, the rubric §{problem.section}")
        listed = _YOU_WRITE.search(text)
        if f.need(listed is not None and listed[1] == name,
                  f"handout.md: §{problem.section} needs the line \"You write in `student/{name}.py`: "
                  + ", ".join(f"`{s}`" for s in stubbed) + ".\""):
            names = re.findall(r"`(\w+)`", listed[2])  # type: ignore[index]
            for s in stubbed:
                f.need(s in names, f"handout.md: §{problem.section}'s \"You write in\" line lacks `{s}` "
                                   f"(student/{name}.py has it)")
            for s in names:
                f.need(s in stubbed, f"handout.md: §{problem.section}'s \"You write in\" line names `{s}`, which "
                                     f"student/{name}.py does not stub")
    _check_tests(problem, root, stubbed, f)
    entry = root / "grader" / "corpus" / "correct" / f"{name}-from_the_handout" / f"{name}.py"
    f.need(entry.is_file(), f"{entry.relative_to(root)}: missing (a correct {name} written from the handout alone, "
                            "in another style than the reference: the correct corpus grades it)")


def _check_signatures(name: str, stub: ast.Module, ref: ast.Module, f: Findings) -> None:
    mine, theirs = _public(stub), _public(ref)
    ref_classes = _classes(ref)
    for obj, node in mine.items():
        where = f"reference/{name}.py: {obj}"
        if not f.need(obj in theirs, f"reference/{name}.py: missing {obj} (student/{name}.py has it)"):
            continue
        other = theirs[obj]
        if isinstance(node, ast.ClassDef) != isinstance(other, ast.ClassDef):
            f.need(False, f"{where}: a {'class' if isinstance(node, ast.ClassDef) else 'function'} in the stub, "
                          "not in the reference")
        elif isinstance(node, ast.ClassDef):
            assert isinstance(other, ast.ClassDef)
            for method, fn in _methods(node).items():
                if method.startswith("_") and method not in ("__init__", "__call__"):
                    continue
                found = _find_method(method, other, ref_classes)
                if found is None:
                    continue  # inherited from a base of another module (torch.optim.Optimizer, nn.Module)
                _compare_signatures(f"{where}.{method}", _signature(fn), _signature(found), f)
        else:
            assert not isinstance(other, ast.ClassDef)
            _compare_signatures(where, _signature(node), _signature(other), f)
    for obj in theirs:
        f.need(obj in mine, f"student/{name}.py: missing {obj} (reference/{name}.py has it; a public name of the "
                            "reference is part of the assignment's API; prefix it with _ if it is a helper)")


def _check_tests(problem: rubric_module.Problem, root: Path, stubbed: Sequence[str], f: Findings) -> None:
    """Rubric coverage, ``extends`` targets, and a public test for every stubbed function."""
    public: dict[str, dict[str, ast.FunctionDef]] = {}
    hidden: dict[str, dict[str, ast.FunctionDef]] = {}
    texts = []
    for file in problem.files:
        tree = _parse(root / file)
        if tree is None:
            continue
        (hidden if rubric_module.is_hidden(file) else public)[file] = _tests(tree)
        if not rubric_module.is_hidden(file):
            texts.append((root / file).read_text())
    names = set()
    for file, tests in public.items():
        for test, fn in tests.items():
            if any(m == "feedback_only" for m, _ in _decorator_marks(fn)):
                continue  # deselected by the grader; a hidden check extends it
            names.add(test)
            matching = [i for i in problem.items if i.matches(test)]
            items = [i.name for i in matching]
            # (items that split a test by its parameters may share it: test_rubric_items checks each node)
            f.need(len(items) == 1 or (len(items) > 1 and all(i.params for i in matching)),
                   f"grader/rubric.toml: {file}::{test} counts toward "
                                    + (f"{len(items)} items of {problem.name} ({', '.join(items)})" if items else
                                       f"no item of {problem.name}") + ": add or fix a `checks` pattern")
    for file, tests in hidden.items():
        for test, fn in tests.items():
            extends = [a for m, a in _decorator_marks(fn) if m == "extends"]
            target = (extends[0][0].value if len(extends) == 1 and len(extends[0]) == 1
                      and isinstance(extends[0][0], ast.Constant) else None)
            if not f.need(isinstance(target, str), f"{file}::{test}: needs exactly one "
                                                   "@pytest.mark.extends(\"tests/test_<m>.py::test_<name>\")"):
                continue
            assert isinstance(target, str)
            pfile, _, ptest = target.partition("::")
            if not f.need(pfile in public, f"{file}::{test}: extends {target}, but {pfile} is not a public file of "
                                           f"{problem.name} (grader/rubric.toml)"):
                continue
            if f.need(ptest in public[pfile], f"{file}::{test}: extends {target}, but {pfile} has no test {ptest}"):
                names.add(ptest)
    if problem.gpu and not public:  # its items name the public tests its hidden checks extend
        names |= {t for tests in hidden.values() for t in tests}
    where = next((c for c in problem.files if not rubric_module.is_hidden(c)), "grader/rubric.toml")
    for item in problem.items:
        for pattern in item.checks:
            f.need(any(fnmatchcase(n, pattern) for n in names),
                   f"{where}: no test matches the pattern {pattern!r} of {problem.name}'s item {item.name!r} in "
                   "grader/rubric.toml: add the test, or fix the pattern")
    text = "\n".join(texts)
    for name in stubbed:
        # impl.<m>.<name>(...) in a test, modules.<m>.<name> in a scenario, or the
        # name as a string a scenario resolves (the optimizers' classes).
        f.need(re.search(rf"\b{problem.name}\.{name}\b|[\"']{name}[\"']", text) is not None
               or re.search(rf"\bmodules\.{problem.name}\.{name}\b", _scenarios(root)) is not None,
               f"{problem.files[0]}: no public test calls {problem.name}.{name} (impl.{problem.name}.{name}(...) "
               f"in a test, or modules.{problem.name}.{name} in a scenario of tests/scenarios/)")


_SCENARIO_TEXT: dict[Path, str] = {}


def _scenarios(root: Path) -> str:
    if root not in _SCENARIO_TEXT:
        _SCENARIO_TEXT[root] = "\n".join(p.read_text() for p in sorted((root / "tests" / "scenarios").glob("*.py")))
    return _SCENARIO_TEXT[root]


def _check_markers(root: Path, problems: Iterable[str], f: Findings) -> None:
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    # A marker's line starts with its name: "gpu: ...", "extends(public_test): ...".
    markers = pyproject["tool"]["pytest"]["ini_options"].get("markers", [])
    declared = {re.split(r"\W", m, maxsplit=1)[0] for m in markers}
    known = declared | set(problems) | _BUILTIN_MARKS
    for folder in ("tests", "grader/hidden", "selftest"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = _parse(path)
            for mark in sorted(_marks_used(tree) - known) if tree else ():
                f.need(False, f"{path.relative_to(root)}: pytest.mark.{mark} is no declared marker: declare it in "
                              "pyproject.toml's [tool.pytest.ini_options] markers (a problem's marker comes from "
                              "grader/rubric.toml)")
            f.checked += 1


def _check_corpus(rubric: rubric_module.Rubric, root: Path, f: Findings) -> None:
    corpus = root / "grader" / "corpus"
    names = {p.name for p in rubric.problems}
    for entry in sorted((corpus / "correct").glob("*")):
        problem = entry.name.partition("-")[0]
        where = entry.relative_to(root)
        if not f.need(problem in names, f"{where}: its name starts with {problem!r}, no problem of the rubric"):
            continue
        for module in sorted(entry.glob("*.py")) if entry.is_dir() else ():
            stub = _parse(root / "student" / module.name)
            mine = _parse(module)
            if stub is None or mine is None:
                f.need(mine is not None, f"{module.relative_to(root)}: does not parse")
                continue
            have = {n.name for n in mine.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            for name in stubs_of(stub):
                f.need(name in have, f"{module.relative_to(root)}: extend it with {name} (student/{module.name} "
                                     "stubs it; this whole module replaces the reference's, so the correct corpus "
                                     f"would fail with \"module 'student.{module.stem}' has no attribute '{name}'\")")
    modules = [p.name for p in rubric.problems if any(not rubric_module.is_hidden(c) for c in p.files)]
    for solution in sorted(p for p in (corpus / "honest").glob("*") if p.is_dir()):
        for name in modules:
            f.need((solution / f"{name}.py").is_file(),
                   f"{(solution / name).relative_to(root)}.py: missing (each honest solution is complete: a {name} "
                   "written from the handout in this solution's style)")
        for module in sorted(solution.glob("*.py")):
            stub, mine = _parse(root / "student" / module.name), _parse(module)
            if stub is None or mine is None or module.stem not in names:
                continue
            have = {n.name for n in mine.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            for name in stubs_of(stub):
                f.need(name in have, f"{module.relative_to(root)}: extend it with {name}, written from the handout "
                                     f"in this solution's style (student/{module.name} stubs it; each honest "
                                     "solution must get full marks: selftest/test_honest_solutions.py)")
    wrong: dict[str, dict] = {}
    for entry in sorted((corpus / "wrong").glob("*.toml")):
        where = entry.relative_to(root)
        try:
            spec = tomllib.loads(entry.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            f.need(False, f"{where}: {e}")
            continue
        problem = spec.get("problem")
        if not f.need(problem in names, f"{where}: problem {problem!r} is not in grader/rubric.toml"):
            continue
        items = {i.name for i in rubric.problem(problem).items}
        for item in spec.get("breaks", ()):
            f.need(item in items, f"{where}: breaks {item!r}, no item of {problem} in grader/rubric.toml "
                                  f"(its items: {', '.join(sorted(items))})")
        wrong[entry.stem] = spec
    _check_wrong_items(rubric, root, wrong, f)


#: The rubric items each problem's wrong entries were checked against (see :func:`_check_wrong_items`).
WRONG_CHECKED = "grader/corpus/wrong_checked.toml"


def _defined(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement defines."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = (stmt.targets if isinstance(stmt, ast.Assign)
               else [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else [])
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _words(node: ast.AST) -> set[str]:
    """Every name, attribute and identifier-like string under ``node`` (what it may use)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            out.add(n.value)
    return out


def _uses(tree: ast.Module) -> dict[str, set[str]]:
    """Each module-level name and the words of the statements defining it."""
    graph: dict[str, set[str]] = {}
    for stmt in tree.body:
        for name in _defined(stmt):
            graph.setdefault(name, set()).update(_words(stmt))
    return graph


def _closure(names: Iterable[str], graph: dict[str, set[str]]) -> set[str]:
    """The module-level names of ``graph`` that ``names`` reach, through what each uses."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in graph and name not in seen:
            seen.add(name)
            todo += graph[name]
    return seen


def _item_reach(problem: rubric_module.Problem, root: Path, reference: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each item's reach: the module-level names of ``reference/<problem>.py`` its
    checks may run. A check's words (and those of the helpers and scenarios it
    names) that are public names of the reference are the functions it calls;
    their closure is the reach. An over-estimate: the probe decides."""
    scenarios = [_uses(t) for t in map(_parse, sorted((root / "tests" / "scenarios").glob("*.py"))) if t]
    public = {n for n in reference if not n.startswith("_")}
    reach: dict[str, set[str]] = {i.name: set() for i in problem.items}
    params = [p for i in problem.items for p in i.params]
    for file in problem.files:
        tree = _parse(root / file)
        if tree is None:
            continue
        helpers = _uses(tree)
        for test, fn in _tests(tree).items():
            extends = [a for m, a in _decorator_marks(fn) if m == "extends"]
            target = extends[0][0].value if extends and extends[0] and isinstance(extends[0][0], ast.Constant) else ""
            words = _words(fn)
            words |= {w for h in _closure(words, helpers) for w in helpers[h]}
            for graph in scenarios:
                words |= {w for s in _closure(words, graph) for w in graph[s]}
            called = words & public
            for item in problem.items_of(test, str(target)):
                # An item of some parameters (an optimizer class) holds only those parameters' nodes:
                # of the names other items' parameters match, only its own.
                reach[item.name] |= {n for n in called if not _matches(n, params)
                                     or _matches(n, item.params)} if item.params else called
    return {item: _closure(names, reference) for item, names in reach.items()}


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _patched(spec: dict, root: Path, tree: ast.Module) -> set[str] | None:
    """The module-level names whose statements a wrong entry's patches change
    (None: a patch the reference's top-level statements do not place)."""
    out: set[str] = set()
    for patch in spec.get("patch", ()):
        path = root / "reference" / str(patch.get("file", ""))
        text = path.read_text() if path.is_file() else ""
        at = text.find(str(patch.get("find", "\0")))
        if at < 0 or path.stem != spec.get("problem"):
            return None
        first = text.count("\n", 0, at) + 1
        last = first + str(patch["find"]).count("\n")
        touched = [s for s in tree.body if min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))])
                   <= last and (s.end_lineno or s.lineno) >= first]
        names = set().union(*map(_defined, touched)) if touched else set()
        if not names:
            return None
        out |= names
    return out


def _reached(problem: rubric_module.Problem, root: Path, entries: dict[str, dict]) -> dict[str, set[str] | None]:
    """Each wrong entry's items (of ``problem``) whose checks may reach its
    patch; None for a patch the reference's statements do not place (any)."""
    tree = _parse(root / "reference" / f"{problem.name}.py")
    if tree is None:
        return dict.fromkeys(entries)
    reach = _item_reach(problem, root, _uses(tree))
    out: dict[str, set[str] | None] = {}
    for name, spec in entries.items():
        touched = _patched(spec, root, tree)
        out[name] = None if touched is None else {item for item, names in reach.items() if names & touched}
    return out


def wrong_reach(root: Path = REPO) -> dict[str, set[str] | None]:
    """:func:`_reached` for every wrong entry of ``root``'s corpus, by name."""
    rubric = rubric_module.load(root / "grader" / "rubric.toml")
    wrong = sorted((root / "grader" / "corpus" / "wrong").glob("*.toml"))
    specs = {p.stem: tomllib.loads(p.read_text()) for p in wrong}
    return {name: reached for problem in rubric.problems
            for name, reached in _reached(problem, root, {n: s for n, s in specs.items()
                                                           if s.get("problem") == problem.name}).items()}


@dataclass
class _Probe:
    """An item the wrong entries of its problem were not checked against, and the entries to run its checks on."""

    problem: str
    item: str
    entries: list[str]


def _check_wrong_items(rubric: rubric_module.Rubric, root: Path, wrong: dict[str, dict], f: Findings) -> None:
    """A wrong entry's ``breaks`` list says, for each item of its problem,
    whether its bug loses that item's points, but only for the items the entry
    was checked against: WRONG_CHECKED lists those per problem. An item it
    lacks (a new function's) is probed: its checks run (grader/instructor/corpus_probe.py)
    on each entry whose patch they may reach (:func:`_item_reach`) and on each
    entry whose breaks names it, and each entry whose breaks list the result
    contradicts is named with the list it needs. The answer is exact for the
    entries probed (the checks themselves ran); the static reach only picks them."""
    path = root / WRONG_CHECKED
    if not f.need(path.is_file() or not wrong, f"{WRONG_CHECKED}: missing (each problem's items its wrong entries "
                                               "were checked against)"):
        return
    try:
        checked = tomllib.loads(path.read_text()) if path.is_file() else {}
    except tomllib.TOMLDecodeError as e:
        f.need(False, f"{WRONG_CHECKED}: {e}")
        return
    problems = {p.name: p for p in rubric.problems}
    for name, listed in checked.items():
        if f.need(name in problems, f"{WRONG_CHECKED}: {name} is no problem of grader/rubric.toml: remove its line"):
            items = {i.name for i in problems[name].items}
            for item in listed:
                f.need(item in items, f"{WRONG_CHECKED}: {name}'s {item!r} is no item of {name} in "
                                      "grader/rubric.toml: remove it (or rename it as the rubric did)")
    probes = []
    for problem in rubric.problems:
        entries = {n: s for n, s in wrong.items() if s.get("problem") == problem.name}
        new = [i.name for i in problem.items if i.name not in checked.get(problem.name, ())]
        if not entries or not new:
            continue
        reached = _reached(problem, root, entries)
        for item in new:
            probes.append(_Probe(problem.name, item, [
                n for n, s in entries.items()
                if item in s.get("breaks", ()) or (hit := reached[n]) is None or item in hit]))
    answers = _probe(root, probes, f) if any(p.entries for p in probes) else [{} for _ in probes]
    if len(answers) != len(probes):
        return  # _probe said why
    for probe, answer in zip(probes, answers, strict=True):
        order = [i.name for i in problems[probe.problem].items]
        for name in probe.entries:
            breaks, failing = list(wrong[name].get("breaks", ())), answer.get(name)
            where = f"grader/corpus/wrong/{name}.toml"
            if failing and probe.item not in breaks:
                need = sorted({*breaks, probe.item}, key=lambda i: order.index(i) if i in order else len(order))
                f.need(False, f"{where}: its bug now costs {probe.item!r} too ({failing[0]} fails on it): make it "
                              f"breaks = {json.dumps(need, ensure_ascii=False)}")
            elif failing == [] and probe.item in breaks:
                f.need(False, f"{where}: breaks {probe.item!r}, but every check of that item passes on it: make "
                              f"it breaks = {json.dumps([b for b in breaks if b != probe.item], ensure_ascii=False)}")
            else:
                f.need(name in answer and failing is not None,
                       f"{where}: {probe.item!r}'s checks could not run on it (grader/instructor/corpus_probe.py): "
                       f"LAB_FULL_CORPUS=1 pytest selftest/test_wrong_corpus.py -k {name} says which items it loses")
        if not any(answer.get(n) for n in probe.entries):
            f.notes.append(f"no entry of grader/corpus/wrong/ loses {probe.problem}'s item {probe.item!r}: a wrong "
                           f"entry with a classic bug of it (grader/corpus/wrong/{probe.problem}-<bug>.toml) shows "
                           "its points can be lost")
        f.need(False, f"{WRONG_CHECKED}: add {probe.item!r} to {probe.problem}'s items once the wrong entries' "
                      "breaks lists say whether each loses it (the lines above name those to change; until then "
                      f"each check runs its checks on the {len(probe.entries)} entries they may reach)")


def _probe(root: Path, probes: list[_Probe], f: Findings) -> list[dict[str, list[str] | None]]:
    """Each probe's answer, ``{entry: its failing checks}``, from
    grader/instructor/corpus_probe.py in a child process (this check imports
    no torch); [] and a finding if it could not answer."""
    plan = json.dumps([{"problem": p.problem, "item": p.item, "entries": p.entries} for p in probes])
    try:
        proc = subprocess.run([sys.executable, "-m", "grader.instructor.corpus_probe"], cwd=root, input=plan,
                              capture_output=True, text=True, timeout=600)
        return list(json.loads(proc.stdout))
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        tail = proc.stderr.strip().splitlines()[-1:] if isinstance(e, json.JSONDecodeError) else [str(e)]
        f.need(False, f"grader/instructor/corpus_probe.py: could not run the new items' checks on the wrong entries "
                      f"({'; '.join(tail)}): LAB_FULL_CORPUS=1 pytest selftest/test_wrong_corpus.py runs them all")
        return []


def _check_budgets(rubric: rubric_module.Rubric, root: Path, f: Findings) -> None:
    path = root / "grader" / "budgets.toml"
    costs = tomllib.loads(path.read_text()) if path.is_file() else {}
    for problem in rubric.problems:
        if problem.gpu or problem.cpu_budget is not None:
            continue
        missing = sorted({file for file in problem.files for profile, files in costs.get("profiles", {}).items()
                          if file not in files} | ({*problem.files} if not costs.get("profiles") else set()))
        if missing:
            f.notes.append(f"grader/budgets.toml: no figure for {', '.join(missing)}: before the release, run "
                           f"`python -m grader calibrate --problems {problem.name}` on an idle machine (until then "
                           "a generous budget stands in)")


def check(root: Path = REPO) -> Findings:
    """Every finding for the repository at ``root`` (see the module docstring)."""
    f = Findings()
    try:
        rubric = rubric_module.load(root / "grader" / "rubric.toml")
    except rubric_module.RubricError as e:
        f.need(False, f"grader/rubric.toml: {e}")
        return f
    handout = (root / "handout.md").read_text() if (root / "handout.md").is_file() else ""
    f.need(bool(handout), "handout.md: missing")
    for problem in rubric.problems:
        _check_problem(problem, root, handout, f)
    rows = [m[2] for m in _TABLE_ROW.finditer(handout)]
    modules = [p.name for p in rubric.problems if any(not rubric_module.is_hidden(c) for c in p.files)]
    f.need(rows == modules, f"handout.md: the table of problems lists {', '.join(rows) or 'none'}; the rubric "
                            f"{', '.join(modules)} (one row per problem, in the rubric's order)")
    for stub in sorted((root / "student").glob("*.py")):
        f.need(stub.stem.startswith("_") or stub.stem in modules,
               f"student/{stub.name}: a stub no rubric problem grades (add the problem to grader/rubric.toml, or "
               "remove the stub)")
    listed = {c for p in rubric.problems for c in p.files}
    for path in [*sorted((root / "tests").glob("test_*.py")), *sorted((root / "grader" / "hidden").glob("test_*.py"))]:
        file = path.relative_to(root).as_posix()
        f.need(file in listed, f"{file}: no problem's files in grader/rubric.toml list it (its checks would never be "
                               "graded): add it to its problem's files, or remove it with a retired problem")
    _check_markers(root, modules, f)
    _check_corpus(rubric, root, f)
    _check_budgets(rubric, root, f)
    return f


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader check``."""
    p = argparse.ArgumentParser(
        prog="python -m grader check",
        description="Find every place a change to the assignment still needs (stubs and reference, rubric, "
                    "handout, tests, markers, corpus): reads the sources and takes about a second; runs a new "
                    "rubric item's checks on the wrong corpus (seconds) until grader/corpus/wrong_checked.toml "
                    "lists it. docs/authoring.md has a recipe per change.")
    p.add_argument("--root", type=Path, default=REPO, help="the repository to check (default: this one)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if not (args.root / "grader" / "rubric.toml").is_file():
        p.error(f"{args.root} holds no grader/rubric.toml")
    start = time.perf_counter()
    found = check(args.root.resolve())
    for error in found.errors:
        print(f"missing: {error}")
    for note in found.notes:
        print(f"note: {note}")
    verdict = f"{len(found.errors)} thing(s) missing" if found.errors else "nothing missing"
    print(f"check: {verdict}; {found.checked} comparisons in {time.perf_counter() - start:.2f} s")
    return 1 if found.errors else 0


if __name__ == "__main__":
    sys.exit(main())

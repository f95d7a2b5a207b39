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
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from grader import rubric as rubric_module
from grader.instructor.reach import check_wrong_items
from grader.sourcefacts import (
    classes_of,
    decorator_marks,
    find_method,
    marks_used,
    methods_of,
    parse_file,
    public_defs,
    signature,
    stub_messages,
    stubs_of,
    tests_of,
)
from grader.util import REPO, tomllib

__all__ = ["Findings", "check", "main"]

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


def _compare_signatures(where: str, stub: list[str], ref: list[str], f: Findings) -> None:
    if stub == ref:
        f.checked += 1
        return
    diff = next((i for i, (s, r) in enumerate(zip(stub, ref, strict=False)) if s != r), min(len(stub), len(ref)))

    def said(params: list[str]) -> str:
        return params[diff] if diff < len(params) else "nothing"

    f.need(False, f"{where}: parameter {diff + 1} is `{said(stub)}` in the stub but `{said(ref)}` in the "
                  "reference: make them the same (the tests pass arguments by keyword as well as by position)")

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
    has_stub = f.need(stub_path.is_file(), f"student/{name}.py: missing (the stub of problem {name}; "
                                           "each function raising NotImplementedError)")
    stub = parse_file(stub_path) if has_stub else None
    has_ref = f.need(ref_path.is_file(), f"reference/{name}.py: missing (the reference solution of problem {name})")
    ref = parse_file(ref_path) if has_ref else None
    stubbed = stubs_of(stub) if stub else []
    if stub is not None:
        f.need(bool(stubbed), f"student/{name}.py: no function raises NotImplementedError(\"<name>: see handout "
                              f"§{problem.section}\")")
        for node in public_defs(stub).values():
            for message in stub_messages(node):
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
    mine, theirs = public_defs(stub), public_defs(ref)
    ref_classes = classes_of(ref)
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
            for method, fn in methods_of(node).items():
                if method.startswith("_") and method not in ("__init__", "__call__"):
                    continue
                found = find_method(method, other, ref_classes)
                if found is None:
                    continue  # inherited from a base of another module (torch.optim.Optimizer, nn.Module)
                _compare_signatures(f"{where}.{method}", signature(fn), signature(found), f)
        else:
            assert not isinstance(other, ast.ClassDef)
            _compare_signatures(where, signature(node), signature(other), f)
    for obj in theirs:
        f.need(obj in mine, f"student/{name}.py: missing {obj} (reference/{name}.py has it; a public name of the "
                            "reference is part of the assignment's API; prefix it with _ if it is a helper)")


def _check_tests(problem: rubric_module.Problem, root: Path, stubbed: Sequence[str], f: Findings) -> None:
    """Rubric coverage, ``extends`` targets, and a public test for every stubbed function."""
    public: dict[str, dict[str, ast.FunctionDef]] = {}
    hidden: dict[str, dict[str, ast.FunctionDef]] = {}
    texts = []
    for file in problem.files:
        tree = parse_file(root / file)
        if tree is None:
            continue
        (hidden if rubric_module.is_hidden(file) else public)[file] = tests_of(tree)
        if not rubric_module.is_hidden(file):
            texts.append((root / file).read_text())
    names = set()
    for file, tests in public.items():
        for test, fn in tests.items():
            if any(m == "feedback_only" for m, _ in decorator_marks(fn)):
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
            extends = [a for m, a in decorator_marks(fn) if m == "extends"]
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
            tree = parse_file(path)
            for mark in sorted(marks_used(tree) - known) if tree else ():
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
            stub = parse_file(root / "student" / module.name)
            mine = parse_file(module)
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
            stub, mine = parse_file(root / "student" / module.name), parse_file(module)
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
    check_wrong_items(rubric, root, wrong, f)



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

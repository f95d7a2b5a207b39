"""Which rubric items each wrong-corpus entry's patch may reach, and the probe
that runs a new item's checks on those entries (``python -m grader check``).

The reach is static: an item's checks, the helpers and scenarios they name and
the reference's functions these call, closed over what each uses; a wrong
entry's patch reaches the items whose closure holds a name its patch changes.
An over-estimate: the probe (grader/instructor/corpus_probe.py, a child
process) decides by running the checks.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from grader import rubric as rubric_module
from grader.sourcefacts import decorator_marks, parse_file, tests_of
from grader.util import REPO, tomllib

if TYPE_CHECKING:
    from grader.instructor.check import Findings


#: The rubric items each problem's wrong entries were checked against (see :func:`check_wrong_items`).
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
    scenarios = [_uses(t) for t in map(parse_file, sorted((root / "tests" / "scenarios").glob("*.py"))) if t]
    public = {n for n in reference if not n.startswith("_")}
    reach: dict[str, set[str]] = {i.name: set() for i in problem.items}
    params = [p for i in problem.items for p in i.params]
    for file in problem.files:
        tree = parse_file(root / file)
        if tree is None:
            continue
        helpers = _uses(tree)
        for test, fn in tests_of(tree).items():
            extends = [a for m, a in decorator_marks(fn) if m == "extends"]
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
    tree = parse_file(root / "reference" / f"{problem.name}.py")
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


def check_wrong_items(rubric: rubric_module.Rubric, root: Path, wrong: dict[str, dict], f: Findings) -> None:
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

"""The grader's rooms stand on floors: a module imports only rooms on its own
floor or below (function-level imports too), and no module (of the grader, the tests, the selftests and the
benchmarks) is over 500 lines.

A room is a top-level module or package of grader/ (``sandbox``, ``rubric``),
or a module FLOORS names on its own (``report.progress``, a leaf over
``util`` that ``groups`` uses). The corpus's submissions and grader/hidden
(tests, not the grader) are left out of the walk.
``python -m selftest.test_layers`` prints the rooms' graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Bottom to top.
FLOORS = [
    {"__init__", "util"},
    {"imports", "sourcefacts", "rubric", "staging", "report.progress"},
    {"corpus"},
    {"worker"},
    {"sandbox"},
    {"budgets", "mfu"},
    {"protocol"},
    {"plugin", "outcomes", "groups", "scoring", "results", "feedback"},
    {"report"},
    {"engine"},
    {"cli", "__main__"},
    {"instructor"},
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
MAX_LINES = 500


def _files(top: str, *, hidden: bool) -> list[Path]:
    """The .py files under ``top`` but the corpus's submissions (and grader/hidden unless ``hidden``)."""
    def kept(parts: tuple[str, ...]) -> bool:
        submission = parts[:2] == ("grader", "corpus") and len(parts) > 3
        return not submission and (hidden or parts[:2] != ("grader", "hidden"))
    return [p for p in sorted((REPO / top).rglob("*.py")) if kept(p.relative_to(REPO).parts)]


def room(module: str) -> str:
    """The room of ``module`` (a dotted name under grader)."""
    parts = module.split(".")[1:] or ["__init__"]
    return next((".".join(parts[:n]) for n in (2, 1) if ".".join(parts[:n]) in FLOOR), parts[0])


def edges() -> list[tuple[str, str, str]]:
    """(room, imported room, where) for every import of another room in grader/."""
    found = []
    for path in _files("grader", hidden=False):
        rel = path.relative_to(REPO)
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert not node.level, f"{rel}:{node.lineno}: a relative import (the walk reads absolute ones)"
                base = node.module or ""
                targets = [f"{base}.{a.name}" if base == "grader" else base for a in node.names]
            else:
                continue
            found += [(room(name), room(t), f"{rel}:{node.lineno}") for t in targets
                      if t.startswith("grader.") and room(t) != room(name)]
    return found


def test_no_room_imports_a_room_above_it():
    unplaced = sorted({r for e in edges() for r in e[:2] if r not in FLOOR})
    assert not unplaced, f"rooms on no floor of FLOORS: {unplaced}"
    climbs = [f"{where}: {a} -> {b}" for a, b, where in edges() if FLOOR[b] > FLOOR[a]]
    assert not climbs, "imports up a floor:\n" + "\n".join(climbs)


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(REPO)): n for top in ("grader", "tests", "selftest", "benchmarks")
            for p in _files(top, hidden=True) if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


if __name__ == "__main__":
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges():
        graph.setdefault(a, set()).add(b)
    for a in sorted(graph, key=lambda r: (FLOOR.get(r, -1), r)):
        print(FLOOR.get(a, "?"), a, "->", ", ".join(f"{b} ({FLOOR.get(b, '?')})" for b in sorted(graph[a])))

"""docs/authoring.md followed literally, on a copy of the repository: its
recipes "A function" and "A problem" list files in order, this test changes
each in that order, and after every step ``python -m grader check`` names only
files of the steps still to do (and fails) until the last, then passes. The
new function's and the new problem's tests then run on the copy's reference."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from selftest.repo_copy import REPO, copy_repo

GUIDE = REPO / "docs" / "authoring.md"


def recipe(title: str) -> list[str]:
    """The files of the guide's recipe ``title``, in its order: each numbered step's first `path`."""
    text = GUIDE.read_text()
    section = text.partition(f"\n## {title}\n")[2].partition("\n## ")[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, re.M)


def _check(root: Path) -> tuple[int, set[str]]:
    """The check's exit status and the files its findings name (notes aside)."""
    proc = subprocess.run([sys.executable, "-m", "grader", "check", "--root", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    named = {line.removeprefix("missing: ").split(":")[0] for line in proc.stdout.splitlines()
             if line.startswith("missing: ")}
    return proc.returncode, named


def _insert(root: Path, file: str, before: str, text: str) -> None:
    path = root / file
    old = path.read_text()
    assert old.count(before) >= 1, f"{file}: no {before!r}"
    path.write_text(old.replace(before, text + before, 1))


def _append(root: Path, file: str, text: str) -> None:
    path = root / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.is_file() else "") + text)


def _follow(root: Path, module: str, steps: list[str], edits: dict[str, Callable[[Path], None]],
            optional: set[str]) -> None:
    """Do ``steps`` in order (files with ``<m>`` for ``module``); after each, the
    check names only files of later steps, until it passes."""
    assert set(steps) == set(edits), f"the guide's steps {steps} are not the ones this test knows {sorted(edits)}"
    files = [step.replace("<m>", module) for step in steps]
    optional = {step.replace("<m>", module) for step in optional}
    for i, step in enumerate(steps):
        edits[step](root)
        rc, named = _check(root)
        later = set(files[i + 1:])
        assert named <= later, f"after {step}: the check names {sorted(named - later)}, no later step's file"
        if later - optional:
            assert rc == 1 and named, f"after {step}: the check passes with {sorted(later - optional)} still to do"
    rc, named = _check(root)
    assert rc == 0 and not named, f"all steps done, but the check names {sorted(named)}"


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
                          cwd=root, capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ a function

FUNCTION_EDITS: dict[str, Callable[[Path], None]] = {
    "student/<m>.py": lambda root: _insert(root, "student/precision.py", "def tensor_bytes(", '''\
def element_count(shape: tuple[int, ...]) -> int:
    """The number of elements of a tensor of ``shape`` (1 for ``()``).

    Raises:
        TypeError: ``shape`` is not a tuple of ints.
    """
    raise NotImplementedError("element_count: see handout §1.1")


'''),
    "reference/<m>.py": lambda root: _insert(root, "reference/precision.py", "def tensor_bytes(", '''\
def element_count(shape: tuple[int, ...]) -> int:
    """The number of elements of a tensor of ``shape`` (1 for ``()``)."""
    return math.prod(require_shape("shape", shape))


'''),
    "handout.md": lambda root: _insert(root, "handout.md", ", `tensor_bytes`, `float_format`",
                                       ", `element_count`"),
    "tests/test_<m>.py": lambda root: _append(root, "tests/test_precision.py", '''

# ------------------------------------------------------------------ element_count


def test_element_count_of_worked_shapes(impl):
    assert impl.precision.element_count((4, 8)) == 32
    assert impl.precision.element_count(()) == 1
'''),
    "grader/rubric.toml": lambda root: _add_item(root),
    "grader/hidden/test_<m>_hidden.py": lambda root: _append(root, "grader/hidden/test_precision_hidden.py", '''

@pytest.mark.extends("tests/test_precision.py::test_element_count_of_worked_shapes")
def test_element_count_of_large_shapes(impl, ref):
    assert impl.precision.element_count((10**6, 10**6)) == ref.precision.element_count((10**6, 10**6))
'''),
    "grader/corpus/correct/<m>-from_the_handout/<m>.py": lambda root: _append(
        root, "grader/corpus/correct/precision-from_the_handout/precision.py", '''

def element_count(shape):
    """The number of elements of a tensor of ``shape``."""
    count = 1
    for size in shape:
        count *= size
    return count
'''),
}


def _add_item(root: Path) -> None:
    """An item of its own for element_count, its point taken from the problem's
    largest item, so precision's total stays."""
    path = root / "grader" / "rubric.toml"
    text = path.read_text()
    start = text.index('name = "precision"')
    end = text.index("[[problem]]", start)
    block = text[start:end]
    points = [(int(m[1]), m.start()) for m in re.finditer(r"^points = (\d+)$", block, re.M)][1:]  # items' points
    most, at = max(points)
    block = block[:at] + f"points = {most - 1}" + block[at + len(f"points = {most}"):]
    block = block.rstrip("\n") + ('\n\n[[problem.item]]\nname = "element_count"\npoints = 1\n'
                                  'checks = ["test_element_count_*"]\n\n')
    path.write_text(text[:start] + block + text[end:])


def test_the_guide_adds_a_function(tmp_path):
    steps = recipe("A function")
    assert steps[:2] == ["student/<m>.py", "reference/<m>.py"], steps
    root = copy_repo(tmp_path / "repo")
    _follow(root, "precision", steps, FUNCTION_EDITS, optional={"grader/hidden/test_<m>_hidden.py"})
    passed = _pytest(root, "tests/test_precision.py", "grader/hidden/test_precision_hidden.py", "-k", "element_count",
                     "--impl=reference")
    assert passed.returncode == 0 and "2 passed" in passed.stdout, passed.stdout[-3000:]
    stub = _pytest(root, "tests/test_precision.py", "-k", "element_count")
    assert stub.returncode == 1 and re.search(r"§1\.1\s+element_count\s+1 test", stub.stdout), stub.stdout[-3000:]


# ------------------------------------------------------------------ a problem

PROBLEM_EDITS: dict[str, Callable[[Path], None]] = {
    "grader/rubric.toml": lambda root: _insert(root, "grader/rubric.toml", '[[problem]]\nname = "mfu"', '''[[problem]]
name = "units"
section = "7"
points = 5
visibility = "visible"
files = ["tests/test_units.py", "grader/hidden/test_units_hidden.py"]

[[problem.item]]
name = "kib"
points = 4
checks = ["test_kib_*"]

[[problem.item]]
name = "bad input is rejected"
points = 1
checks = ["test_bad_input_*"]

'''),
    "student/<m>.py": lambda root: _append(root, "student/units.py", '''"""Handout §7: units."""

from __future__ import annotations


def kib(num_bytes: int) -> float:
    """``num_bytes`` in KiB (1024 bytes).

    Raises:
        TypeError: ``num_bytes`` is not an int.
    """
    raise NotImplementedError("kib: see handout §7")
'''),
    "reference/<m>.py": lambda root: _append(root, "reference/units.py", '''"""Reference for handout §7."""

from __future__ import annotations


def kib(num_bytes: int) -> float:
    """``num_bytes`` in KiB (1024 bytes)."""
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int):
        raise TypeError(f"num_bytes must be an int, got {num_bytes!r}")
    return num_bytes / 1024
'''),
    "handout.md": lambda root: (
        _insert(root, "handout.md", "\n\n**How the tests reach your code.**",
                "\n| 7 | `units` | `student/units.py` |"),
        _append(root, "handout.md", "\n## 7. Units (`units`)\n\nYou write in `student/units.py`: `kib`.\n\n"
                                    "A KiB is 1024 bytes.\n")),
    "tests/test_<m>.py": lambda root: _append(root, "tests/test_units.py", '''"""Handout §7: units."""

import pytest


def test_kib_of_worked_examples(impl):
    assert impl.units.kib(2048) == 2.0


def test_bad_input_is_rejected(impl):
    with pytest.raises(TypeError, match="num_bytes"):
        impl.units.kib("2048")
'''),
    "grader/hidden/test_<m>_hidden.py": lambda root: _append(root, "grader/hidden/test_units_hidden.py", '''\
"""Hidden checks for handout §7."""

import pytest


@pytest.mark.extends("tests/test_units.py::test_kib_of_worked_examples")
def test_kib_of_large_counts(impl, ref):
    assert impl.units.kib(3 << 40) == ref.units.kib(3 << 40)
'''),
    "grader/corpus/correct/<m>-from_the_handout/<m>.py": lambda root: _append(
        root, "grader/corpus/correct/units-from_the_handout/units.py", '''\
"""Written from the handout alone: a shift-free division."""


def kib(num_bytes):
    if type(num_bytes) is not int:
        raise TypeError(f"num_bytes must be an int, got {num_bytes!r}")
    return float(num_bytes) / 1024.0
'''),
}


@pytest.mark.full
def test_the_guide_adds_a_problem(tmp_path):
    """The new problem is then graded end to end: its marker selects its tests,
    and the grader, reading the rubric, gives the reference full marks on it."""
    steps = recipe("A problem")
    assert steps[0] == "grader/rubric.toml", steps
    root = copy_repo(tmp_path / "repo")
    _follow(root, "units", steps, PROBLEM_EDITS, optional=set())
    passed = _pytest(root, "-m", "units", "--impl=reference")
    assert passed.returncode == 0 and "2 passed" in passed.stdout, passed.stdout[-3000:]
    submission = tmp_path / "submission"
    (submission / "student").mkdir(parents=True)
    for module in (root / "reference").glob("*.py"):
        (submission / "student" / module.name).write_bytes(module.read_bytes())
    graded = subprocess.run([sys.executable, "-m", "grader", str(submission), "--problems", "units", "--profile", "dev",
                             "--no-progress", "-q"], cwd=root, capture_output=True, text=True, timeout=900)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    assert re.search(r"^units\s+7\s+5/5\s+passed", graded.stdout, re.M), graded.stdout

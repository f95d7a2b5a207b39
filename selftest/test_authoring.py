"""docs/authoring.md followed literally, on a copy of the repository: its
recipes "A function" and "A problem" list files in order, this test changes
each in that order, and after every step ``python -m grader check`` names only
files of the steps still to do (and fails) until the last, then passes. The
new function's and the new problem's tests then run on the copy's reference.

The new function is ``bits_per_element`` (8 times ``bytes_per_element``): four
wrong-corpus entries' bugs then cost its item too, which only a corpus run of
minutes found before; the check must name those four, with their new
``breaks`` lists, in seconds."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from selftest.repo_copy import REPO, copy_repo

GUIDE = REPO / "docs" / "authoring.md"


def recipe(title: str) -> list[str]:
    """The files of the guide's recipe ``title``, in its order: each numbered step's first `path`."""
    text = GUIDE.read_text()
    section = text.partition(f"\n## {title}\n")[2].partition("\n## ")[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, re.M)


#: The last check of each copy: its output, its CPU seconds (its own and its
#: children's) and its wall seconds, for a step that reads what the check said.
LAST: dict[Path, tuple[subprocess.CompletedProcess[str], float, float]] = {}


def _check(root: Path) -> tuple[int, set[str]]:
    """The check's exit status and the files its findings name (notes aside)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "check", "--root", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST[root] = (proc, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall)
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
    """Do ``steps`` in order (files, or patterns of files, with ``<m>`` for
    ``module``); after each, the check names only files of later steps, until
    it passes."""
    assert set(steps) == set(edits), f"the guide's steps {steps} are not the ones this test knows {sorted(edits)}"
    files = [step.replace("<m>", module) for step in steps]
    optional = {step.replace("<m>", module) for step in optional}
    for i, step in enumerate(steps):
        edits[step](root)
        rc, named = _check(root)
        later = files[i + 1:]
        early = {n for n in named if not any(fnmatchcase(n, pattern) for pattern in later)}
        assert not early, f"after {step}: the check names {sorted(early)}, no later step's file"
        if set(later) - optional:
            assert rc == 1 and named, f"after {step}: the check passes with {sorted(set(later) - optional)} still to do"
    rc, named = _check(root)
    assert rc == 0 and not named, f"all steps done, but the check names {sorted(named)}"


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
                          cwd=root, capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ a function

#: The wrong entries whose bugs cost bits_per_element too, and the breaks each
#: needs: what LAB_FULL_CORPUS=1 selftest/test_wrong_corpus.py -k precision
#: finds (minutes) after the recipe's other steps.
STALE = {
    "precision-bf16_four_bytes": ["bytes_per_element", "tensor_bytes", "bits_per_element", "float_format"],
    "precision-bool_one_bit": ["bytes_per_element", "tensor_bytes", "bits_per_element"],
    "precision-bytes_true_division": ["bytes_per_element", "tensor_bytes", "bits_per_element",
                                      "bad input is rejected; results of the promised Python types"],
    "precision-fp8_four_bytes": ["bytes_per_element", "tensor_bytes", "bits_per_element"],
}
#: The issue's bound on the check that names them, in CPU seconds of the check
#: and its children (the machine is shared: its wall time measures the others' load).
CHECK_CPU_SECONDS = 10.0


def _fix_stale_breaks(root: Path) -> None:
    """The check after the previous step (the rubric's item) named exactly the
    STALE entries, each with the breaks it needs (and asked for the item in
    wrong_checked.toml), within the bound; then the entries get those lists."""
    proc, cpu, wall = LAST[root]
    print(f"grader check naming the stale wrong entries: {cpu:.1f} CPU s, {wall:.1f} s wall")
    named = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"missing: grader/corpus/wrong/(\S+)\.toml: .* make it breaks = (\[.*\])$", line)
        if m:
            named[m[1]] = sorted(json.loads(m[2]))  # (in the rubric's order; the order does not matter)
    assert named == {name: sorted(breaks) for name, breaks in STALE.items()}, proc.stdout
    assert re.search(r"^missing: grader/corpus/wrong_checked\.toml: add 'bits_per_element'", proc.stdout, re.M)
    assert cpu < CHECK_CPU_SECONDS, f"the check took {cpu:.1f} CPU s ({wall:.1f} s wall)"
    for name, breaks in STALE.items():
        path = root / "grader" / "corpus" / "wrong" / f"{name}.toml"
        text, n = re.subn(r"^breaks = \[.*?\]$", "breaks = " + json.dumps(breaks), path.read_text(),
                          count=1, flags=re.M | re.S)
        assert n == 1, name
        path.write_text(text)


def _honest_solutions(root: Path) -> None:
    for module in sorted((root / "grader" / "corpus" / "honest").glob("*/precision.py")):
        _append(root, str(module.relative_to(root)), '''

def bits_per_element(dtype):
    return 8 * bytes_per_element(dtype)
''')


FUNCTION_EDITS: dict[str, Callable[[Path], None]] = {
    "student/<m>.py": lambda root: _insert(root, "student/precision.py", "def tensor_bytes(", '''\
def bits_per_element(dtype: torch.dtype) -> int:
    """Bits one element of ``dtype`` occupies in memory: 8 times its bytes.

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.
        ValueError: ``dtype`` is not one of bytes_per_element's.
    """
    raise NotImplementedError("bits_per_element: see handout §1.1")


'''),
    "reference/<m>.py": lambda root: (
        _insert(root, "reference/precision.py", "def tensor_bytes(", '''\
def bits_per_element(dtype: torch.dtype) -> int:
    """Bits one element of ``dtype`` occupies in memory."""
    return 8 * bytes_per_element(dtype)


'''),
        _insert(root, "reference/precision.py", '"bytes_per_element", "float_format"', '"bits_per_element", ')),
    "handout.md": lambda root: _insert(root, "handout.md", ", `tensor_bytes`, `float_format`",
                                       ", `bits_per_element`"),
    "tests/test_<m>.py": lambda root: (
        _append(root, "tests/test_precision.py", '''

# ------------------------------------------------------------------ bits_per_element


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_bits_per_element_matches_element_size(impl, dtype):
    expected = 8 * torch.empty(0, dtype=dtype).element_size()
    got = impl.precision.bits_per_element(dtype)
    assert got == expected, f"bits_per_element({dtype}): expected {expected}, got {got!r}"
    assert type(got) is int
'''),
        # the bad-input and result-type parametrisations, as the recipe asks
        _insert(root, "tests/test_precision.py", '        ("tensor_bytes", ((2, -1), torch.float32), ValueError),',
                '        ("bits_per_element", ("float32",), TypeError),\n'),
        _insert(root, "tests/test_precision.py", "    if dtype in FORMATS:\n        fmt = impl.precision.float_format",
                "    got = impl.precision.bits_per_element(dtype)\n    assert type(got) is int\n")),
    "grader/hidden/test_<m>_hidden.py": lambda root: _append(root, "grader/hidden/test_precision_hidden.py", '''

@pytest.mark.extends("tests/test_precision.py::test_bits_per_element_matches_element_size")
def test_bits_per_element_like_the_reference(impl, ref):
    for dtype in (torch.float64, torch.bfloat16, torch.bool):
        assert impl.precision.bits_per_element(dtype) == ref.precision.bits_per_element(dtype)
'''),
    "grader/corpus/correct/<m>-from_the_handout/<m>.py": lambda root: _append(
        root, "grader/corpus/correct/precision-from_the_handout/precision.py", '''

def bits_per_element(dtype):
    """Bits per element: a byte is 8 bits."""
    return bytes_per_element(dtype) << 3
'''),
    "grader/corpus/honest/*/<m>.py": _honest_solutions,
    "grader/rubric.toml": lambda root: _add_item(root),
    "grader/corpus/wrong/<m>-*.toml": _fix_stale_breaks,
    "grader/corpus/wrong_checked.toml": lambda root: _insert(root, "grader/corpus/wrong_checked.toml",
                                                             '    "float_format",\n', '    "bits_per_element",\n'),
}


def _add_item(root: Path) -> None:
    """An item of its own for bits_per_element, its point taken from the
    problem's largest item, so precision's total stays."""
    path = root / "grader" / "rubric.toml"
    text = path.read_text()
    start = text.index('name = "precision"')
    end = text.index("[[problem]]", start)
    block = text[start:end]
    points = [(int(m[1]), m.start()) for m in re.finditer(r"^points = (\d+)$", block, re.M)][1:]  # items' points
    most, at = max(points)
    block = block[:at] + f"points = {most - 1}" + block[at + len(f"points = {most}"):]
    block = block.rstrip("\n") + ('\n\n[[problem.item]]\nname = "bits_per_element"\npoints = 1\n'
                                  'checks = ["test_bits_per_element_*"]\n\n')
    path.write_text(text[:start] + block + text[end:])


def test_the_guide_adds_a_function(tmp_path):
    steps = recipe("A function")
    assert steps[:2] == ["student/<m>.py", "reference/<m>.py"], steps
    root = copy_repo(tmp_path / "repo")
    _follow(root, "precision", steps, FUNCTION_EDITS, optional={"grader/hidden/test_<m>_hidden.py"})
    passed = _pytest(root, "tests/test_precision.py", "grader/hidden/test_precision_hidden.py",
                     "-k", "bits_per_element", "--impl=reference")
    assert passed.returncode == 0 and re.search(r"\b14 passed", passed.stdout), passed.stdout[-3000:]
    stub = _pytest(root, "tests/test_precision.py", "-k", "bits_per_element")
    assert stub.returncode == 1 and re.search(r"§1\.1\s+bits_per_element\s+13 tests", stub.stdout), stub.stdout[-3000:]


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
'''),    "grader/corpus/honest/*/<m>.py": lambda root: [_append(root, f"grader/corpus/honest/{s.name}/units.py", '''\
"""Handout §7, in this solution's words."""


def kib(num_bytes):
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int):
        raise TypeError(f"num_bytes must be an int, got {num_bytes!r}")
    return num_bytes / 2**10
''') for s in sorted((root / "grader" / "corpus" / "honest").iterdir()) if s.is_dir()],
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

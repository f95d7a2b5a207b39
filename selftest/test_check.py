"""``python -m grader check`` (grader/instructor/check.py): it passes on this
repository, and on a copy with one place left out it fails naming that place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grader.corpus import wrong_submissions
from grader.instructor.reach import wrong_reach
from grader.rubric import load
from selftest.repo_copy import REPO, copy_repo


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", "check", "--root", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_the_repository_is_complete():
    proc = _check(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing missing" in proc.stdout.splitlines()[-1], proc.stdout


def _edit(root: Path, file: str, find: str, replace: str) -> None:
    """Replace the first occurrence of ``find`` in ``file`` of the copy ``root``."""
    path = root / file
    text = path.read_text()
    assert find in text, f"{file}: no {find!r}"
    path.write_text(text.replace(find, replace, 1))


@pytest.mark.parametrize(("file", "find", "replace", "named"), [
    # a reference parameter renamed: the stub and the reference no longer agree
    ("reference/precision.py", "def tensor_bytes(shape", "def tensor_bytes(dims",
     "reference/precision.py: tensor_bytes: parameter 1 is `positional shape` in the stub but `positional dims`"),
    # a stub's section that is not the rubric's
    ("student/views.py", 'NotImplementedError("storage_index: see handout §1.2")',
     'NotImplementedError("storage_index: see handout §1.3")', "student/views.py: storage_index raises"),
    # a public test no item holds
    ("tests/test_flops.py", "def test_matmul_flops_", "def test_mat_mul_flops_", "counts toward no item of flops"),
    # a hidden check extending a public test that does not exist
    ("grader/hidden/test_views_hidden.py", 'extends("tests/test_views.py::test_', 'extends("tests/test_views.py::tst_',
     "grader/hidden/test_views_hidden.py::test_"),
    # the handout's list of functions missing one
    ("handout.md", "`tensor_bytes`, `float_format`", "`float_format`",
     "handout.md: §1.1's \"You write in\" line lacks `tensor_bytes`"),
    # a marker nobody declared
    ("tests/test_views.py", "\ndef test_", "\n@pytest.mark.quick\ndef test_",
     "pytest.mark.quick is no declared marker"),
    # a wrong-corpus entry breaking an item the rubric does not have
    ("grader/corpus/wrong/views-data_ptr.toml", 'breaks = ["', 'breaks = ["no such item", "',
     "breaks 'no such item', no item of views"),
    # an item the wrong corpus was checked against that the rubric does not have (renamed, retired)
    ("grader/corpus/wrong_checked.toml", "views = [\n", 'views = [\n    "no such item",\n',
     "grader/corpus/wrong_checked.toml: views's 'no such item' is no item of views"),
])
def test_a_place_left_out_is_named(tmp_path, file, find, replace, named):
    if not (REPO / file).is_file():
        pytest.skip(f"{file} is not in this checkout")
    root = copy_repo(tmp_path / "repo")
    _edit(root, file, find, replace)
    proc = _check(root)
    assert proc.returncode == 1, proc.stdout
    assert named in proc.stdout, proc.stdout


def test_the_correct_corpus_names_the_module_to_extend(tmp_path):
    """A function added to a stub: the correct corpus's whole-module copy of
    that module is named as the file to extend (the corpus run would otherwise
    fail minutes later with "module has no attribute")."""
    root = copy_repo(tmp_path / "repo")
    _edit(root, "student/precision.py", "\ndef tensor_bytes(", '''
def element_count(shape: tuple[int, ...]) -> int:
    """The number of elements of a tensor of ``shape``."""
    raise NotImplementedError("element_count: see handout §1.1")


def tensor_bytes(''')
    proc = _check(root)
    assert proc.returncode == 1
    assert ("grader/corpus/correct/precision-from_the_handout/precision.py: extend it with element_count"
            in proc.stdout), proc.stdout
    # each honest solution too (selftest/test_honest_solutions.py, a full test, would find it in minutes)
    for solution in sorted((root / "grader" / "corpus" / "honest").glob("*/precision.py")):
        assert f"{solution.relative_to(root)}: extend it with element_count" in proc.stdout, proc.stdout


def test_the_reach_finds_every_item_a_wrong_entry_breaks():
    """For an item the wrong corpus was never checked against, the check runs
    its checks only on the entries whose patch they may reach, read from the
    sources. Tried on every judgement the corpus holds: each entry's patch is
    placed, and each item its breaks names is one of those its patch reaches."""
    reach = wrong_reach()
    entries = wrong_submissions()
    assert set(reach) == {s.name for s in entries}
    for sub in entries:
        reached = reach[sub.name]
        assert reached is not None, f"{sub.name}: its patch is in no top-level statement of reference/"
        assert set(sub.breaks) <= reached, f"{sub.name}: breaks {sorted(set(sub.breaks) - reached)}, not reached"
    # and it narrows: most patches reach only some of their problem's items (166 of 183 when written), or the
    # check would run every item's checks on every entry
    rubric = load()
    narrowed = [s.name for s in entries if reach[s.name] < {i.name for i in rubric.problem(s.problem).items}]
    assert len(narrowed) >= 3 * len(entries) // 4, f"only {len(narrowed)} of {len(entries)} entries reach fewer items"

"""Every corpus entry still applies to the reference as it is now.

CI grades only a sample of the wrong and correct corpora (selftest/sampling.py),
so an entry whose ``find`` text the reference no longer holds could go
unnoticed until it is sampled. Building is cheap: every entry, every run."""

from __future__ import annotations

import dataclasses

import pytest

from grader.corpus import (
    REFERENCE_LINE,
    build_correct,
    build_wrong,
    copied_entries,
    correct_lineage,
    correct_submissions,
    wrong_submissions,
)
from grader.rubric import load
from tests.harness import HANDOUT_MODULES


@pytest.mark.parametrize("sub", wrong_submissions(), ids=lambda s: s.name)
def test_wrong_entry_applies(sub, tmp_path):
    assert sub.problem in HANDOUT_MODULES, f"{sub.name}: unknown problem {sub.problem!r}"
    folder = build_wrong(sub, tmp_path)
    for file, _, replace in sub.patches:
        assert replace in (folder / "student" / file).read_text()
    items = {i.name for p in load().problems if p.name == sub.problem for i in p.items}
    assert set(sub.breaks) <= items, f"{sub.name}: breaks names no item of {sub.problem}: {set(sub.breaks) - items}"


@pytest.mark.parametrize("sub", correct_submissions(), ids=lambda s: s.name)
def test_correct_entry_applies(sub, tmp_path):
    assert sub.problem in HANDOUT_MODULES, f"{sub.name}: unknown problem {sub.problem!r}"
    assert (build_correct(sub, tmp_path) / "student").is_dir()


def test_correct_lineage_names_every_entry_and_its_first_origin():
    """Patches are the reference's; a listed copy takes its origin's line
    (followed to an entry written apart); a group of writers is one line; the
    others are their own."""
    lines = correct_lineage()
    entries = correct_submissions()
    assert set(lines) == {e.name for e in entries}
    for e in entries:
        if e.patches:
            assert lines[e.name] == REFERENCE_LINE, e.name
        if e.name.endswith("-from_the_handout"):
            assert lines[e.name] == "from_the_handout", e.name
    assert lines["optimizers-slow_per_parameter"] == lines["optimizers-textbook_loops"] == "optimizers-textbook_loops"
    assert lines["einops_ops-slow_loops"] == REFERENCE_LINE
    assert copied_entries() == {e.name for e in entries if e.patches} | {"optimizers-slow_per_parameter",
                                                                          "einops_ops-slow_loops"}


def test_a_whole_module_lacking_a_stubbed_function_names_the_file_to_extend(tmp_path):
    """A function added to the assignment after a correct entry's whole module
    was written: building the entry names that module, instead of the corpus
    run failing minutes later with "module has no attribute"."""
    entry = next(s for s in correct_submissions() if s.name == "precision-from_the_handout")
    old = entry.modules[0]
    short = tmp_path / "precision-from_the_handout" / "precision.py"
    short.parent.mkdir()
    short.write_text(old.read_text().replace("def tensor_bytes(", "def _tensor_bytes_gone("))
    with pytest.raises(ValueError, match=r"precision\.py: extend it with tensor_bytes"):
        build_correct(dataclasses.replace(entry, modules=(short,)), tmp_path / "built")

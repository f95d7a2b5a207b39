"""Batch grading of a Gradescope export: the submissions zip with its
metadata (names, ids, emails; loose module files graded as student/), and
the metadata reader, a YAML subset that refuses what it cannot read.

The fake grader and the submission builders are in selftest/batching.py."""

from __future__ import annotations

import zipfile

import pytest

from grader.instructor import discovery, gradescope_export
from selftest.batching import (
    fake_grader_fixture,  # noqa: F401 (the fixture fake_grader)
    make_sub,
    read_gradebook,
    run_batch,
)

GRADESCOPE_METADATA = """\
---
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '001'
    :email: ada@example.edu
  - :name: Charles Babbage
    :sid: '002'
    :email: charles@example.edu
  :created_at: 2025-04-10 12:00:00.000000000 -07:00
  :score: 0.0
  :status: processed
submission_102:
  :submitters:
  - :name: Grace Hopper
    :sid: '003'
    :email: grace@example.edu
  :created_at: 2025-04-11 09:30:00.000000000 -07:00
  :status: processed
"""


def test_gradescope_export_zip_with_metadata(tmp_path, fake_grader):
    export = tmp_path / "assignment_export"
    export.mkdir()
    make_sub(export, "submission_101")
    # Gradescope keeps what students uploaded: here the files of student/ at the top
    (export / "submission_102").mkdir()
    (export / "submission_102" / "precision.py").write_text("x = 1\n")
    (export / "submission_metadata.yml").write_text(GRADESCOPE_METADATA)
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(export.rglob("*")):
            z.write(p, p.relative_to(tmp_path).as_posix())
    out = tmp_path / "out"
    proc = run_batch(archive, out)
    assert proc.returncode == 0, proc.stderr
    book = read_gradebook(out)
    assert set(book) == {"submission_101", "submission_102"}
    assert book["submission_101"]["name"] == "Ada Lovelace; Charles Babbage"
    assert book["submission_101"]["sid"] == "001; 002" and book["submission_101"]["score"] == "10"
    assert book["submission_102"]["email"] == "grace@example.edu"
    # loose module files are graded as student/ (views.py is missing: those points are lost)
    assert book["submission_102"]["status"] == "graded" and book["submission_102"]["score"] == "5"


def test_parse_gradescope_metadata():
    meta = gradescope_export.parse_gradescope_metadata(GRADESCOPE_METADATA)
    assert meta == {
        "submission_101": [{"name": "Ada Lovelace", "sid": "001", "email": "ada@example.edu"},
                           {"name": "Charles Babbage", "sid": "002", "email": "charles@example.edu"}],
        "submission_102": [{"name": "Grace Hopper", "sid": "003", "email": "grace@example.edu"}],
    }


def test_gradescope_metadata_reader_is_yaml_not_a_line_guess(tmp_path, capsys):
    """Quoted scalars are unquoted with their escapes, folded scalars joined, block
    scalars, tags and flow collections never mistaken for submitters; text outside
    the subset is refused with its line, and the batch then leaves names blank."""
    from grader.instructor.gradescope_export import MetadataError, parse_block_yaml

    text = """\
# exported
'submission 7':
  :submitters:
    - :name: "O'Brien \\u00e9"
      :sid: 'it''s'
      :email:
    -
      :name: A long
        name
  :results: !ruby/object:Foo
    :submitters: |
      - :name: not a submitter
    :x: [1, 2,
      3]
submission_8:
  :submitters: []
"""
    assert gradescope_export.parse_gradescope_metadata(text) == {
        "submission 7": [{"name": "O'Brien \u00e9", "sid": "it's"}, {"name": "A long name"}],
        "submission_8": [],
    }
    assert parse_block_yaml(text)["submission 7"][":results"][":x"] == "[1, 2, 3]"
    for bad in ("a:\n\tb: 1\n", "a: 'x\n", "a:\n  b: 1\n c: 2\n", "- a\nb: 1\n"):
        with pytest.raises(MetadataError, match="line"):
            parse_block_yaml(bad)
    make_sub(tmp_path, "submission_1")
    (tmp_path / "submission_metadata.yml").write_text("submission_1:\n  :submitters: 'unclosed\n")
    assert [(s.id, s.submitters) for s in discovery.discover(tmp_path)] == [("submission_1", [])]
    assert "line 2" in capsys.readouterr().err

"""The class similarity report (grader/instructor/similarity/) on a small class.

A small class built here, all on the handout's ``views`` module:

* ``alice`` and ``bob`` wrote their solutions apart (different loops, helpers,
  checks): their pair must score low;
* ``carol`` copied alice and renamed every variable, helper and argument check,
  and rewrote the comments: the pair must be flagged (copydetect's tokens hide
  names);
* ``dave`` copied the reference: he must be flagged against ``(reference)``;
* ``helen`` copied alice into ``student/_impl.py``, which her ``views.py``
  imports: compared as the code ``views`` imports, she pairs with alice;
* ``ivan`` copied torch's own Adam (torch/optim/adam.py) as his optimizers:
  he must be flagged against ``torch.optim (library)``, while the reference's
  optimizers (written apart) stay low against it;
* ``eve`` hides a ``<script>`` in her code (the report must show it as text)
  and a symlink to the reference's precision.py (never followed: staged copies
  hold regular files only), and her module would write a file if it were run
  (the report never runs submission code).

What is discounted (expected, common and short shared code, the stubs, the
imports): test_similarity_discounts.py; a class made of the project's correct
corpus and the false-flag rate: test_similarity_calibration.py.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from grader import __main__ as entry
from grader.instructor import batch, similarity
from grader.instructor.grading import GRADER_ENV
from selftest.similarity_outputs import _flagged, _pairs, _row, _score, _submissions

REPO = Path(__file__).resolve().parent.parent

ALICE = '''"""views, alice."""
from collections.abc import Sequence

import torch


def _ints(name, values):
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name}: expected a sequence of ints")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: {v!r} is not an int")
        if v < 0:
            raise ValueError(f"{name}: {v} is negative")
        out.append(v)
    return out


def contiguous_strides(shape):
    dims = _ints("shape", shape)
    result = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        result[k] = result[k + 1] * max(dims[k + 1], 1)
    return tuple(result)


def storage_index(index, strides, storage_offset=0):
    idx, st = _ints("index", index), _ints("strides", strides)
    (off,) = _ints("storage_offset", [storage_offset])
    if len(idx) != len(st):
        raise ValueError("index and strides differ in length")
    total = off
    for position, step in zip(idx, st):
        total += position * step
    return total


def is_contiguous(shape, strides):
    dims, st = _ints("shape", shape), _ints("strides", strides)
    if len(dims) != len(st):
        raise ValueError("shape and strides differ in length")
    if any(d == 0 for d in dims):
        return True
    want = contiguous_strides(dims)
    return all(d == 1 or s == w for d, s, w in zip(dims, st, want))


def same_storage(a, b):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError("same_storage takes two tensors")
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
'''

BOB = '''"""My views module (bob)."""
import math
import numbers

from torch import Tensor


def _check_dims(label, dims):
    try:
        items = tuple(dims)
    except TypeError:
        raise TypeError(label + " is not a sequence") from None
    if isinstance(dims, str):
        raise TypeError(label + " is a string")
    bad = [x for x in items if type(x) is bool or not isinstance(x, numbers.Integral)]
    if bad:
        raise TypeError(label + " holds non-integers: " + repr(bad))
    if min(items, default=0) < 0:
        raise ValueError(label + " holds a negative entry")
    return items


def contiguous_strides(shape):
    shape = _check_dims("shape", shape)
    return tuple(math.prod(max(n, 1) for n in shape[i + 1:]) for i in range(len(shape)))


def storage_index(index, strides, storage_offset=0):
    index = _check_dims("index", index)
    strides = _check_dims("strides", strides)
    base = _check_dims("offset", (storage_offset,))[0]
    if len(strides) != len(index):
        raise ValueError("length mismatch")
    return base + sum(map(lambda pair: pair[0] * pair[1], zip(index, strides)))


def is_contiguous(shape, strides):
    shape = _check_dims("shape", shape)
    strides = _check_dims("strides", strides)
    if len(strides) != len(shape):
        raise ValueError("length mismatch")
    if math.prod(shape) == 0:
        return True
    running = 1
    i = len(shape)
    while i > 0:
        i -= 1
        if shape[i] > 1:
            if strides[i] != running:
                return False
            running = running * shape[i]
    return True


def same_storage(a, b):
    for t in (a, b):
        if not isinstance(t, Tensor):
            raise TypeError("not a tensor: " + type(t).__name__)
    first = a.untyped_storage()
    second = b.untyped_storage()
    return first.data_ptr() == second.data_ptr() and a.device == b.device
'''

# alice's code with every name a student would rename renamed, comments rewritten.
RENAMES = {"_ints": "_as_int_list", "name": "label", "values": "items", "out": "acc", "dims": "sizes",
           "result": "res", "idx": "ii", "st": "ss", "off": "base", "total": "acc_sum", "position": "p",
           "step": "q", "want": "expected", '"""views, alice."""': '"""Views (my own work!)."""'}


def _renamed(text: str) -> str:
    import re

    for old, new in RENAMES.items():
        text = (re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text) if old.isidentifier()
                else text.replace(old, new))
    return text


EVE = ALICE.replace('"""views, alice."""', '"""</pre><script>alert("pwned")</script><pre>"""') + (
    "\n\nopen('{marker}', 'w').write('ran')  # the report must never run this\n"
    "X = '<script>document.title = 1</script>'\n")


def _torch_adam() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin
    return Path(spec.origin).parent / "optim" / "adam.py"


TORCH_ADAM = _torch_adam()


def _student(root: Path, name: str, files: dict[str, str]) -> Path:
    pkg = root / name / "student"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for module, text in files.items():
        (pkg / f"{module}.py").write_text(text)
    return pkg


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("class")
    marker = root.parent / "eve-ran"
    _student(root, "alice", {"views": ALICE})
    _student(root, "bob", {"views": BOB})
    _student(root, "carol", {"views": _renamed(ALICE)})
    dave = _student(root, "dave", {"views": (REPO / "reference" / "views.py").read_text()})
    shutil.copyfile(REPO / "reference" / "_validate.py", dave / "_validate.py")
    helen = _student(root, "helen", {"views": "from ._impl import *  # noqa: F403\n"})
    (helen / "_impl.py").write_text(ALICE)
    _student(root, "ivan", {"optimizers": TORCH_ADAM.read_text().replace("class Adam(", "class MyAdam(")})
    eve = _student(root, "eve", {"views": EVE.replace("{marker}", str(marker))})
    os.symlink(REPO / "reference" / "precision.py", eve / "precision.py")
    # A zip submission and a broken one: staged (or skipped) as the batch does.
    with zipfile.ZipFile(root / "frank.zip", "w") as z:
        z.writestr("frank-main/student/__init__.py", "")
        z.writestr("frank-main/student/views.py", BOB)
    (root / "gina").mkdir()
    (root / "gina" / "notes.txt").write_text("no code here")
    out = root.parent / "similarity-out"
    console = io.StringIO()
    with contextlib.redirect_stdout(console):  # what the instructor reads first: kept beside the outputs
        assert entry.main(["similarity", str(root), "--out", str(out)]) == 0
    (root.parent / "console.txt").write_text(console.getvalue())
    return out, marker


def test_honest_pair_scores_low(klass):
    out, _ = klass
    assert _score(out, "alice", "bob") < 0.2 and not _flagged(out, "alice", "bob")
    assert float(_row(out, "alice", "bob")["raw_similarity"]) > 0  # they do share code, all of it discounted


def test_renamed_copy_scores_high(klass):
    out, _ = klass
    assert _renamed(ALICE) != ALICE and "_as_int_list" in _renamed(ALICE)
    assert _score(out, "alice", "carol") > 0.8 and _flagged(out, "alice", "carol")
    # The zip holds bob's code: found through the same staging as the batch.
    assert _score(out, "bob", "frank") > 0.9 and _flagged(out, "bob", "frank")


def test_copy_of_the_reference_is_flagged(klass):
    out, _ = klass
    assert _score(out, "dave", similarity.REFERENCE_ID) > 0.9
    rows = _submissions(out)
    assert rows["dave"]["most_similar_to"] == similarity.REFERENCE_ID and rows["dave"]["flagged"] == "1"
    assert rows["dave"]["flagged_with"] == similarity.REFERENCE_ID
    assert float(rows["dave"]["reference_score"]) > 0.9
    # alice's argument checks resemble the reference's _validate.py, which its views imports: below the flag.
    assert float(rows["alice"]["reference_score"]) < similarity.THRESHOLD
    assert rows["bob"]["flagged_with"] == "frank"


def test_copy_in_a_helper_module_counts_where_it_is_imported(klass):
    out, _ = klass
    assert _score(out, "alice", "helen") > 0.9 and _flagged(out, "alice", "helen")
    assert _score(out, "bob", "helen") < 0.2


def test_copy_of_torch_optim_is_flagged(klass):
    out, _ = klass
    assert _score(out, "ivan", similarity.LIBRARY_ID, "optimizers") > 0.9
    rows = _submissions(out)
    assert rows["ivan"]["most_similar_to"] == similarity.LIBRARY_ID and rows["ivan"]["flagged"] == "1"
    assert float(rows["ivan"]["library_score"]) > 0.9
    assert float(rows["alice"]["library_score"]) == 0.0  # no optimizers: nothing to compare
    # Optimizers written apart (the reference's) share little with torch's.
    assert not _flagged(out, similarity.REFERENCE_ID, similarity.LIBRARY_ID, "optimizers")
    assert _score(out, similarity.REFERENCE_ID, similarity.LIBRARY_ID, "optimizers") < 0.2


def test_module_units_follow_imports():
    files = {"__init__": "from . import _shared\n", "_shared": "S = 1\n", "views": "from ._v import f\n",
             "_v": "import student._w\n", "_w": "W = 2\n", "model": "from student import views\n",
             "_orphan": "O = 3\n"}
    units = similarity.module_units(files)
    assert set(units) == {"views", "model"}
    headers = {m: [line for line in text.splitlines() if line.startswith("# student/")] for m, text in units.items()}
    assert headers["views"][0] == "# student/views.py"
    assert sorted(headers["views"][1:]) == ["# student/__init__.py", "# student/_orphan.py", "# student/_shared.py",
                                            "# student/_v.py", "# student/_w.py"]
    # model imports views, a handout module compared as itself: not in model's unit.
    assert "# student/views.py" not in headers["model"] and "# student/_orphan.py" in headers["model"]


def test_symlinks_not_followed_and_nothing_run(klass):
    out, marker = klass
    assert not marker.exists(), "the similarity report ran submission code"
    # eve's precision.py is a symlink to the reference: never staged, so no pair.
    assert not [r for r in _pairs(out) if r["module"] == "precision"]


def test_csv_columns_ranking_and_skipped(klass):
    out, _ = klass
    assert (out / "pairs.csv").read_text().splitlines()[0].split(",") == similarity.PAIR_COLUMNS
    rows = list(csv.DictReader(io.StringIO((out / "similarity.csv").read_text())))
    assert list(rows[0]) == similarity.SUBMISSION_COLUMNS
    assert {r["id"] for r in rows} == {"alice", "bob", "carol", "dave", "eve", "frank", "gina", "helen", "ivan"}
    assert next(r for r in rows if r["id"] == "gina")["skipped"]
    ranked = [(int(r["flagged"]), float(r["score"])) for r in _pairs(out)]
    assert ranked == sorted(ranked, reverse=True)  # flagged first, then by score
    assert (out / "calibration.csv").read_text().splitlines()[0].split(",") == similarity.CALIBRATION_COLUMNS


def test_every_output_leads_with_one_row_per_pair(klass):
    """For a busy reader: pair_summary.csv, the report and the console give one
    row per pair of sources (flagged first: its score, its flag, the modules
    that decided it) before any per-module detail."""
    out, _ = klass
    modules = _pairs(out)
    rows = list(csv.DictReader(io.StringIO((out / "pair_summary.csv").read_text())))
    assert list(rows[0]) == similarity.PAIR_SUMMARY_COLUMNS
    pairs = [frozenset((r["submission_a"], r["submission_b"])) for r in rows]
    assert len(pairs) == len(set(pairs)) == len({frozenset((r["submission_a"], r["submission_b"])) for r in modules})
    for row in rows:  # its score is its highest module's; its flag, any module's (or all of them together)
        mine = [r for r in modules if {r["submission_a"], r["submission_b"]} == {row["submission_a"],
                                                                                row["submission_b"]}]
        assert float(row["score"]) == max(float(r["score"]) for r in mine)
        decided = {r["module"] for r in mine if r["flagged"] == "1"}
        assert decided <= set(row["decided_by"].split("; ")) and (row["flagged"] == "1") == bool(row["decided_by"])
    flags = [int(r["flagged"]) for r in rows]
    assert flags == sorted(flags, reverse=True) and sum(flags) >= 4
    carol = next(r for r in rows if {r["submission_a"], r["submission_b"]} == {"alice", "carol"})
    assert carol["flagged"] == "1" and carol["decided_by"].startswith("views")
    assert re.search(r"views \d+% \(threshold \d+%\)", carol["evidence"]), carol["evidence"]
    page = (out / "report.html").read_text()
    first_table = page.index("<table>")
    assert page.index("Pairs of submissions") < first_table < page.index("Module pairs")
    lead = page[first_table:page.index("</table>", first_table)]
    shown = [">flagged<" in r for r in lead.split("<tr>")[2:]]
    assert len(shown) == len(rows) and shown == [f == 1 for f in flags]  # the same rows, flagged first
    console = (out.parent / "console.txt").read_text().splitlines()
    flagged_lines = console[2:]  # after the counts and the false-flag rate: the flagged pairs, one line each
    assert console[0].startswith(f"similarity: 9 submissions, {len(rows)} pairs sharing code, {sum(flags)} flagged")
    assert len(flagged_lines) == min(sum(flags), 10) and all("(threshold " in x for x in flagged_lines)
    assert any("alice" in x and "carol" in x for x in flagged_lines)


def test_report_wraps_long_code_lines(klass):
    """The side-by-side code wraps its long lines (a scrolled pre hides half of a
    pair's region): white-space pre-wrap, breaking anywhere, no horizontal scroll."""
    out, _ = klass
    page = (out / "report.html").read_text()
    style = page[page.index("<style>"):page.index("</style>")]
    pre = style[style.index("pre{"):]
    pre = pre[:pre.index("}")]
    assert "white-space:pre-wrap" in pre and "overflow-wrap:anywhere" in pre and "overflow-x" not in pre
    assert "<pre>" in page


def test_report_escapes_submission_text(klass):
    out, _ = klass
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert "script-src 'none'" in page  # and scripts are forbidden by the page itself
    assert "dave" in page and "(reference)" in page and "<mark" in page


def test_batch_option_writes_the_report(klass, tmp_path, monkeypatch):
    """``batch --similarity`` writes OUT/similarity from the same submissions (fake grader: fast)."""
    script = tmp_path / "fake.py"
    script.write_text("import json, sys\na = sys.argv[1:]\n"
                      "json.dump({'score': 0, 'max_score': 0, 'problems': []}, open(a[a.index('--json') + 1], 'w'))\n")
    monkeypatch.setenv(GRADER_ENV, f"{sys.executable} {script}")
    root = tmp_path / "subs"
    _student(root, "alice", {"views": ALICE})
    _student(root, "carol", {"views": _renamed(ALICE)})
    out = tmp_path / "out"
    assert batch.main([str(root), "--out", str(out), "--jobs", "1", "--quiet", "--similarity"]) == 0
    assert (out / "gradebook.csv").is_file() and (out / "similarity" / "report.html").is_file()
    assert _flagged(out / "similarity", "alice", "carol")


def test_report_shows_evidence_for_a_flagged_pair(klass):
    """Each flagged pair's section: its regions with the lines on both sides and
    who else holds them, what was discounted and why, the raw figure."""
    out, _ = klass
    page = (out / "report.html").read_text()
    section = page[page.index(": alice and carol"):]
    section = section[:section.index("<h2", 1)]
    assert "region" in section and "these two" in section and "Discounted" in section
    assert "expected code" in section and "Raw similarity" in section
    assert '<span class="expected">' in section  # the discounted code is marked apart
    assert "False-flag rate measured on" in page and "A flag means" in page and "does not mean" in page

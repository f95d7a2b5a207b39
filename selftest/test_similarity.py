"""The class similarity report (grader/instructor/similarity.py) on a small class built here.

The class, all on the handout's ``views`` module:

* ``alice`` and ``bob`` wrote their solutions apart (different loops, helpers,
  checks): their pair must score low;
* ``carol`` copied alice and renamed every variable, helper and argument check,
  and rewrote the comments: the pair must score high (copydetect's tokens hide
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
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from grader import __main__ as entry
from grader.instructor import batch, similarity
from grader.instructor.grading import GRADER_ENV

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
    assert entry.main(["similarity", str(root), "--out", str(out), "--quiet"]) == 0
    return out, marker


def _pairs(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "pairs.csv").read_text())))


def _score(out: Path, a: str, b: str, module: str = "views") -> float:
    for row in _pairs(out):
        if row["module"] == module and {row["submission_a"], row["submission_b"]} == {a, b}:
            return float(row["similarity"])
    return 0.0  # no shared code at all


def test_honest_pair_scores_low(klass):
    out, _ = klass
    assert _score(out, "alice", "bob") < 0.2


def test_renamed_copy_scores_high(klass):
    out, _ = klass
    assert _renamed(ALICE) != ALICE and "_as_int_list" in _renamed(ALICE)
    assert _score(out, "alice", "carol") > 0.8
    # The zip holds bob's code: found through the same staging as the batch.
    assert _score(out, "bob", "frank") > 0.9


def test_copy_of_the_reference_is_flagged(klass):
    out, _ = klass
    assert _score(out, "dave", similarity.REFERENCE_ID) > 0.9
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO((out / "similarity.csv").read_text()))}
    assert rows["dave"]["most_similar_to"] == similarity.REFERENCE_ID and rows["dave"]["flagged"] == "1"
    assert float(rows["dave"]["reference_similarity"]) > 0.9
    # Below the flag: the reference's views is compared with the _validate.py it
    # imports, whose argument checks resemble alice's _ints (0.298 measured).
    assert float(rows["alice"]["reference_similarity"]) < similarity.THRESHOLD
    assert rows["bob"]["flagged"] == "0" or rows["bob"]["most_similar_to"] == "frank"


def test_copy_in_a_helper_module_counts_where_it_is_imported(klass):
    out, _ = klass
    assert _score(out, "alice", "helen") > 0.9
    assert _score(out, "bob", "helen") < 0.2


def test_copy_of_torch_optim_is_flagged(klass):
    out, _ = klass
    assert _score(out, "ivan", similarity.LIBRARY_ID, "optimizers") > 0.9
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO((out / "similarity.csv").read_text()))}
    assert rows["ivan"]["most_similar_to"] == similarity.LIBRARY_ID and rows["ivan"]["flagged"] == "1"
    assert float(rows["ivan"]["library_similarity"]) > 0.9
    assert float(rows["alice"]["library_similarity"]) == 0.0  # no optimizers: nothing to compare
    # Optimizers written apart (the reference's) share little with torch's.
    assert _score(out, similarity.REFERENCE_ID, similarity.LIBRARY_ID, "optimizers") < 0.5


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


def test_csv_columns_and_skipped(klass):
    out, _ = klass
    assert (out / "pairs.csv").read_text().splitlines()[0].split(",") == similarity.PAIR_COLUMNS
    rows = list(csv.DictReader(io.StringIO((out / "similarity.csv").read_text())))
    assert list(rows[0]) == similarity.SUBMISSION_COLUMNS
    assert {r["id"] for r in rows} == {"alice", "bob", "carol", "dave", "eve", "frank", "gina", "helen", "ivan"}
    assert next(r for r in rows if r["id"] == "gina")["skipped"]
    ranked = [float(r["similarity"]) for r in _pairs(out)]
    assert ranked == sorted(ranked, reverse=True)


def test_report_escapes_submission_text(klass):
    out, _ = klass
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert "script-src 'none'" in page  # and scripts are forbidden by the page itself
    assert "dave" in page and "(reference)" in page and "<mark>" in page


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
    assert _score(out / "similarity", "alice", "carol") > 0.8


def test_untouched_stubs_and_imports_share_nothing():
    """Two students who left views as the stub, or who share only their import
    lines, have no pair (a k-gram across the stub and __init__ used to pair them)."""
    stub = (REPO / "student" / "views.py").read_text()
    init = (REPO / "student" / "__init__.py").read_text()
    stubs_only = [similarity.Source(n, files=similarity.module_units({"__init__": init, "views": stub}))
                  for n in ("a", "b")]
    assert similarity.compare(stubs_only, similarity.stubs_of()) == []
    imports = "import math\nimport os\nfrom collections.abc import (\n    Iterable,\n    Sequence,\n)\n" \
              "from torch import nn, \\\n    optim\n"
    own = ["def total(xs):\n    return sum(x * x for x in xs if x > 0)\n",
           "class Tally:\n    def __init__(self):\n        self.seen = {}\n"]
    students = [similarity.Source(f"s{i}", files=similarity.module_units({"__init__": "", "views": imports + text}))
                for i, text in enumerate(own)]
    assert similarity.compare(students, similarity.stubs_of()) == []
    blanked = similarity.without_imports(imports + own[0])
    assert len(blanked) == len(imports + own[0]) and blanked.strip() == own[0].strip()

"""A student's first correct function shows in the grade: the stubs with only
the handout's first function (``bytes_per_element``) filled in earn that
function's item, graded as the course grades (public and hidden checks), and
nothing else. (The untouched stubs' whole grade, which earns nothing and is
short to read, is test_grader.py's test_stubs_score_zero_with_no_arguments.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.rubric import load

REPO = Path(__file__).resolve().parent.parent

#: bytes_per_element written as a student would, from the handout: the stub's
#: body replaced, every other function left a stub.
FIRST_FUNCTION = '''
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    bits = {torch.float64: 64, torch.float32: 32, torch.float16: 16, torch.bfloat16: 16,
            torch.float8_e4m3fn: 8, torch.float8_e5m2: 8, torch.int64: 64, torch.int32: 32,
            torch.int16: 16, torch.int8: 8, torch.uint8: 8, torch.bool: 8}
    if dtype not in bits:
        raise ValueError(f"dtype {dtype} is not covered")
    return bits[dtype] // 8
'''


def _grade(folder: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"{folder.name}.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(folder), "--json", str(out), "--no-progress", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


@pytest.mark.timeout(1200)
def test_the_first_function_earns_its_item(tmp_path):
    first = tmp_path / "first"
    shutil.copytree(REPO / "student", first / "student", ignore=shutil.ignore_patterns("__pycache__"))
    module = first / "student" / "precision.py"
    text = module.read_text()
    stub = '    raise NotImplementedError("bytes_per_element: see handout §1.1")\n'
    assert text.count(stub) == 1
    module.write_text(text.replace(stub, FIRST_FUNCTION))

    _, graded = _grade(first, tmp_path, "--problems", "precision", "--profile", "dev", "-q")
    graded = next(p for p in graded["problems"] if p["name"] == "precision")
    items = {i["name"]: i for i in graded["items"]}
    item = load().problem("precision").items_of("test_bytes_per_element_matches_element_size")[0]
    assert items[item.name]["score"] == item.points > 0, items[item.name]
    assert graded["score"] == item.points, {n: i["score"] for n, i in items.items()}

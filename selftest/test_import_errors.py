"""A module that does not import costs the problems that need it, found before
any of their checks runs, and says where and why in one line (grader/imports.py).

Both paths run the real grader on one or two problems: a syntax error is found
by compiling on the trusted side (no trusted pytest process, no worker starts:
a second or two), a missing module by the import each problem's worker tries
before its first check (one trusted process: the hidden phase is skipped).
The batch row's reason is test_batch.py's (with the fake grader)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from grader.imports import NOT_IMPORTED, import_failure, needed_modules
from tests.wire import error_reply, reply_value

REPO = Path(__file__).resolve().parent.parent


def _submission(tmp_path: Path, broken: str, text: str) -> Path:
    """A copy of the reference with ``text`` inserted after ``broken``'s ``from __future__`` line."""
    folder = tmp_path / "sub"
    shutil.copytree(REPO / "reference", folder / "student", ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "student" / f"{broken}.py"
    head, sep, rest = path.read_text().partition("from __future__ import annotations\n")
    assert sep, "the reference module starts with a __future__ import"
    path.write_text(head + sep + text + rest)
    return folder


def _grade(folder: Path, tmp_path: Path, *args: str) -> tuple[str, dict]:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(folder), "--json", str(out), "--no-progress",
                           "--reveal-hidden", "--profile", "dev", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_a_syntax_error_costs_what_imports_it_before_any_check_runs(tmp_path):
    """precision.py does not compile: precision and memory (whose module
    imports precision's) are "error", not graded, with the file, line and
    error; so is einops_ops, whose file is missing; no trusted process or
    worker ever started. views does not need precision.py."""
    folder = _submission(tmp_path, "precision", "def broken(:\n    pass\n")
    package = folder / "student"
    (package / "einops_ops.py").unlink()
    assert "precision" in needed_modules("memory", package) and "precision" not in needed_modules("views", package)
    stdout, result = _grade(folder, tmp_path, "--problems", "precision,memory,einops_ops")
    where = "student/precision.py, line 4: SyntaxError: invalid syntax"
    missing = "student/einops_ops.py: FileNotFoundError: no such file"
    for p in result["problems"]:
        assert p["status"] == "error" and p["score"] == 0 and p["checks"] == [], p
        assert p["output"] == f"{NOT_IMPORTED} ({missing if p['name'] == 'einops_ops' else where})", p["output"]
    assert result["import_errors"] == [f"{where}; not graded: precision, memory",
                                       f"{missing}; not graded: einops_ops"]
    assert result["costs"] == [], "a trusted process ran checks"
    assert f"your code does not import: {where}" in stdout


def test_a_missing_module_is_found_by_the_first_import_and_cuts_the_problem(tmp_path):
    """views.py imports a module that does not exist: the worker's import
    before the first check finds it; every check of views is "not run", the
    problem "error" with the file, line and error; its hidden phase never starts."""
    folder = _submission(tmp_path, "views", "import no_such_module_for_the_grader\n")
    _, result = _grade(folder, tmp_path, "--problems", "views")
    (views,) = result["problems"]
    where = "student/views.py, line 4: ModuleNotFoundError: No module named 'no_such_module_for_the_grader'"
    assert views["status"] == "error" and views["score"] == 0, views
    assert views["output"] == f"{NOT_IMPORTED} ({where})"
    assert result["import_errors"] == [f"{where}; not graded: views"]
    assert len(result["costs"]) == 1, "the hidden phase of a problem that does not import ran"


def test_a_hidden_run_tells_an_import_failure_in_fixed_words(tmp_path):
    """The import each problem's worker tries first: in a public run its
    sentence quotes the submission's exception; in a hidden run only fixed
    words reach the problem's record, and the check does not run."""
    import pytest

    from grader.sandbox.errors import NotRun
    from grader.staging.workcopy import make_working_copy
    from selftest.sandboxing import make_impl

    student = tmp_path / "sub" / "student"
    student.mkdir(parents=True)
    (student / "__init__.py").write_text("")
    (student / "precision.py").write_text("x = 1\nraise RuntimeError('SECRET ' + str(x))\n")
    (tmp_path / "scratch").mkdir()
    work = (make_working_copy(student, tmp_path / "work"), tmp_path / "scratch")
    for hidden in (False, True):
        impl = make_impl(work, hidden=hidden)
        try:
            with pytest.raises(NotRun):
                impl.call("precision", "bytes_per_element", 1)
            record = impl.states["precision"].record()
        finally:
            impl.close()
        expected = ("student/precision.py did not import in the run of the hidden checks" if hidden else
                    "student/precision.py, line 2: RuntimeError: SECRET 1")
        assert record.import_error == expected and record.cut == f"{NOT_IMPORTED} ({expected})", record


def test_an_import_failure_is_one_bounded_printable_line():
    """The exception's message is the submission's: one line, control
    characters dropped, capped; the innermost frame in student/ gives the place."""
    def boom() -> None:
        raise RuntimeError("first line \x1b[2J" + "x" * 1000 + "\nsecond line")

    try:
        boom()
    except RuntimeError as e:
        reply = error_reply(e)
    tb = ('Traceback (most recent call last):\n  File "/submission/student/views.py", line 9, in <module>\n'
          '  File "/submission/student/_util.py", line 3, in helper\nRuntimeError: ...\n')
    from tests import wire

    raw = wire.decode(reply)
    try:
        reply_value({**raw, "traceback": tb})
    except RuntimeError as e:
        line = import_failure("views", e)
    assert line.startswith("student/_util.py, line 3: RuntimeError: first line "), line
    assert "\n" not in line and "\x1b" not in line and len(line) <= 300 and "second line" not in line

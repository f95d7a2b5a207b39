"""A submission's modules that do not import, and the problems each one costs.

A module that does not import (a syntax error, a missing module, an exception
raised at import time) costs the problems that need it, and no more; those
problems read :data:`NOT_IMPORTED` with one plain sentence (file, line,
error) instead of failing check after check. Two ways find it, both before a
problem's first check:

* a syntax error or a missing file, on the trusted side:
  :func:`static_import_errors` compiles each ``student/*.py`` (compiling runs
  nothing of it), and the engine never runs the problems that need such a module;
* a missing module or an import-time crash needs the code to run: the first
  request of each problem in a sandboxed worker is an import of the modules
  it needs (:meth:`grader.sandbox.remote.RemoteImpl`), whose error reply
  :func:`import_failure` turns into the sentence.

The sentence's text (an exception's message) is the submission's: it goes
to the student's own public report of their own import error only, printable,
one bounded line, never to a field about a hidden check.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from grader.util import REPO, printable
from tests import handout_problems

__all__ = ["NOT_IMPORTED", "import_failure", "needed_modules", "problem_modules", "static_import_errors"]

#: What a problem that needs a module that does not import reads first.
NOT_IMPORTED = "not graded: your code does not import"
#: The longest sentence kept (it quotes the submission's exception message).
MAX_SENTENCE = 300


def _sentence(text: str) -> str:
    """``text`` on one printable line of at most :data:`MAX_SENTENCE` characters."""
    line = " ".join(printable(text).split())
    return line if len(line) <= MAX_SENTENCE else line[: MAX_SENTENCE - 1].rstrip() + "…"


def problem_modules(problem: str, root: Path = REPO) -> tuple[str, ...]:
    """The handout modules problem ``problem``'s checks reach: its own module,
    or for a problem that is no module (the GPU-only MFU problem) those its
    scenarios use (``modules.<name>`` in ``tests/scenarios/<problem>.py``;
    none without such a file: nothing says which, so none is held against it)."""
    modules = handout_problems(root)
    if problem in modules:
        return (problem,)
    try:
        tree = ast.parse((root / "tests" / "scenarios" / f"{problem}.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return ()
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "modules" and n.attr in modules}
    return tuple(m for m in modules if m in used)


def _imports(tree: ast.Module, package: str = "student") -> set[str]:
    """The modules of the package that ``tree`` imports (``from . import x``,
    ``from .x import y``, ``import student.x``, ``from student.x import y``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 or (node.level == 0 and (base == package or base.startswith(f"{package}."))):
                rest = base[len(package):].lstrip(".") if node.level == 0 else base
                if rest:
                    found.add(rest.split(".")[0])
                else:
                    found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith(f"{package}."))
    return found


def needed_modules(problem: str, package: Path, root: Path = REPO) -> set[str]:
    """The modules of ``package`` (a submission's ``student/``) that problem
    ``problem`` needs to import: ``__init__``, the modules its checks reach,
    and whatever those import of the package, by their source (a module that
    does not parse imports nothing more)."""
    todo = ["__init__", *problem_modules(problem, root)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            tree = ast.parse((package / f"{name}.py").read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        todo.extend(_imports(tree))
    return seen


def static_import_errors(package: Path, expected: Iterable[str] = ()) -> dict[str, str]:
    """Each module of ``package`` (``student/``) that does not compile, and each
    of the ``expected`` modules that is not there, with the sentence saying
    where and why (``student/views.py, line 3: SyntaxError: invalid syntax``).
    Compiling runs nothing of the submission."""
    errors = {name: f"student/{name}.py: FileNotFoundError: no such file" for name in expected
              if not (package / f"{name}.py").is_file()}
    for path in sorted(package.glob("*.py")):
        if not path.is_file() or path.is_symlink():
            continue
        where = f"student/{path.name}"
        try:
            compile(path.read_bytes(), where, "exec", dont_inherit=True)
        except SyntaxError as e:  # (IndentationError, TabError, a bad encoding)
            line = f", line {e.lineno}" if e.lineno else ""
            errors[path.stem] = _sentence(f"{where}{line}: {type(e).__name__}: {e.msg}")
        except (ValueError, OSError) as e:  # null bytes; unreadable
            errors[path.stem] = _sentence(f"{where}: {type(e).__name__}: {e}")
    return errors


_FRAME = re.compile(r'File "(?:[^"\n]*/)?student/([A-Za-z_][A-Za-z0-9_]*\.py)", line (\d+)')
_RAISED = "\n\nraised in the submission ("
_IN_SUBMISSION = "\n\nin the submission:\n"


def import_failure(module: str, error: BaseException) -> str:
    """The sentence for ``module``'s import that raised ``error`` in a worker
    (as :func:`tests.wire.reply_value` raises it: the message, then the
    worker's traceback): the last frame in ``student/`` (else the module's
    file), the exception's class and the first line of its message."""
    text = str(error)
    kind = str(getattr(error, "remote_type", "") or vars(error).get("remote_type", "") or type(error).__name__)
    if _RAISED in text:
        message, _, tb = text.partition(_RAISED)
    elif _IN_SUBMISSION in text:
        message, _, tb = text.partition(_IN_SUBMISSION)
        message = message.removeprefix(f"{kind}: ")
    else:
        message, tb = text, ""
    frames = _FRAME.findall(tb)
    where = f"student/{frames[-1][0]}, line {frames[-1][1]}" if frames else f"student/{module}.py"
    first = message.strip().splitlines()[0] if message.strip() else ""
    return _sentence(f"{where}: {kind}" + (f": {first}" if first else ""))

"""The student release: ``python -m grader release OUT``.

Builds the repository students clone from this one. What is left out is decided
here, by rule, so that a file added later to an instructor-only folder can never
leak by accident:

* ``reference/`` (the solutions), ``grader/hidden/`` (hidden checks),
  ``grader/corpus/`` (known-wrong and cheating submissions built from the
  reference), ``selftest/`` (the project's own checks, which need the reference);
* instructor tooling and docs: ``docs/``, ``.ci/`` and ``.github/`` of this repo,
  the whole ``grader/instructor/`` package (batch, release, bundle, similarity,
  mutants and their templates), ``README.md`` and ``grader/README.md``;
* benchmarks that need the reference or instructor tooling (any whose source
  mentions ``reference``, the batch grader or ``grader.instructor``).

The students' ``python -m grader`` still works in the release: the grading
pipeline never imports ``grader.instructor``, and ``grader/__main__.py`` answers
an instructor command there with "not available in this checkout".

Rewritten: ``pyproject.toml`` describes only what a student has
(:func:`student_pyproject`): no instructor extras (``[project.optional-dependencies]``:
plots, similarity, mutation testing, the type check) nor the type check's
settings (``[tool.mypy]``), no marker that only the selftests or the hidden
checks use (:data:`INSTRUCTOR_MARKERS`), no path of a folder left out.

Added instead: a README for students (their two commands: ``pytest`` and
``./lab grade``, which runs the public checks only since the reference and the
hidden checks are absent), ``.ci/run`` and ``.github/workflows/grade.yml`` (the
submission CI: the public grader, its JSON kept as an artifact), and
``.ci/run-gpu`` and ``.github/workflows/grade-gpu.yml`` (the MFU problem on the
course's self-hosted GPU runner, by the course's grader installed there; skipped
where the course has not set one up). The result is a git repository with one
commit when git is available.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from grader.instructor.files import TEMPLATES
from grader.util import REPO

__all__ = ["EXCLUDED_DIRS", "EXCLUDED_FILES", "INSTRUCTOR_MARKERS", "build_release", "candidate_files", "main",
           "release_files", "student_pyproject"]


#: Folders never shipped (relative to the repository root).
EXCLUDED_DIRS = (
    "reference", "grader/hidden", "grader/corpus", "grader/instructor", "selftest", "docs", ".ci", ".github",
)
#: Files never shipped (replaced, for README.md).
EXCLUDED_FILES = ("README.md", "grader/README.md")
#: pytest markers only the selftests or the hidden checks use: not declared in the release's pyproject.toml.
INSTRUCTOR_MARKERS = ("extends", "slow", "full", "load")
#: Words no line of the release's pyproject.toml may hold (instructor tooling and what it reads).
_INSTRUCTOR_WORDS = ("LAB_FULL_CORPUS", "optional-dependencies", "cosmic-ray", "copydetect", "mypy", "selftest",
                     "grader/hidden", "grader/corpus", "grader/instructor", "reference/")
#: pyproject.toml's tables the release leaves out: the instructor extras and the type check's settings.
_INSTRUCTOR_TABLES = ("[project.optional-dependencies]", "[tool.mypy]", "[[tool.mypy.overrides]]")
#: Never copied whatever git says (local state).
_LOCAL = (".venv", ".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", "grade-out",
          "build", "dist")


def candidate_files(repo: Path) -> list[str]:
    """The repository's files: git's tracked and untracked-not-ignored files, or,
    without git, every file outside local state folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=repo, capture_output=True, check=True, timeout=60).stdout
        names = sorted({n for n in out.decode().split("\0") if n})
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        names = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    return [n for n in names if (repo / n).is_file() and not set(n.split("/")) & set(_LOCAL)
            and not n.endswith((".pyc", ".egg-info"))]


def _instructor_benchmark(repo: Path, name: str) -> bool:
    """Whether the benchmark ``name`` needs what the release leaves out."""
    text = (repo / name).read_text(errors="replace")
    return any(s in text for s in ("reference", "grader.batch", "grader import batch", "grader.instructor",
                                   "grader import instructor"))


def release_files(repo: Path = REPO) -> list[str]:
    """Relative paths of the files of ``repo`` that the release ships as they are."""
    keep = []
    for name in candidate_files(repo):
        if any(name == d or name.startswith(d + "/") for d in EXCLUDED_DIRS) or name in EXCLUDED_FILES:
            continue
        if name.startswith("benchmarks/") and _instructor_benchmark(repo, name):
            continue
        keep.append(name)
    return keep


def _git_commit(out: Path) -> bool:
    """Make ``out`` a git repository with one commit; False when git is unavailable."""
    if shutil.which("git") is None:
        return False
    ident = ["-c", "user.name=Course staff", "-c", "user.email=staff@localhost", "-c", "commit.gpgsign=false"]
    try:
        for cmd in (["init", "-q"], ["symbolic-ref", "HEAD", "refs/heads/main"], ["add", "-A"],
                    [*ident, "commit", "-q", "-m", "Assignment release"]):
            subprocess.run(["git", *cmd], cwd=out, check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"release: git failed ({e}); {out} is a plain folder", file=sys.stderr)
        return False
    return True


def _copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` with its permission bits, creating folders."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def build_release(out: Path, repo: Path = REPO, *, force: bool = False, git: bool = True) -> list[str]:
    """Write the student release to ``out``; return the relative paths written."""
    out = out.expanduser().resolve()
    if out == repo or out.is_relative_to(repo):
        raise ValueError(f"release: OUT must be outside the repository ({repo}), got {out}")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ValueError(f"release: {out} exists and is not empty (--force replaces it)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    written = release_files(repo)
    for name in written:
        _copy(repo / name, out / name)
    if (out / "pyproject.toml").is_file():
        (out / "pyproject.toml").write_text(student_pyproject((repo / "pyproject.toml").read_text()))
    added = {
        "README.md": TEMPLATES / "release" / "README.md",
        ".ci/run": TEMPLATES / "ci" / "run",
        ".github/workflows/grade.yml": TEMPLATES / "ci" / "grade.yml",
        ".ci/run-gpu": TEMPLATES / "ci" / "run-gpu",
        ".github/workflows/grade-gpu.yml": TEMPLATES / "ci" / "grade-gpu.yml",
    }
    for name, src in added.items():
        _copy(src, out / name)
    for name in (".ci/run", ".ci/run-gpu"):
        (out / name).chmod(0o755)
    missing = [d for d in ("student", "tests") if not (out / d).is_dir()]
    if missing:
        raise RuntimeError(f"release: {', '.join(missing)} missing from the release; is {repo} the lab?")
    _check_nothing_excluded(out)
    if git:
        _git_commit(out)
    return sorted([*written, *added])


def student_pyproject(text: str) -> str:
    """``pyproject.toml``'s text as the release ships it: without the
    ``[project.optional-dependencies]`` table (instructor extras), the
    ``[tool.mypy]`` tables (the type check, an instructor extra) and their
    comments, without the markers of :data:`INSTRUCTOR_MARKERS` (their entries,
    and their names in a "X, Y and Z are set by hand" comment), and without
    array entries naming a folder the release leaves out. Everything else is
    kept as written. Raises RuntimeError when the result does not parse or still
    names instructor tooling (a new instructor-only line must be handled here)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if re.match(r"\s*\[", line):  # a table header: skip an instructor table up to the next one
            skipping = line.strip() in _INSTRUCTOR_TABLES
            if skipping:
                while out and (out[-1].startswith("#") or not out[-1].strip()):
                    out.pop()  # its comments above it, and the blank lines before them
                out.append("")
        if skipping:
            continue
        marker = re.match(r'\s*"(\w+)[(:]', line)
        if marker and marker[1] in INSTRUCTOR_MARKERS:
            continue
        line = re.sub(r"((?:\w+, )*\w+ and \w+) (are|is) set by hand",
                      lambda m: _by_hand(m[1]), line)
        line = re.sub(r'\s*"({})",?'.format("|".join(map(re.escape, EXCLUDED_DIRS))), "", line)
        line = re.sub(r",\s*\]", "]", line)
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    result = "\n".join(out) + "\n"
    try:
        from grader.util import tomllib

        tomllib.loads(result)
    except ValueError as e:
        raise RuntimeError(f"release: the student pyproject.toml does not parse: {e}") from e
    left = [w for w in _INSTRUCTOR_WORDS if w in result]
    left += [m for m in INSTRUCTOR_MARKERS if re.search(rf'"{m}[(:]|\b{m}\b.*set by hand', result)]
    if left:
        raise RuntimeError(f"release: the student pyproject.toml still names instructor tooling: {', '.join(left)}")
    return result


def _by_hand(names: str) -> str:
    """"gpu, extends, slow and full" -> "gpu is set by hand" (instructor markers dropped)."""
    kept = [n for n in re.split(r", | and ", names) if n not in INSTRUCTOR_MARKERS]
    if not kept:
        return "the others are set by hand"
    listed = kept[0] if len(kept) == 1 else ", ".join(kept[:-1]) + " and " + kept[-1]
    return f"{listed} {'is' if len(kept) == 1 else 'are'} set by hand"


def _check_nothing_excluded(out: Path) -> None:
    """Belt and braces: no instructor-only path exists in the release (``.ci/``,
    ``.github/`` and ``README.md`` are excluded from the copy, then written anew)."""
    replaced = {".ci", ".github", "README.md"}
    leaked = [d for d in (*EXCLUDED_DIRS, *EXCLUDED_FILES) if d not in replaced and (out / d).exists()]
    if leaked:
        raise RuntimeError(f"release: instructor-only paths in the release: {', '.join(leaked)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader release``."""
    p = argparse.ArgumentParser(prog="python -m grader release",
                                description="Build the student repository (no reference, no hidden checks).")
    p.add_argument("out", type=Path, help="the folder to create (outside this repository)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--no-git", action="store_true", help="do not make OUT a git repository")
    args = p.parse_args(list(argv) if argv is not None else None)
    try:
        files = build_release(args.out, force=args.force, git=not args.no_git)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"release: {len(files)} files in {args.out.resolve()}"
          + (" (a git repository, one commit)" if (args.out / ".git").is_dir() else ""))
    print(f"  students: cd {args.out} && ./lab grade   # or: ./lab setup && source .venv/bin/activate && pytest")
    return 0


if __name__ == "__main__":
    sys.exit(main())

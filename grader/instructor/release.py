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

Added instead: a README for students (their two commands: ``pytest`` and
``./lab grade``, which runs the public checks only since the reference and the
hidden checks are absent), ``.ci/run`` and ``.github/workflows/grade.yml`` (the
submission CI: the public grader, its JSON kept as an artifact). The result is a
git repository with one commit when git is available.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from grader.instructor.files import TEMPLATES
from grader.util import REPO

__all__ = ["EXCLUDED_DIRS", "EXCLUDED_FILES", "build_release", "candidate_files", "main", "release_files"]


#: Folders never shipped (relative to the repository root).
EXCLUDED_DIRS = (
    "reference", "grader/hidden", "grader/corpus", "grader/instructor", "selftest", "docs", ".ci", ".github",
)
#: Files never shipped (replaced, for README.md).
EXCLUDED_FILES = ("README.md", "grader/README.md")
#: Never copied whatever git says (local state).
_LOCAL = (".venv", ".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", "grade-out", "build",
          "dist")


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
    added = {
        "README.md": TEMPLATES / "release" / "README.md",
        ".ci/run": TEMPLATES / "ci" / "run",
        ".github/workflows/grade.yml": TEMPLATES / "ci" / "grade.yml",
    }
    for name, src in added.items():
        _copy(src, out / name)
    (out / ".ci" / "run").chmod(0o755)
    missing = [d for d in ("student", "tests") if not (out / d).is_dir()]
    if missing:
        raise RuntimeError(f"release: {', '.join(missing)} missing from the release; is {repo} the lab?")
    _check_nothing_excluded(out)
    if git:
        _git_commit(out)
    return sorted([*written, *added])


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

"""The Gradescope autograder bundle: ``python -m grader gradescope OUT.zip``.

The zip holds, at its root, what Gradescope needs (``setup.sh``, run once as root
to build the image; ``run_autograder``, run for each submission) and what the
grader needs at ``/autograder/source``: ``grader/`` (with the hidden checks),
``reference/``, ``tests/``, ``conftest.py``, ``pyproject.toml``,
``constraints.txt`` and a ``requirements.txt`` made from pyproject's runtime
dependencies. Not shipped: the corpus, the project's own checks, benchmarks,
docs, local state.

``run_autograder`` copies ``/autograder/submission`` to a scratch folder (where
the grader finds the work as uploaded: :func:`grader.staging.submission.find_student`), makes the
reference and hidden checks readable by the grading user only, and runs
``python -m grader SUB --gradescope /autograder/results/results.json`` with the
bundle's grader arguments (default ``--profile grade``; ``--full-feedback N/WINDOW``
adds the limit on probing of :mod:`grader.feedback`, counted from Gradescope's
``submission_metadata.json``, which run_autograder always passes). If the grader cannot
run, it still writes a results.json that says so (score 0), so a student never
sees Gradescope's bare "autograder failed".
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from grader.feedback import parse_limit
from grader.instructor.files import TEMPLATES, render
from grader.instructor.release import candidate_files
from grader.results import fmt
from grader.util import PROFILES, REPO, tomllib

__all__ = ["build_bundle", "bundle_files", "main", "requirements", "settings"]


_SHIPPED_DIRS = ("grader", "reference", "tests")
_SHIPPED_FILES = ("conftest.py", "pyproject.toml", "constraints.txt")
_NOT_SHIPPED = ("grader/corpus", "grader/instructor/templates")
#: Fixed timestamp: the same sources give the same zip, byte for byte.
_EPOCH = (2020, 1, 1, 0, 0, 0)


def requirements(repo: Path = REPO) -> str:
    """pyproject's runtime dependencies, one per line (setup.sh installs them
    with constraints.txt; the instructor-only extras are not needed to grade)."""
    deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    return "".join(f"{d}\n" for d in deps)


def bundle_files(repo: Path = REPO) -> list[str]:
    """Relative paths of the repository files the bundle ships."""
    keep = []
    for name in candidate_files(repo):
        top = name.split("/")[0]
        if name in _SHIPPED_FILES or (top in _SHIPPED_DIRS and not any(
                name == d or name.startswith(d + "/") for d in _NOT_SHIPPED)):
            keep.append(name)
    return keep


def _add(z: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    """Add a regular file with these permission bits and the fixed timestamp."""
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = (0o100000 | mode) << 16  # a regular file with these permission bits
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def build_bundle(out: Path, repo: Path = REPO, grader_args: Sequence[str] = ("--profile", "grade")) -> list[str]:
    """Write the bundle zip to ``out``; return the names it holds."""
    out = out.expanduser().resolve()
    if out.suffix.lower() != ".zip":
        raise ValueError(f"gradescope: OUT must end in .zip, got {out.name}")
    files = bundle_files(repo)
    missing = [d for d in ("reference", "grader/hidden", "tests") if not any(f.startswith(d + "/") for f in files)]
    if missing:
        raise ValueError(f"gradescope: {', '.join(missing)} missing from {repo}: is this the instructor repository?")
    args = " ".join(shlex.quote(a) for a in grader_args)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    names = []
    with zipfile.ZipFile(tmp, "w") as z:
        for name in ("setup.sh", "run_autograder"):
            text = render((TEMPLATES / "gradescope" / name).read_text(), {"grader_args": args})
            _add(z, name, text.encode(), 0o755)
            names.append(name)
        _add(z, "requirements.txt", requirements(repo).encode(), 0o644)
        names.append("requirements.txt")
        for name in files:
            mode = 0o755 if (repo / name).stat().st_mode & 0o111 else 0o644
            _add(z, name, (repo / name).read_bytes(), mode)
            names.append(name)
    tmp.replace(out)
    return names


#: CPUs to give the container: a grade runs one process at a time, so a second
#: CPU only helps batch grading.
CPUS = 1
#: The timeout's margin over a slow correct solution's seconds: x2 beside busy
#: neighbours (measured: 396 s against 200 s at half a CPU, docs/instructors.md)
#: and x2 for a machine slower than the one the budgets were measured on.
TIMEOUT_MARGIN = 4


def settings(profile: str, problems: Sequence[str] | None = None, repo: Path = REPO) -> list[str]:
    """What the instructor types into Gradescope for a bundle grading ``problems``
    (None: all) in ``profile``, one line each, with the figures behind it:
    the points (the problems' total less the GPU-only ones', which Gradescope
    cannot grade), the CPUs, the memory (what a grade may need at once:
    :func:`grader.sandbox.limits.grade_memory` with the rubric's worker promise,
    rounded up to half a GB) and the timeout (the reference's measured cost in
    ``grader/budgets.toml``, made as slow as a correct solution may be, times
    :data:`TIMEOUT_MARGIN`, rounded up to 5 minutes)."""
    from grader import budgets
    from grader import rubric as rubric_mod
    from grader.sandbox.limits import GRADE_BASE_BYTES, Limits, grade_memory

    rub = rubric_mod.load(repo / "grader" / "rubric.toml")
    chosen = [p for p in rub.problems if problems is None or p.name in problems]
    gpu = [p for p in chosen if p.gpu]
    points = sum(p.points for p in chosen) - sum(p.points for p in gpu)
    gpu_text = f": {fmt(sum(p.points for p in chosen))} less the {fmt(sum(p.points for p in gpu))} of " \
               f"{', '.join(p.name for p in gpu)} (needs a GPU: Gradescope has none)" if gpu else ""
    limits = Limits(growth_bytes=int(rub.settings.worker_memory_mib * (1 << 20)))
    need = grade_memory(limits)
    memory_gb = math.ceil(need / (1 << 30) * 2) / 2
    costs = budgets.load(repo / "grader" / "budgets.toml")
    files = [f for p in chosen if not p.gpu for f in p.check_files(repo)]
    measured = [c for f in files if (c := costs.file(profile, f)) is not None]
    seconds, worker = sum(c.seconds for c in measured), sum(c.worker_cpu for c in measured)
    slow = seconds + (rub.settings.slowdown - 1) * worker
    minutes = max(10, 5 * math.ceil(TIMEOUT_MARGIN * slow / 300))
    unmeasured = len(files) - len(measured)
    return [
        "Type these into Gradescope (docs/instructors.md, \"Gradescope\"):",
        f"  points   {fmt(points)}: the problems graded{gpu_text}",
        f"  CPUs     {CPUS}: a grade runs one process at a time",
        f"  memory   {fmt(memory_gb)} GB: a grade may need {need >> 20} MiB at once (its own processes "
        f"{GRADE_BASE_BYTES >> 20} MiB, a worker's promise {limits.growth_bytes >> 20} MiB, the worker's /tmp and "
        f"/dev/shm {(limits.tmpfs_bytes + limits.shm_bytes) >> 20} MiB)",
        f"  timeout  {minutes} minutes: the reference's checks took {seconds:.0f} s, {worker:.0f} CPU s of them its "
        f"own code, in the {profile} profile (measured on {costs.machine or 'an unnamed machine'}: "
        f"grader/budgets.toml{f'; {unmeasured} check files unmeasured' if unmeasured else ''}); a correct solution "
        f"{fmt(rub.settings.slowdown)} times slower takes about {slow:.0f} s; times {TIMEOUT_MARGIN} for busy "
        "neighbours and a slower machine",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader gradescope``."""
    p = argparse.ArgumentParser(prog="python -m grader gradescope",
                                description="Build the Gradescope autograder zip (setup.sh, run_autograder, grader).")
    p.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip")
    p.add_argument("--profile", choices=PROFILES, default="grade",
                   help="hypothesis profile the bundle grades with (default: grade)")
    p.add_argument("--problems", default=None, help="grade only these problems (comma-separated)")
    p.add_argument("--full-feedback", metavar="N/WINDOW", default=None,
                   help="a limit on probing: the hidden checks' details for the first N submissions of a student in "
                        "any WINDOW (e.g. 3/24h), points only after that (default: details for every submission)")
    args = p.parse_args(list(argv) if argv is not None else None)
    grader_args = ["--profile", args.profile] + (["--problems", args.problems] if args.problems else [])
    if args.full_feedback:
        try:
            grader_args += ["--full-feedback", parse_limit(args.full_feedback).text]
        except ValueError as e:
            p.error(str(e))
    try:
        names = build_bundle(args.out, grader_args=grader_args)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"gradescope: {args.out} ({len(names)} files); upload it as the assignment's autograder "
          "(Configure Autograder > Zip file upload), base image Ubuntu")
    problems = [p for p in args.problems.split(",") if p] if args.problems else None
    print("\n".join(settings(args.profile, problems)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

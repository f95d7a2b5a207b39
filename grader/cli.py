"""``python -m grader``: grade one submission and print its table.

    python -m grader [SUBMISSION] [--json FILE] [--gradescope FILE] [--junit FILE] [--markdown FILE]
                     [--profile dev|ci|grade] [--problems a,b] [--public-only]
                     [--sandbox auto|bwrap|uid|rlimits] [--call-cpu S] [--cpu-budget S]
                     [--memory-limit GIB] [--reveal-hidden] [--seed N] [--rubric FILE] [--quiet]
                     [--verbose] [--no-progress] [--cpu-stand-in]
                     [--full-feedback N/WINDOW --submission-metadata FILE]

SUBMISSION is a folder or zip holding ``student/`` (default: this repository's
``student/``). The exit code is 0 whenever grading completed, whatever the
score (a submission without ``student/`` gets an error result, not a crash);
2 for bad arguments (a SUBMISSION path that does not exist among them); 1 when
the grader itself could not run.

The table goes to stdout: what a student needs (points, first failures, where
to look), no path, sandbox or machine figures. While it grades, a terminal
shows each problem's progress on stderr, cleared at the end
(:mod:`grader.report.progress`); ``--verbose`` keeps it (plain lines where
stderr is no terminal), adds the operator's header to the table (the
submission's path, the sandbox, the profile) and the notes about this machine
(e.g. how much slower it is than the one the budgets were measured on) to
stderr. Warnings about this machine that may change a result (an unsupported
torch, too little memory) go to stderr always. ``--help`` imports nothing heavy (no torch, not the
engine): the pipeline is imported after the arguments are parsed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grader.util import PROFILES

#: The instructor workflows, ``python -m grader NAME ...``, and what each does;
#: ``main(argv)`` of grader/instructor/NAME.py runs it (grader/__main__.py
#: dispatches; the student release has no such folder).
WORKFLOWS = {
    "batch": "grade a whole class: gradebook, results, class summary",
    "similarity": "the class similarity report (copied work)",
    "release": "build the student repository (no reference, no hidden checks)",
    "gradescope": "build the Gradescope autograder bundle",
    "calibrate": "measure the reference's cost for the budgets (grader/budgets.toml)",
    "mutants": "mutation testing: what the public tests catch",
    "check": "every place a change to the assignment still needs (docs/authoring.md)",
}

#: What ``--help`` says (argparse reflows it; the epilog keeps its lines).
DESCRIPTION = "Grade one submission (a folder or zip holding student/) and print a score table per problem."
EPILOG = "\n".join([
    "Exit code: 0 when grading completed, whatever the score; 2 for bad arguments (a SUBMISSION that does not",
    "exist among them); 1 when the grader could not run. The table goes to stdout; on a terminal each problem's",
    "progress is shown on stderr while it grades (--verbose: kept, with the operator's notes).",
    "",
    "Instructor commands (python -m grader NAME --help for each; absent from the student release):",
    *(f"  {name:<11} {what}" for name, what in WORKFLOWS.items()),
])


def parser() -> argparse.ArgumentParser:
    """The command line's parser (building it imports nothing of the pipeline)."""
    ap = argparse.ArgumentParser(prog="python -m grader", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("submission", nargs="?", default=None,
                    help="a folder or zip holding student/ (default: this repository's student/)")
    ap.add_argument("--json", metavar="FILE", help="write the full results as JSON (see grader/report/render.py)")
    ap.add_argument("--gradescope", metavar="FILE", help="write Gradescope's results.json")
    ap.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    ap.add_argument("--markdown", metavar="FILE",
                    help="write a Markdown summary: the score and one row per problem (a CI job's summary)")
    ap.add_argument("--profile", "--hypothesis-profile", dest="profile", choices=PROFILES, metavar="NAME",
                    help=f"hypothesis profile of the checks: {', '.join(PROFILES)} (default: the rubric's, grade); "
                         "--hypothesis-profile is the same option under pytest's name")
    ap.add_argument("--problems", help="comma-separated problems to grade (default: all)")
    ap.add_argument("--public-only", action="store_true", help="run the public tests only")
    ap.add_argument("--sandbox", choices=("auto", "bwrap", "uid", "rlimits"), default="auto",
                    help="auto: $LAB_ISOLATION if set, else bubblewrap where usable, else (as root, on a locked "
                         "checkout) an unprivileged uid; rlimits: no filesystem isolation (trusted submissions)")
    ap.add_argument("--call-cpu", type=float, metavar="S",
                    help="CPU seconds per call into the submission (default: the rubric's, scaled to this machine)")
    ap.add_argument("--cpu-budget", type=float, metavar="S",
                    help="CPU seconds per problem (default: a multiple of the reference's, scaled to this machine)")
    ap.add_argument("--memory-limit", type=float, metavar="GIB", help="address space per worker (default: rubric)")
    ap.add_argument("--reveal-hidden", action="store_true", default=None,
                    help="show hidden checks' failure details (instructors)")
    ap.add_argument("--seed", type=int, metavar="N",
                    help="seed of the hidden checks' inputs (default: a fresh one, recorded in --json; "
                         "pass a recorded one to replay a grade exactly)")
    ap.add_argument("--rubric", type=Path, metavar="FILE", help="rubric TOML file (default: grader/rubric.toml)")
    ap.add_argument("--quiet", "-q", action="store_true", help="print the table only, without details")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="for whoever runs the grader: the submission's path, the sandbox and the profile above "
                         "the table; each problem's start and finish, and the notes about this machine, on stderr")
    ap.add_argument("--no-progress", action="store_true",
                    help="show no progress on stderr")
    ap.add_argument("--full-feedback", metavar="N/WINDOW",
                    help="a limit on probing the hidden checks: their details (function, property, kind of input) "
                         "for the first N submissions in any WINDOW (3/24h), points only after that; counted from "
                         "--submission-metadata (grader/feedback.py). Default: no limit")
    ap.add_argument("--submission-metadata", type=Path, metavar="FILE",
                    help="Gradescope's submission_metadata.json, for --full-feedback (missing: no limit)")
    ap.add_argument("--cpu-stand-in", action="store_true",
                    help="without a CUDA device, grade the GPU problems (mfu) on the CPU standing in for one, with "
                         "the small workload of the rubric's [mfu.stand_in]: a rehearsal of the GPU pipeline "
                         "(benchmarks/gpu.sh --smoke), whose verdicts are not a GPU's")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Grade one submission from the command line; the exit code is as the module docstring says."""
    started = time.monotonic()  # the reports' execution_time counts from here: torch's import included
    args = parser().parse_args(argv)
    if args.submission is not None and not Path(args.submission).exists():
        # A mistyped path is the caller's argument, not a submission to score 0.
        print(f"grader: {args.submission} does not exist (give a folder or zip holding student/)", file=sys.stderr)
        return 2
    from grader.feedback import decide, parse_limit

    try:  # decided before any code of the submission runs
        feedback = decide(parse_limit(args.full_feedback) if args.full_feedback else None, args.submission_metadata)
    except ValueError as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
    if feedback.operator:
        print(f"grader: note: {feedback.operator}", file=sys.stderr)
    # The pipeline (and torch, which some of it imports) only once the arguments are good.
    from grader import engine
    from grader.report import render as report
    from grader.report.progress import GradeProgress
    from grader.report.table import print_table
    from grader.results import GradeResult
    from grader.rubric import DEFAULT_RUBRIC, RubricError

    terminal = bool(getattr(sys.stderr, "isatty", lambda: False)())
    progress = None if args.no_progress or not (args.verbose or terminal) else \
        GradeProgress(sys.stderr, transient=not args.verbose)

    def rewrite(result: GradeResult) -> None:  # as it grades: a grade stopped from outside keeps its points
        report.write_reports(result, json_path=args.json, gradescope=args.gradescope, junit=args.junit,
                             markdown=args.markdown, reveal=result.reveal, final=False)

    options = engine.Options(
        profile=args.profile, problems=[p for p in args.problems.split(",") if p] if args.problems else None,
        public_only=args.public_only, sandbox=args.sandbox, call_cpu=args.call_cpu,
        cpu_budget=args.cpu_budget, memory_limit_gib=args.memory_limit, reveal_hidden=args.reveal_hidden,
        rubric=args.rubric or DEFAULT_RUBRIC, seed=args.seed, progress=progress,
        on_update=rewrite if args.json or args.gradescope or args.junit or args.markdown else None,
        cpu_stand_in=args.cpu_stand_in, started=started, feedback=feedback,
    )
    try:
        result = engine.grade(args.submission, options)
    except (ValueError, RubricError) as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"grader: could not run: {e}", file=sys.stderr)
        return 1
    finally:
        if progress is not None:
            progress.close()
    # Each report stands alone; one that could not be written is the grader's
    # fault, said on stderr (and in the table), never a crash or a student's result.
    for failure in report.write_reports(result, json_path=args.json, gradescope=args.gradescope, junit=args.junit,
                                        markdown=args.markdown,
                                        reveal=result.reveal):
        print(f"grader: {failure}", file=sys.stderr)
    # About this machine: for whoever runs the grader, never in the reports.
    for warning in result.operator_warnings:
        print(f"grader: warning: {warning}", file=sys.stderr)
    for note in result.operator_notes if args.verbose else ():
        print(f"grader: note: {note}", file=sys.stderr)
    print_table(result, details=not args.quiet, verbose=args.verbose)
    return 0

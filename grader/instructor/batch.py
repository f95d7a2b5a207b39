"""Batch grading of a class: ``python -m grader batch SUBMISSIONS_DIR --jobs N --out DIR``.

Contract (instructors rely on each point):

* A submission is a folder or a ``.zip`` directly inside ``SUBMISSIONS_DIR`` (a
  Gradescope export: one folder per submission plus ``submission_metadata.yml``;
  a GitHub Classroom export: one folder per student repo). ``SUBMISSIONS_DIR`` may
  itself be the export's ``.zip``. (:mod:`.discovery`, :mod:`.gradescope_export`,
  :mod:`.precheck`.)
* Each submission is graded by its own ``python -m grader SUB --json FILE``
  subprocess (so a grader crash on one never takes down the batch), at most
  ``--jobs`` at a time (capped by the machine's worker slots: min(cores, memory
  slots)); each grades its problems one after another, one trusted process
  per phase, which costs least CPU: the batch's parallelism is across
  submissions. Each runs under a wall-clock ``--timeout`` after which its
  whole process group is killed; what it finished before stays in its record.
  (:mod:`.grading`, :mod:`.supervisor`.)
* Every submission gets ``DIR/results/<id>.json`` (written atomically) and one row of
  ``DIR/gradebook.csv`` (rewritten atomically after every submission), whatever
  happened to it: graded, timeout, grader error, bad zip, no ``student/``; the row
  says why. (:mod:`.records`, :mod:`.gradebook`, :mod:`.files`.)
* A rerun resumes: a submission whose results file exists and is complete is not
  graded again (``--force`` regrades), unless its content changed since (the
  record's ``content`` hash: a resubmission under the same name is regraded) or
  what happened to it was no verdict on it (a batch timeout, a grader error,
  a problem the grader reported as not graded: the grader regraded each such
  problem once, alone, already) and it has been graded fewer than
  :data:`MAX_ATTEMPTS` times (the record's ``attempts``): regrades are
  bounded. Which options the batch chose for the machine (a worker memory
  limit fitted to the free memory) never make a record one "graded with
  other options". Killing the batch (even SIGKILL) loses at most the
  submissions in flight, never a row already written; the graders it had
  started die with it.
* ``DIR/summary.md`` and ``DIR/summary.png``: per-problem pass rates and the score
  distribution of the class (also printed as a table), and where an MFU was
  graded its leaderboard: verified runs only, under pseudonyms unless
  ``--leaderboard-ids real``. (:mod:`.gradebook`, :mod:`.leaderboard`.)
* ``--similarity``: also ``DIR/similarity/`` (pairs of submissions ranked by the code
  only they share, per module; :mod:`grader.instructor.similarity`), from the same
  staged copies.
* Classes larger than one machine: ``--shard i/N`` grades a deterministic shard
  (0-based ``i``), ``--slurm N`` writes a Slurm array job grading shard ``i`` per
  array task (:mod:`.slurm`), and ``--merge DIR... --out DIR`` builds one
  gradebook from the shards.
* The GPU problem graded elsewhere: a batch of ``--problems mfu`` on a GPU
  machine, merged with the CPU batch (``--merge CPU_OUT GPU_OUT --out DIR``),
  gives each submission the GPU's result for it and the CPU's for the rest.
  ``--cpu-stand-in`` rehearses such a batch without a GPU (the CPU stands
  in; the gradebook's ``stand_in`` column names each problem so graded).

``LAB_GRADER_CMD`` (environment; a shell-quoted command) replaces
``python -m grader`` for every submission; the project's tests use it to
substitute a fake grader.

This module is the command (options, resume, the pool of graders, merging);
it re-exports the parts' public names, so ``from grader.instructor import
batch`` gives the whole batch API.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from grader.instructor.discovery import Submission, discover, parse_shard, shard_index, unpack_export
from grader.instructor.files import write_json_atomic
from grader.instructor.gradebook import gradebook_csv, write_outputs
from grader.instructor.grading import grade_submission
from grader.instructor.leaderboard import ID_MODES
from grader.instructor.records import (
    NOT_GRADED_STATUSES,
    combine_records,
    content_hash,
    error_record,
    load_record,
    load_records,
)
from grader.instructor.slurm import write_slurm
from grader.report.progress import BatchProgress
from grader.sandbox.limits import plan_jobs
from grader.util import PROFILES, REPO, write_atomic

__all__ = ["MAX_ATTEMPTS", "main", "share_budget"]

#: How many times a batch (its reruns included) grades one content of a
#: submission that keeps ending with no verdict on it (a grader error, a timeout).
MAX_ATTEMPTS = 3


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One batch per output folder at a time (the lock dies with its process)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".batch.lock", "w") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # Windows: no lock, no guarantee
            pass
        except BlockingIOError:
            raise SystemExit(f"batch: another batch is writing to {out}") from None
        yield


def _grader_args(args: argparse.Namespace) -> list[str]:
    """The options every submission's grader gets from the batch's own options
    (what the batch sets for the machine itself is :func:`_machine_args`)."""
    extra = []
    if args.memory_limit:
        extra += ["--memory-limit", f"{args.memory_limit:g}"]
    if args.profile:
        extra += ["--profile", args.profile]
    if args.problems:
        extra += ["--problems", args.problems]
    if args.public_only:
        extra.append("--public-only")
    if args.cpu_stand_in:
        extra.append("--cpu-stand-in")
    return extra


def _machine_args(args: argparse.Namespace) -> list[str]:
    """The options the batch sets for this machine (a worker memory limit fitted
    to its free memory): passed to each grader, never compared on resume."""
    worker = getattr(args, "worker_memory", None)
    if worker and not args.memory_limit:
        return ["--memory-limit", f"{worker / (1 << 30):.3f}"]
    return []


def share_budget(jobs: int) -> int:
    """Submissions graded at once: ``jobs``, never more than the machine's
    worker slots, min(cores, memory slots) (each grader runs one worker at a time)."""
    from grader.rubric import load
    from grader.sandbox.limits import worker_slots
    from grader.util import cores

    slots = max(1, min(cores(), worker_slots(int(load().settings.memory_limit_gib * (1 << 30)))))
    if jobs > slots:
        print(f"batch: --jobs {jobs} exceeds this machine's {slots} worker slots (cores, memory); "
              f"grading {slots} at a time", file=sys.stderr, flush=True)
        jobs = slots
    return jobs


def _rubric_memory_gib() -> float:
    from grader.rubric import load

    try:
        return float(load().settings.memory_limit_gib)
    except Exception:  # the rubric's own checks report a broken rubric; this only sizes --jobs
        return 8.0


def _no_verdict(rec: dict[str, Any]) -> bool:
    """Whether a record holds no verdict on its submission: the batch's wall-clock
    backstop killed its grader, the grader failed, or a problem of it was not
    graded (a grader error, or not reached)."""
    if rec.get("status") in ("timeout", "grader error"):
        return True
    result = rec.get("result") or {}
    return any(isinstance(p, dict) and p.get("status") in NOT_GRADED_STATUSES for p in result.get("problems", []))


def _resume(subs: list[Submission], results: Path, grader_args: list[str],
            force: bool) -> tuple[dict[str, dict[str, Any]], list[Submission], dict[str, int]]:
    """(the records kept from an earlier run, by id; the submissions still to
    grade; the attempts each of those has had on its content already)."""
    records: dict[str, dict[str, Any]] = {}
    todo: list[Submission] = []
    attempts: dict[str, int] = {}
    changed = resubmitted = given_up = 0
    for s in subs:
        rec = None if force else load_record(results / f"{s.id}.json", s.id)
        if rec is not None and Path(str(rec.get("source", ""))).name != s.path.name:
            rec = None  # another entry had this id in an earlier run: its grade is not this one's
        if rec is not None and rec.get("content") != content_hash(s.path):
            rec = None  # resubmitted (or changed) since it was graded: its grade is not this content's
            resubmitted += 1
        if rec is not None and _no_verdict(rec):
            if int(rec.get("attempts", 1)) < MAX_ATTEMPTS:  # the machine's or the grader's trouble: again
                attempts[s.id] = int(rec.get("attempts", 1))
                rec = None
            else:
                given_up += 1
        if rec is None:
            todo.append(s)
        else:
            records[s.id] = rec
            changed += rec.get("grader_args") != grader_args
    if records or resubmitted:
        print(f"batch: resuming: {len(records)} of {len(subs)} submissions already have results"
              + (f" ({changed} graded with other options; --force regrades)" if changed else "")
              + (f"; {resubmitted} changed since graded, regraded" if resubmitted else "")
              + (f"; {given_up} left with no verdict after {MAX_ATTEMPTS} attempts (--force regrades)"
                 if given_up else ""), flush=True)
    return records, todo, attempts


def run_batch(args: argparse.Namespace) -> int:
    """Grade the class in ``args.submissions`` into ``args.out`` (see the module's contract)."""
    out: Path = args.out.resolve()
    root: Path = args.submissions.resolve()
    if root.is_file() and zipfile.is_zipfile(root):
        root = unpack_export(root, out / "export")
    if not root.is_dir():
        raise SystemExit(f"batch: {args.submissions} is not a folder (nor an export zip)")
    subs = discover(root, exclude=[out])
    if args.shard:
        i, n = args.shard
        subs = [s for s in subs if shard_index(s.id, n) == i]
    # All the workers that can run at once (one per grader, beside its fork
    # server) must fit the free memory: cap the per-worker limit, then --jobs.
    configured = int((args.memory_limit or _rubric_memory_gib()) * (1 << 30))
    args.jobs, args.worker_memory, message = plan_jobs(args.jobs, configured)
    if message:
        print(f"batch: {message}", flush=True)
    grader_args = _grader_args(args)
    machine_args = _machine_args(args)
    with _locked(out):
        results = out / "results"
        results.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out / "tmp", ignore_errors=True)  # leftovers of a killed run
        records, todo, attempts = _resume(subs, results, grader_args, args.force)
        lock = threading.Lock()
        progress = BatchProgress(len(subs), len(records))
        jobs = share_budget(max(1, args.jobs))
        try:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(grade_submission, s, out, grader_args, args.timeout, machine_args,
                                       attempts.get(s.id, 0) + 1): s for s in todo}
                for fut in as_completed(futures):
                    s = futures[fut]
                    try:
                        rec = fut.result()
                    except Exception as e:  # a bug here must cost one row, not the batch
                        rec = error_record(s, grader_args, e)
                    write_json_atomic(results / f"{s.id}.json", rec)
                    with lock:
                        records[s.id] = rec
                        write_atomic(out / "gradebook.csv", gradebook_csv(list(records.values())))
                    progress.advance(rec)
        finally:
            progress.close()
        shutil.rmtree(out / "tmp", ignore_errors=True)
        ordered = [records[s.id] for s in subs]
        write_outputs(out, ordered, quiet=args.quiet, leaderboard_ids=args.leaderboard_ids)
    print(f"batch: {len(ordered)} rows in {out / 'gradebook.csv'}; summary in {out / 'summary.md'}")
    if args.similarity:
        from grader.instructor import similarity

        similarity.report(root, out / "similarity", exclude=[out], quiet=args.quiet)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """One gradebook from several output folders: the shards of one class, or a
    CPU batch and a GPU batch of the GPU problem alone, each possibly in shards
    (a submission graded in several combines, problem by problem:
    :func:`.records.combine_records`). A submission whose gradings do not
    combine (another content; a problem graded in two with different results)
    is an error naming it, the folders and the problem, never a silent pick."""
    out: Path = args.out.resolve()
    merged: dict[str, dict[str, Any]] = {}
    origin: dict[str, list[Path]] = {}
    for d in args.merge:
        if not (d / "results").is_dir():
            raise SystemExit(f"batch --merge: {d} has no results/ folder")
        for sub_id, rec in load_records(d).items():
            if sub_id in merged and merged[sub_id] != rec:
                try:
                    rec = combine_records(merged[sub_id], rec)
                except ValueError as e:
                    raise SystemExit(f"batch --merge: {sub_id} in {', '.join(map(str, origin[sub_id]))} and {d}: "
                                     f"{e}; the gradings do not combine") from None
            merged[sub_id] = rec
            origin.setdefault(sub_id, []).append(d)
    with _locked(out):
        for sub_id, rec in merged.items():
            write_json_atomic(out / "results" / f"{sub_id}.json", rec)
        records = [merged[k] for k in sorted(merged)]
        write_outputs(out, records, quiet=args.quiet, leaderboard_ids=args.leaderboard_ids)
    print(f"batch --merge: {len(records)} rows from {len(args.merge)} folders in {out / 'gradebook.csv'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m grader batch``."""
    p = argparse.ArgumentParser(
        prog="python -m grader batch",
        description="Grade every submission in a folder (Gradescope or GitHub Classroom export, or any folder "
                    "of submission folders and zips); resumable.",
    )
    p.add_argument("submissions", nargs="?", type=Path, help="folder of submissions (or an export zip)")
    p.add_argument("--out", type=Path, default=Path("grade-out"), help="output folder (default: grade-out)")
    p.add_argument("--jobs", "-j", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                   help="submissions graded in parallel (default: half the CPUs)")
    p.add_argument("--timeout", type=float, default=7200.0,
                   help="wall-clock seconds per submission before its grader is killed, a backstop (default: "
                        "7200; the grader bounds every check by CPU time itself); a rerun regrades it")
    p.add_argument("--profile", choices=PROFILES, default=None, help="passed to the grader")
    p.add_argument("--problems", default=None, help="comma-separated problems, passed to the grader")
    p.add_argument("--public-only", action="store_true", help="passed to the grader")
    p.add_argument("--cpu-stand-in", action="store_true",
                   help="passed to the grader: without CUDA, the CPU stands in for the GPU in the MFU problem (a "
                        "rehearsal of a GPU batch; the gradebook's stand_in column names it, never a GPU's grade)")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                   help="address space per worker (default: the rubric's); lowered, and --jobs with it, "
                        "so that every worker that can run at once fits the free memory")
    p.add_argument("--force", action="store_true", help="regrade submissions that already have results")
    p.add_argument("--similarity", action="store_true",
                   help="also write the class similarity report (OUT/similarity; see "
                        "grader/instructor/similarity/)")
    p.add_argument("--quiet", action="store_true", help="no summary table on the console")
    p.add_argument("--leaderboard-ids", choices=ID_MODES, default="pseudonym",
                   help="how the summary's MFU leaderboard names submissions: pseudonym (default; a keyed hash "
                        "of the id, the key in OUT/leaderboard.key) or real (the id)")
    p.add_argument("--shard", type=parse_shard, default=None, metavar="i/N",
                   help="grade only shard i (0-based) of N; deterministic (a hash of the submission id)")
    p.add_argument("--slurm", type=int, default=None, metavar="N",
                   help="write a Slurm array job of N shards (OUT/grade.sbatch, OUT/merge.sbatch) and exit")
    p.add_argument("--slurm-time", default="04:00:00", help="time limit of each array task (default: 04:00:00)")
    p.add_argument("--slurm-partition", default=None, metavar="NAME",
                   help="the partition of the array tasks (#SBATCH --partition), e.g. a GPU partition")
    p.add_argument("--slurm-gres", default=None, metavar="SPEC",
                   help="generic resources per array task (#SBATCH --gres), e.g. gpu:1 for an MFU batch "
                        "(--problems mfu) on GPU nodes")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="DIR",
                   help="merge the results of output folders into --out and exit: shards of one batch, or a CPU "
                        "batch and an MFU batch (--problems mfu) of the same class, combined per problem")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader batch``; returns the exit status (argparse
    exits with 2 on bad options, SystemExit carries a message on a refused run)."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.merge:
        if args.submissions is not None:
            parser.error("--merge takes shard folders, not a submissions folder")
        return run_merge(args)
    if args.submissions is None:
        parser.error("a submissions folder is required (or --merge DIR...)")
    if not args.submissions.exists():
        parser.error(f"{args.submissions} does not exist")
    if args.slurm is not None:
        if args.slurm < 1:
            raise SystemExit("batch: --slurm N needs N >= 1")
        try:
            write_slurm(args.out.resolve(), args.submissions.resolve(), args.slurm, jobs=args.jobs,
                        time_limit=args.slurm_time, repo=REPO,
                        grader_args=[*_grader_args(args), "--timeout", f"{args.timeout:g}"],
                        partition=args.slurm_partition, gres=args.slurm_gres)
        except ValueError as e:
            parser.error(str(e))
        return 0
    return run_batch(args)


if __name__ == "__main__":
    sys.exit(main())

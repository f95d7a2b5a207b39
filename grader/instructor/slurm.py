"""Classes larger than one machine: a Slurm array job of shards, then one merge job.

Contract: :func:`write_slurm` writes ``OUT/grade.sbatch`` (array task ``i``
runs ``python -m grader batch SUBMISSIONS --shard i/N`` into
``OUT/shards/shard-i``) and ``OUT/merge.sbatch`` (``python -m grader batch
--merge`` of every shard into ``OUT``), both executable, from the templates in
``templates/slurm``; every value that reaches a shell is shell-quoted.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from grader.instructor.files import TEMPLATES, render
from grader.util import write_atomic

__all__ = ["write_slurm"]


def write_slurm(out: Path, submissions: Path, shards: int, *, jobs: int, time_limit: str, repo: Path,
                grader_args: list[str]) -> None:
    """Write the two scripts into ``out`` (and ``out/logs``) and print how to submit them.

    ``jobs``: each task's ``--jobs``; ``time_limit``: each task's ``#SBATCH --time``;
    ``grader_args``: the batch options each task passes on (``--timeout`` included)."""
    values = {
        "shards": str(shards), "last": str(shards - 1), "jobs": str(max(1, jobs)),
        "repo": shlex.quote(str(repo)), "python": shlex.quote(sys.executable),
        "submissions": shlex.quote(str(submissions)), "out": shlex.quote(str(out)),
        "out_raw": str(out),  # #SBATCH lines are not parsed by a shell: no quotes there
        "time": time_limit, "grader_args": " ".join(shlex.quote(a) for a in grader_args),
        "shard_dirs": " ".join(shlex.quote(str(out / "shards" / f"shard-{i}")) for i in range(shards)),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    for name in ("grade.sbatch", "merge.sbatch"):
        write_atomic(out / name, render((TEMPLATES / "slurm" / name).read_text(), values))
        (out / name).chmod(0o755)
    print(f"batch: wrote {out / 'grade.sbatch'} ({shards} array tasks) and {out / 'merge.sbatch'}; submit with\n"
          f"  jid=$(sbatch --parsable {shlex.quote(str(out / 'grade.sbatch'))})\n"
          f"  sbatch --dependency=afterany:$jid {shlex.quote(str(out / 'merge.sbatch'))}")

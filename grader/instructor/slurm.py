"""Classes larger than one machine: a Slurm array job of shards, then one merge job.

Contract: :func:`write_slurm` writes ``OUT/grade.sbatch`` (array task ``i``
runs ``python -m grader batch SUBMISSIONS --shard i/N`` into
``OUT/shards/shard-i``; with a partition and generic resources such as a GPU
per task where asked) and ``OUT/merge.sbatch`` (``python -m grader batch
--merge`` of every shard into ``OUT``), both executable, from the templates in
``templates/slurm``; every value that reaches a shell is shell-quoted.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from grader.instructor.files import TEMPLATES, render
from grader.util import write_atomic

__all__ = ["write_slurm"]


#: What an ``#SBATCH`` value may hold: Slurm's names, counts, lists and
#: ``gpu:type:N`` specs. Never a newline: the next line would be a directive or a command.
_SLURM_VALUE = re.compile(r"[A-Za-z0-9_.:,+=@%-]+")


def _directives(partition: str | None, gres: str | None) -> str:
    """The ``#SBATCH`` lines asking for a partition and generic resources (a GPU
    per array task: ``gres="gpu:1"``), each on its own line; "" for neither.
    ValueError names an option whose value Slurm could not read as one word."""
    lines = []
    for option, value in (("partition", partition), ("gres", gres)):
        if value is None:
            continue
        if not _SLURM_VALUE.fullmatch(value):
            raise ValueError(f"--slurm-{option} {value!r}: one word of letters, digits and _.:,+=@%- (e.g. gpu:1)")
        lines.append(f"#SBATCH --{option}={value}\n")
    return "".join(lines)


def write_slurm(out: Path, submissions: Path, shards: int, *, jobs: int, time_limit: str, repo: Path,
                grader_args: list[str], partition: str | None = None, gres: str | None = None) -> None:
    """Write the two scripts into ``out`` (and ``out/logs``) and print how to submit them.

    ``jobs``: each task's ``--jobs``; ``time_limit``: each task's ``#SBATCH --time``;
    ``grader_args``: the batch options each task passes on (``--timeout`` included);
    ``partition`` and ``gres``: each array task's ``#SBATCH --partition`` and
    ``--gres`` (``gpu:1``: one GPU per task, for an MFU batch on a GPU partition)."""
    if not _SLURM_VALUE.fullmatch(time_limit):
        raise ValueError(f"--slurm-time {time_limit!r}: a Slurm time such as 04:00:00 or 1-00:00:00")
    values = {
        "resources": _directives(partition, gres),
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

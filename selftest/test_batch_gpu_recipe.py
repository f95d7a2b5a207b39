"""The GPU class grade of docs/instructors.md ("The MFU points"): a CPU batch
and an MFU batch of the same class, merged into one gradebook.

The recipe itself runs as the document writes it (half a minute on a quiet
2-core machine, two under load; in CI: it is the one test of a real MFU
record's merge): its bash block, from the repository, with a fake
``sbatch`` on ``PATH`` that runs each array task by hand
(``SLURM_ARRAY_TASK_ID``), as Slurm would, and ``/shared/`` a temporary
folder; a class of one (the reference). What the test changes in the block,
so that it needs no GPU: the CPU half grades ``precision,mfu`` (mfu is "not
run on a GPU" there, as on every CPU node), the GPU half gets
``--cpu-stand-in`` (the CPU stands in for the device, so the merge takes a
real MFU record). The merged gradebook must hold the GPU half's MFU points,
the CPU half's precision points, their sum, no GPU points not run, and the
stand-in named; the GPU half's script must ask for the partition and the GPU,
the CPU half's for neither.

The merge rule is checked in seconds on records whose results the grader's
own scorer and renderer build (a stand-in MFU, a GPU's, one not run) from
checks' outcomes, with nothing run."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grader import scoring
from grader.instructor import batch, files
from grader.instructor.records import load_record, stand_in
from grader.report import render
from grader.results import GRADER_ERROR, NOT_GRADED, GradeResult
from grader.rubric import load
from selftest.batching import read_gradebook
from selftest.scored import run_of

REPO = Path(__file__).resolve().parent.parent
HEADING = "## The MFU points: a GPU batch merged into the gradebook"

#: A fake ``sbatch``: runs the script now (each index of its ``--array`` with
#: ``SLURM_ARRAY_TASK_ID``), logs how it was called, prints a job id.
FAKE_SBATCH = r'''
import os, re, subprocess, sys
args = sys.argv[1:]
script = args[-1]
text = open(script).read()
array = re.search(r"^#SBATCH --array=(\d+)-(\d+)$", text, re.M)
tasks = range(int(array[1]), int(array[2]) + 1) if array else [None]
with open(os.environ["FAKE_SBATCH_LOG"], "a") as log:
    log.write(" ".join(args) + f" tasks={len(tasks)}\n")
for i in tasks:
    env = {**os.environ, "SLURM_CPUS_PER_TASK": "1"}
    if i is not None:
        env["SLURM_ARRAY_TASK_ID"] = str(i)
    done = subprocess.run(["bash", script], env=env, stdout=sys.stderr)
    if done.returncode:
        sys.exit(f"sbatch (fake): {script} task {i} exited {done.returncode}")
print(sum(1 for _ in open(os.environ["FAKE_SBATCH_LOG"])) if "--parsable" in args else "Submitted batch job 1")
'''


def recipe() -> str:
    """The first bash block of the recipe's section of docs/instructors.md."""
    text = (REPO / "docs" / "instructors.md").read_text()
    assert HEADING in text, f"docs/instructors.md has no section {HEADING!r}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(HEADING):], re.S)
    assert block, "the recipe's section has no bash block"
    return block[1]


def _narrowed(block: str) -> str:
    """The block with the test's changes (see the module docstring), each made exactly once."""
    lines = block.splitlines()
    halves = {"--out /shared/grade-cpu": " --problems precision,mfu --profile dev",
              "--out /shared/grade-gpu": " --profile dev --cpu-stand-in"}
    for out, extra in halves.items():
        found = [i for i, ln in enumerate(lines) if "grader batch /shared/submissions" in ln and out in ln]
        assert len(found) == 1, (out, block)
        lines[found[0]] += extra
    return "\n".join(lines) + "\n"


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_recipe_names_both_halves_and_the_merge():
    block = recipe()
    gpu = next(ln for ln in block.splitlines() if "--out /shared/grade-gpu" in ln)
    assert "--problems mfu" in gpu and "--slurm-partition gpu" in gpu and "--slurm-gres gpu:1" in gpu, gpu
    assert "--merge /shared/grade-cpu /shared/grade-gpu --out /shared/grade" in block, block
    assert block.count("sbatch --parsable") == 2 and block.count("--dependency=afterany") == 2, block


@pytest.mark.timeout(600)
def test_the_gpu_recipe_merges_a_stand_in_mfu_into_the_cpu_gradebook(tmp_path):
    shared = tmp_path / "shared"
    shutil.copytree(REPO / "reference", shared / "submissions" / "ref" / "student",
                    ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "sbatch", f"#!{sys.executable}\n{FAKE_SBATCH}")
    _executable(bin_dir / "python", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    log = tmp_path / "sbatch.log"
    script = _narrowed(recipe()).replace("/shared/", f"{shared}/")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_SBATCH_LOG": str(log)}
    start = time.monotonic()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=580)
    print(f"the recipe ran in {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    def head(half: str) -> list[str]:  # the #SBATCH lines, before the script's first command
        lines = (shared / half / "grade.sbatch").read_text().splitlines()
        return [ln for ln in lines[:lines.index("set -euo pipefail")] if ln.startswith("#SBATCH")]
    assert {"#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1"} <= set(head("grade-gpu")), head("grade-gpu")
    assert not [ln for ln in head("grade-cpu") if ln.startswith(("#SBATCH --partition", "#SBATCH --gres"))]
    calls = log.read_text().splitlines()
    assert [c.split()[-2].rsplit("/", 2)[-2:] for c in calls] == [
        ["grade-cpu", "grade.sbatch"], ["grade-gpu", "grade.sbatch"],
        ["grade-cpu", "merge.sbatch"], ["grade-gpu", "merge.sbatch"]], calls

    mfu, precision = load().problem("mfu").points, load().problem("precision").points
    cpu = read_gradebook(shared / "grade-cpu")["ref"]
    assert (cpu["mfu"], float(cpu["gpu_points_not_run"]), cpu["stand_in"]) == ("not run", mfu, ""), cpu
    gpu = read_gradebook(shared / "grade-gpu")["ref"]
    assert (float(gpu["mfu"]), gpu["stand_in"]) == (mfu, "mfu"), gpu
    row = read_gradebook(shared / "grade")["ref"]
    assert row["status"] == "graded", row
    assert (float(row["precision"]), float(row["mfu"])) == (precision, mfu), row
    assert float(row["score"]) == float(row["max_score"]) == precision + mfu, row
    assert (float(row["gpu_points_not_run"]), row["stand_in"]) == (0.0, "mfu"), row
    rec = load_record(shared / "grade" / "results" / "ref.json", "ref")
    assert rec is not None, "the merged results file is not a complete record"
    by_name = {p["name"]: p for p in rec["result"]["problems"]}
    assert stand_in(by_name["mfu"]) and not stand_in(by_name["precision"]), by_name
    assert rec["result"]["score"] == rec["score"] == precision + mfu


def _result(device: str, **outcomes: str) -> dict[str, Any]:
    """A grade's ``--json`` document as the grader's scorer and renderer make it:
    each named problem's one check ended with its outcome ("passed", "failed";
    the check maps to no single item, so it decides them all; GRADER_ERROR: the
    problem was not graded). GPU problems ran on ``device``: "cuda", "cpu" (the
    CPU standing in for it), "" (not run)."""
    problems = []
    for name, outcome in outcomes.items():
        p = load().problem(name)
        if outcome == GRADER_ERROR:
            problems.append(scoring.unavailable(p, GRADER_ERROR, NOT_GRADED, device))
            continue
        check = {"problem": name, "file": p.files[-1], "outcome": outcome, "message": "", "example": "",
                 "gpu_marked": p.gpu}
        run = run_of({"checks": {f"{p.files[-1]}::test_one": check}})
        problems.append(scoring.score_problem(p, p.check_files(REPO), [run], device, reveal=False))
    return render.to_json(scoring.total(GradeResult("sub", problems=problems), 1.0), reveal=False)


def _write(out: Path, sub_id: str, result: dict[str, Any] | None, *args: str, status: str = "graded",
           content: str = "") -> None:
    """A batch record of ``sub_id`` in ``out/results`` (graded with ``args``)."""
    rec = {"batch_version": 1, "id": sub_id, "source": f"/class/{sub_id}", "content": content or sub_id,
           "submitters": [], "status": status, "reason": "" if status == "graded" else f"{status}: why",
           "score": result["score"] if result else 0.0, "max_score": result["max_score"] if result else None,
           "grader_args": list(args), "wall_time": 1.0, "result": result}
    files.write_json_atomic(out / "results" / f"{sub_id}.json", rec)


def _merge(tmp_path: Path, *folders: str) -> dict[str, dict[str, str]]:
    assert batch.main(["--merge", *(str(tmp_path / f) for f in folders), "--out", str(tmp_path / "m"),
                       "--quiet"]) == 0
    return read_gradebook(tmp_path / "m")


def test_a_result_says_which_problems_the_cpu_stood_in_for():
    """A ``--json`` problem's ``stand_in`` is true for a GPU problem graded
    with the CPU standing in for a GPU, whatever its verdict, and false for one
    graded on a GPU, one not run, and one that needs no GPU;
    :func:`records.stand_in` reads it, and for a record written before the
    field, the note its output then begins with (the field, where present, decides)."""
    for device, mfu in (("cpu", True), ("cuda", False), ("", False)):
        doc = _result(device, precision="passed", mfu="failed")
        expected = {"precision": False, "mfu": mfu}
        assert {p["name"]: p["stand_in"] for p in doc["problems"]} == expected, device
        assert {p["name"]: stand_in(p) for p in doc["problems"]} == expected, device
        old = [{k: v for k, v in p.items() if k != "stand_in"} for p in doc["problems"]]
        assert {p["name"]: stand_in(p) for p in old} == expected, device
    assert not stand_in({"stand_in": False, "output": scoring.STAND_IN_NOTE})
    assert stand_in({"stand_in": True, "output": ""})


def test_the_gradebook_names_a_stand_in_grade(tmp_path):
    """``batch --cpu-stand-in`` reaches every grader; a problem graded with the
    CPU standing in for a GPU is named in the row's ``stand_in``, one graded on
    a GPU or not run is not."""
    args = batch.build_parser().parse_args(["class", "--problems", "mfu", "--cpu-stand-in"])
    assert batch._grader_args(args) == ["--problems", "mfu", "--cpu-stand-in"]
    for sub_id, device in (("rehearsed", "cpu"), ("on-a-gpu", "cuda"), ("cpu-only", "")):
        _write(tmp_path / "out", sub_id, _result(device, precision="passed", mfu="passed"))
    rows, mfu = _merge(tmp_path, "out"), f"{load().problem('mfu').points:g}"
    assert {k: (r["stand_in"], r["mfu"]) for k, r in rows.items()} == {
        "rehearsed": ("mfu", mfu), "on-a-gpu": ("", mfu), "cpu-only": ("", "not run")}, rows


def test_a_stand_in_mfu_batch_fills_what_the_cpu_batch_did_not_run(tmp_path):
    """A CPU batch of every problem (mfu not run) or of all but mfu, an MFU
    batch with the CPU standing in: each row takes mfu from the MFU batch and
    the rest from the CPU batch, sums again, has no GPU points not run, and
    names the stand-in; a submission refused in both keeps its row."""
    mfu, precision = load().problem("mfu").points, load().problem("precision").points
    _write(tmp_path / "cpu", "alice", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "cpu", "bob", _result("", precision="failed", mfu="passed"))
    _write(tmp_path / "cpu", "carol", _result("", precision="passed"))  # a CPU batch of all but mfu
    _write(tmp_path / "cpu", "dave", None, status="bad zip")
    for sub_id, outcome in (("alice", "passed"), ("bob", "passed"), ("carol", "failed")):
        _write(tmp_path / "gpu", sub_id, _result("cpu", mfu=outcome), "--problems", "mfu", "--cpu-stand-in")
    _write(tmp_path / "gpu", "dave", None, "--problems", "mfu", "--cpu-stand-in", status="bad zip")
    rows = _merge(tmp_path, "cpu", "gpu")
    cells = {k: (r["status"], r["precision"], r["mfu"], r["score"], r["max_score"], r["gpu_points_not_run"],
                 r["stand_in"]) for k, r in rows.items()}
    full = f"{precision + mfu:g}"
    assert cells == {
        "alice": ("graded", f"{precision:g}", f"{mfu:g}", full, full, "0", "mfu"),
        "bob": ("graded", "0", f"{mfu:g}", f"{mfu:g}", full, "0", "mfu"),
        "carol": ("graded", f"{precision:g}", "0", f"{precision:g}", full, "0", "mfu"),
        "dave": ("bad zip", "0", "0", "0", full, "0", ""),
    }, cells
    rec = load_record(tmp_path / "m" / "results" / "alice.json", "alice")
    assert rec is not None and [p["name"] for p in rec["result"]["problems"]] == ["precision", "mfu"]
    assert rec["result"]["score"] == rec["score"] and rec["result"]["gpu_points_not_run"] == 0
    assert [stand_in(p) for p in rec["result"]["problems"]] == [False, True]


def test_a_gpu_verdict_replaces_a_stand_in_and_no_verdict_stays_one(tmp_path):
    """In either order, a GPU's verdict on mfu wins over the CPU standing in
    (whose result differs: a rehearsal is no GPU's grade) and the row no longer
    says stand-in; an MFU batch that could not grade a submission (a grader
    error) leaves that row a grader error with its reason, to be regraded."""
    _write(tmp_path / "cpu", "alice", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "cpu", "bob", _result("", precision="passed", mfu="passed"))
    _write(tmp_path / "rehearsal", "alice", _result("cpu", mfu="failed"), "--cpu-stand-in")
    _write(tmp_path / "gpu", "alice", _result("cuda", mfu="passed"))
    _write(tmp_path / "gpu", "bob", _result("cuda", mfu=GRADER_ERROR), status="grader error")
    for order in (("cpu", "rehearsal", "gpu"), ("gpu", "rehearsal", "cpu")):
        rows = _merge(tmp_path, *order)
        assert (rows["alice"]["mfu"], rows["alice"]["stand_in"]) == (f"{load().problem('mfu').points:g}", ""), order
        assert (rows["bob"]["status"], rows["bob"]["reason"]) == ("grader error", "grader error: why"), order


def test_gradings_that_do_not_combine_stop_the_merge_naming_what(tmp_path):
    """The same problem graded in two folders with different results, or two
    contents of one submission: an error naming the submission, the folders
    and the problem, and no gradebook."""
    _write(tmp_path / "a", "alice", _result("cpu", mfu="passed"))
    _write(tmp_path / "b", "alice", _result("cpu", mfu="failed"))
    with pytest.raises(SystemExit, match=r"alice in .*a and .*b: problem 'mfu' was graded in both"):
        _merge(tmp_path, "a", "b")
    _write(tmp_path / "b", "alice", _result("cpu", mfu="passed"), content="resubmitted")
    with pytest.raises(SystemExit, match=r"alice .* different contents"):
        _merge(tmp_path, "a", "b")
    assert not (tmp_path / "m" / "gradebook.csv").exists()

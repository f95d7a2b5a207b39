"""The GitHub Actions workflows: the students' templates (grader/instructor/templates/ci/:
``grade.yml`` on GitHub's runners, ``grade-gpu.yml`` on the course's self-hosted GPU
runner) and this repository's own CI (.github/workflows/ci.yml, never shipped).

Each workflow is read with PyYAML (:func:`load_workflow`) and checked for what it must
do; the GPU workflow's chain (its script, the course's grader command, the grader's
Markdown) runs here on a cheap case. What the CPU workflow runs is run verbatim in the
release by selftest/test_release.py, job summary included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from grader.instructor import release
from grader.instructor.files import TEMPLATES
from grader.util import cuda_available

REPO = Path(__file__).resolve().parent.parent
CI = TEMPLATES / "ci"

def load_workflow(text: str) -> Any:
    """``text`` as GitHub reads it: YAML, with the ``on:`` key kept a string
    (YAML 1.1, which PyYAML reads, would make it ``True``)."""
    doc = yaml.safe_load(text)
    if isinstance(doc, dict) and True in doc:
        doc["on"] = doc.pop(True)
    return doc


def _workflow(path: Path) -> dict[str, Any]:
    doc = load_workflow(path.read_text())
    assert set(doc) >= {"name", "on", "jobs"} and "push" in doc["on"], (path, doc)
    return doc


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"].strip() for step in job["steps"] if "run" in step]


def test_students_cpu_workflow_grades_on_a_push_and_keeps_the_report():
    job = _workflow(CI / "grade.yml")["jobs"]["grade"]
    assert job["runs-on"] == "ubuntu-latest" and int(job["timeout-minutes"]) > 0
    assert _runs(job) == [".ci/run"]
    grade = next(s for s in job["steps"] if s.get("run") == ".ci/run")
    assert grade["env"]["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "grade-out/results.json"
    # The summary: the run script appends the grader's Markdown (the score and the table) to the step summary.
    script = (CI / "run").read_text()
    markdown = re.search(r"--markdown\s+(\S+)", script)
    assert markdown and f'cat {markdown[1]} >> "$GITHUB_STEP_SUMMARY"' in script


def test_students_gpu_workflow_runs_on_the_course_gpu_runner_only_where_set_up():
    job = _workflow(CI / "grade-gpu.yml")["jobs"]["mfu"]
    assert job["runs-on"] == ["self-hosted", "gpu"] and int(job["timeout-minutes"]) > 0
    # Skipped where the course has not set its grader command: never a job waiting for a runner nobody has.
    assert job["if"] == "vars.LAB_GPU_GRADER != ''"
    assert _runs(job) == [".ci/run-gpu"]
    step = next(s for s in job["steps"] if s.get("run") == ".ci/run-gpu")
    assert step["env"] == {"LAB_GPU_GRADER": "${{ vars.LAB_GPU_GRADER }}"}


def test_instructors_workflow_runs_ci_run_cached_and_timed_and_is_never_shipped():
    doc = _workflow(REPO / ".github" / "workflows" / "ci.yml")
    (job,) = doc["jobs"].values()
    assert int(job["timeout-minutes"]) <= 30
    python = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["cache"] == "pip"
    assert python["with"]["cache-dependency-path"].split() == ["pyproject.toml", "constraints.txt"]
    check = next(s for s in job["steps"] if ".ci/run" in s.get("run", ""))
    assert int(check["timeout-minutes"]) <= 20  # the project's budget for CI
    assert re.search(r"^\.ci/run\b", check["run"], flags=re.M), check["run"]
    assert "$GITHUB_STEP_SUMMARY" in check["run"]  # its time, on the run's page
    assert check["env"]["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    shipped = release.release_files(REPO)
    assert not [n for n in shipped if n.startswith((".github/", ".ci/"))], "release ships this repository's CI"


def _student_repo(tmp_path: Path) -> Path:
    """A student repository as the release lays out its GPU CI: the stubs, ``.ci/run-gpu``."""
    repo = tmp_path / "student-repo"
    shutil.copytree(REPO / "student", repo / "student", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".ci").mkdir()
    shutil.copy2(CI / "run-gpu", repo / ".ci" / "run-gpu")
    return repo


def test_gpu_workflow_writes_the_mfu_score_to_the_job_summary(tmp_path):
    """.ci/run-gpu with LAB_GPU_GRADER set to this checkout's gpu-runner-grade, as
    the course sets it up (less the sudo): the MFU row and the score reach the step
    summary, appended, and the stubs' lost points do not fail the job. Here there is
    no CUDA device, so the row says it needs one (a second's grade); on a GPU the
    stubs' MFU fails, 0 of its points."""
    repo = _student_repo(tmp_path)
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(LAB_GPU_GRADER=str(CI / "gpu-runner-grade"), GITHUB_STEP_SUMMARY=str(summary))
    proc = subprocess.run([".ci/run-gpu"], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shown = summary.read_text()
    assert shown.startswith("earlier step\n### score 0/"), shown
    assert "| problem | § | points | status | first failure |" in shown, shown
    rows = [line for line in shown.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 1 and rows[0].startswith("| mfu | 3.1/6 | 0/"), rows
    assert ("not run on a GPU" in rows[0]) == (not cuda_available()), rows
    assert (repo / "grade-out" / "summary-gpu.md").read_text() in shown


def test_gpu_workflow_fails_when_the_grade_could_not_run(tmp_path):
    """No grader command, a grader that fails, a grader command given arguments: a red job."""
    repo = _student_repo(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_GPU_GRADER", "GITHUB_STEP_SUMMARY")}
    unset = subprocess.run([".ci/run-gpu"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert unset.returncode == 1 and "LAB_GPU_GRADER is not set" in unset.stderr
    failing = subprocess.run([".ci/run-gpu"], cwd=repo, env={**env, "LAB_GPU_GRADER": "false"},
                             capture_output=True, text=True, timeout=60)
    assert failing.returncode != 0
    # The course's command takes no argument: nothing a student's workflow adds reaches the grader's options.
    extra = subprocess.run([".ci/run-gpu"], cwd=repo, capture_output=True, text=True, timeout=60,
                           env={**env, "LAB_GPU_GRADER": f"{CI / 'gpu-runner-grade'} --rubric /tmp/x"})
    assert extra.returncode == 2 and "takes no arguments" in extra.stderr

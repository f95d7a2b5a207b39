"""The GitHub Actions workflows: the students' template (grader/instructor/templates/ci/
grade.yml) and this repository's own CI (.github/workflows/ci.yml, never shipped).

Each workflow is read as YAML's block structure (:func:`load_workflow`: the project has
no YAML parser, and the subset these files use is small) and checked for what it must
do. What the students' workflow runs is run verbatim in the release by
selftest/test_release.py, job summary included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from grader.instructor import release
from grader.instructor.files import TEMPLATES

REPO = Path(__file__).resolve().parent.parent
CI = TEMPLATES / "ci"

_KEY = re.compile(r"([\w.-]+):(?:\s+(.*))?$")


def _scalar(text: str) -> Any:
    """A plain, quoted or flow-sequence (``[a, b]``) scalar; ValueError for what
    YAML would read otherwise (a ": " in a plain scalar, a flow mapping, an anchor)."""
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(t.strip()) for t in text[1:-1].split(",") if t.strip()]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if ": " in text or text.startswith(("{", "&", "*", "!", "%", "@", "`")):
        raise ValueError(f"not a plain scalar: {text!r}")
    return text


def load_workflow(text: str) -> Any:
    """``text``'s block mappings and sequences as dicts and lists of strings:
    the YAML subset workflows use (``key: value``, ``- item``, ``|`` block
    scalars, flow sequences, comments). Raises ValueError where YAML would not
    read the structure the indentation suggests: a tab, a line that is no key
    nor item, a line indented deeper than its parent allows, a repeated key."""
    rows: list[list[Any]] = []  # [indent, content, block scalar or None]
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if "\t" in line:
            raise ValueError(f"a tab in {line!r}")
        content = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not content:
            continue
        indent = len(line) - len(line.lstrip(" "))
        block = None
        if re.search(r"(:|^-)\s+\|$", content):  # a literal block: the deeper lines, as written
            body = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip(" ")) > indent):
                body.append(lines[i])
                i += 1
            margin = min((len(b) - len(b.lstrip(" ")) for b in body if b.strip()), default=0)
            block, content = "\n".join(b[margin:] for b in body).strip("\n") + "\n", content[:-1].rstrip()
        rows.append([indent, content, block])

    def node(pos: int, indent: int) -> tuple[Any, int]:
        if rows[pos][1] == "-" or rows[pos][1].startswith("- "):
            out: list[Any] = []
            while pos < len(rows) and rows[pos][0] == indent and rows[pos][1].startswith("-"):
                rest = rows[pos][1][1:].lstrip(" ")
                if _KEY.match(rest):  # "- key: value": a mapping whose keys line up with "key"
                    rows[pos][0], rows[pos][1] = indent + len(rows[pos][1]) - len(rest), rest
                    value, pos = node(pos, rows[pos][0])
                else:
                    value, pos = (rows[pos][2] or _scalar(rest)), pos + 1
                out.append(value)
            return out, pos
        mapping: dict[str, Any] = {}
        while pos < len(rows) and rows[pos][0] == indent and not rows[pos][1].startswith("- "):
            match = _KEY.match(rows[pos][1])
            if not match or match[1] in mapping:
                raise ValueError(f"not a new key: {rows[pos][1]!r}")
            key, value, block = match[1], match[2], rows[pos][2]
            pos += 1
            if block is not None or value:
                mapping[key] = block if block is not None else _scalar(value)
            elif pos < len(rows) and (rows[pos][0] > indent
                                      or (rows[pos][0] == indent and rows[pos][1].startswith("- "))):
                mapping[key], pos = node(pos, rows[pos][0])
            else:
                mapping[key] = None
        if pos < len(rows) and rows[pos][0] > indent:
            raise ValueError(f"indented deeper than its parent allows: {rows[pos][1]!r}")
        return mapping, pos

    doc, end = node(0, rows[0][0]) if rows else ({}, 0)
    if end != len(rows):
        raise ValueError(f"left over from {rows[end][1]!r}")
    return doc


def test_load_workflow_reads_the_structure_yaml_reads():
    doc = load_workflow("a: 1  # note\nb:\n  - uses: x@v1\n    with:\n      k: 'v'\n  - run: |\n"
                        "      echo one  # kept\n      echo two\nc: [self-hosted, gpu]\nd:\n- e\n")
    assert doc == {"a": "1", "b": [{"uses": "x@v1", "with": {"k": "v"}}, {"run": "echo one  # kept\necho two\n"}],
                   "c": ["self-hosted", "gpu"], "d": ["e"]}
    for broken in ("a:\n\tb: 1\n", "a: 1\n  b: 2\n", "a: 1\na: 2\n", "a:\n  b: 1\n c: 2\n", "just words\n",
                   "name: a: b\n"):
        with pytest.raises(ValueError):
            load_workflow(broken)


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

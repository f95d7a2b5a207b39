"""The student release: what it holds, that its tests run and fail on the stubs, that
nothing of the reference or the hidden checks leaked into it, and that its
submission CI (``.github/workflows/grade.yml`` -> ``.ci/run``) runs the public grader.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.instructor import release
from grader.util import tomllib
from tests.harness import HANDOUT_MODULES

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student-repo"
    proc = subprocess.run([sys.executable, "-m", "grader", "release", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts
            and ".venv" not in p.relative_to(root).parts and "__pycache__" not in p.parts]


def test_layout(release_dir):
    names = {p.relative_to(release_dir).as_posix() for p in _files(release_dir)}
    for absent in ("reference", "grader/hidden", "grader/corpus", "selftest", "docs", "grader/instructor"):
        assert not any(n == absent or n.startswith(absent + "/") for n in names), f"{absent} is in the release"
    for absent in ("docs/instructors.md", "grader/batch.py", "grader/instructor/release.py",
                   "grader/instructor/templates/release/README.md", "benchmarks/batch.py"):
        assert absent not in names
    for present in ("README.md", "handout.md", "lab", "pyproject.toml", "constraints.txt", "conftest.py",
                    ".ci/run", ".github/workflows/grade.yml", ".ci/run-gpu", ".github/workflows/grade-gpu.yml",
                    "student/__init__.py", "tests/harness.py", "grader/__init__.py"):
        assert present in names, f"{present} is missing from the release"
    for module in HANDOUT_MODULES:
        if (REPO / "student" / f"{module}.py").exists():
            assert (release_dir / "student" / f"{module}.py").read_bytes() == \
                (REPO / "student" / f"{module}.py").read_bytes()
    readme = (release_dir / "README.md").read_text()
    assert "pytest" in readme and "./lab grade" in readme and "reference" not in readme
    assert all(os.access(release_dir / name, os.X_OK) for name in ("lab", ".ci/run", ".ci/run-gpu"))
    if shutil.which("git"):
        log = subprocess.run(["git", "log", "--format=%s"], cwd=release_dir, capture_output=True, text=True).stdout
        assert log.splitlines() == ["Assignment release"], log
        status = subprocess.run(["git", "status", "--porcelain"], cwd=release_dir, capture_output=True,
                                text=True).stdout
        assert status == "", f"the release's commit misses files:\n{status}"


def test_lab_describes_only_what_a_student_has(release_dir):
    """The release's ``lab`` names no instructor tooling (its ``test`` command
    runs the public tests; the selftest sequence lives in selftest/run)."""
    text = (release_dir / "lab").read_text()
    assert (REPO / "selftest" / "run").is_file() and not (release_dir / "selftest").exists()
    for word in ("LAB_FULL_CORPUS", "reference", "selftest -", "hidden", "corpus", '"full"', "-m load"):
        assert word not in text, f"{word!r} in the release's lab"


def test_pyproject_describes_only_what_a_student_has(release_dir):
    """The release's pyproject.toml: the same dependencies and pytest set-up,
    but no instructor extras and no marker that only selftests or hidden checks
    use (each marker it declares is a problem's or used by a shipped file)."""
    text = (release_dir / "pyproject.toml").read_text()
    ours = tomllib.loads((REPO / "pyproject.toml").read_text())
    theirs = tomllib.loads(text)
    assert theirs["project"]["dependencies"] == ours["project"]["dependencies"]
    assert "optional-dependencies" not in theirs["project"] and "optional-dependencies" in ours["project"]
    for word in ("LAB_FULL_CORPUS", "grader/hidden", "grader/corpus", "copydetect", "cosmic-ray", "mutation",
                 "similarity", "selftest"):
        assert word not in text, f"{word!r} in the release's pyproject.toml"
    declared = {re.match(r"\w+", m)[0] for m in theirs["tool"]["pytest"]["ini_options"]["markers"]}
    shipped = "\n".join(p.read_text(errors="replace") for p in _files(release_dir) if p.suffix == ".py")
    unused = sorted(m for m in declared if m not in HANDOUT_MODULES and f"mark.{m}" not in shipped
                    and f'"{m}"' not in shipped)
    assert not unused, f"markers the release declares but nothing there uses: {unused}"
    # The problems' markers come from the rubric (tests/plugin.py), not from pyproject.toml.
    assert {"gpu", "feedback_only"} <= declared and not set(HANDOUT_MODULES) & declared
    assert not declared & set(release.INSTRUCTOR_MARKERS)
    ours_pytest = {k: v for k, v in ours["tool"]["pytest"]["ini_options"].items() if k != "markers"}
    assert {k: v for k, v in theirs["tool"]["pytest"]["ini_options"].items() if k != "markers"} == ours_pytest


def test_student_pyproject_refuses_an_instructor_line_it_does_not_know():
    text = (REPO / "pyproject.toml").read_text()
    release.student_pyproject(text)  # this repository's own file is handled
    with pytest.raises(RuntimeError, match="LAB_FULL_CORPUS"):
        release.student_pyproject(text + "\n# LAB_FULL_CORPUS=1 runs the whole corpus\n")
    with pytest.raises(RuntimeError, match="does not parse"):
        release.student_pyproject(text + "\n[broken\n")


def test_instructor_commands_say_they_are_absent(release_dir):
    """The release has no grader/instructor/: its instructor commands say so
    (exit 1), they do not crash, and grading does not need that package."""
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", "subs"], cwd=release_dir, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "not available in this checkout" in proc.stderr, proc.stderr
    imports = [p for p in (release_dir / "grader").rglob("*.py") if p.name != "__main__.py"
               and re.search(r"grader\.instructor|from grader import instructor", p.read_text())]
    assert not imports, f"release modules naming grader.instructor: {imports}"


def test_refuses_to_overwrite_or_write_inside_the_repo(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep").write_text("mine")
    assert release.main([str(tmp_path / "x")]) == 2
    assert (tmp_path / "x" / "keep").read_text() == "mine"
    assert release.main([str(REPO / "student-release")]) == 2
    assert not (REPO / "student-release").exists()


# ------------------------------------------------------------------ leaks


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _normalized(path: Path) -> str:
    """A file's text with formatting, comments and docstrings' layout erased:
    python files through ast (so re-indenting or re-quoting hides nothing)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        try:
            return _squash(ast.unparse(ast.parse(text)))
        except (SyntaxError, ValueError):
            pass
    return _squash(text)


def reference_bodies(min_lines: int = 4) -> dict[str, str]:
    """Normalized source of every reference function body (docstring dropped)
    of at least ``min_lines`` lines of code, by qualified name. Shorter bodies
    (``return x @ self.weight``) are what the handout's formulas say anyway."""
    bodies = {}
    for path in sorted((REPO / "reference").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]
            source = ast.unparse(ast.Module(body=body, type_ignores=[]))  # comments and blank lines gone
            if len(source.splitlines()) >= min_lines:
                bodies[f"{path.stem}.{node.name}"] = _squash(source)
    return bodies


def hidden_test_names() -> set[str]:
    names = set()
    for path in (REPO / "grader" / "hidden").rglob("*.py"):
        names |= set(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)", path.read_text(), flags=re.M))
    public = set()
    for path in (REPO / "tests").rglob("*.py"):
        public |= set(re.findall(r"def\s+(test_\w+)", path.read_text()))
    return names - public  # a hidden check may share a public test's name: that name is public


def _leaks(root: Path) -> list[str]:
    bodies, hidden = reference_bodies(), hidden_test_names()
    found = []
    for path in _files(root):
        if path.suffix in (".png", ".zip", ".pyc"):
            continue
        norm, raw = _normalized(path), path.read_text(errors="replace")
        rel = path.relative_to(root).as_posix()
        found += [f"{rel}: body of reference {name}" for name, body in bodies.items() if body in norm]
        # a name, not a file name (grader/mfu/check.py may cite selftest/test_mfu.py)
        found += [f"{rel}: hidden check {name}" for name in hidden
                  if re.search(rf"(?<![\w/.]){name}(?![\w.])", raw)]
        if re.search(r"^\s*(from|import)\s+reference\b", raw, flags=re.M):
            found.append(f"{rel}: imports reference")
    return found


def test_no_reference_code_or_hidden_check_leaked(release_dir):
    bodies = reference_bodies()
    assert len(bodies) >= 5, f"too few reference bodies to search for: {sorted(bodies)}"
    leaks = _leaks(release_dir)
    assert not leaks, "leaked into the release:\n" + "\n".join(leaks)


def test_leak_search_finds_a_planted_leak(release_dir, tmp_path):
    """The search is not vacuous: a reference function pasted (re-indented, with
    other comments) into a release file is found."""
    copy = tmp_path / "copy"
    shutil.copytree(release_dir, copy, ignore=shutil.ignore_patterns(".git"))
    name, _ = max(reference_bodies().items(), key=lambda kv: len(kv[1]))
    module, func = name.split(".")
    tree = ast.parse((REPO / "reference" / f"{module}.py").read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func)
    pasted = "\n".join("    # mine\n    " + line for line in ast.unparse(fn).splitlines())
    target = copy / "student" / "views.py"
    target.write_text(target.read_text() + "\n\nclass Sneaky:\n" + pasted + "\n")
    found = [f for f in _leaks(copy) if f.startswith("student/views.py")]
    assert found == [f"student/views.py: body of reference {name}"], found


# ------------------------------------------------------------------ pytest there


NO_SHRINK = """

from hypothesis import HealthCheck, Phase, settings

settings.register_profile("release_check", max_examples=15, deadline=None, derandomize=True,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=list(HealthCheck))
"""


def _collected(cwd: Path, env: dict[str, str], *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(line for line in proc.stdout.splitlines() if "::" in line)


#: Problems run in full in the release: files, scenarios in the worker's harness,
#: and pure functions. selftest/test_honesty.py runs every public test on the
#: stubs in this checkout; here the question is whether the release's copy of
#: the harness works without reference/ and grader/, which collection (every
#: test file imported) and these problems answer.
RELEASE_RUN = ("tests/test_precision.py", "tests/test_data.py", "tests/test_training.py")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pytest_runs_in_the_release_and_fails_every_test_on_the_stubs(release_dir, tmp_path):
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    # The outcome recorder of the honesty check, plus a profile that does not shrink:
    # on the stubs every test fails at its first example, and shrinking it (each
    # step recomputing the test's oracle) is what would make this run slow.
    (plugin_dir / "release_outcomes.py").write_text((REPO / "selftest" / "outcomes.py").read_text() + NO_SHRINK)
    out = tmp_path / "outcomes.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYPOTHESIS_PROFILE")}
    here = _collected(REPO, env, "tests", "--impl", "student")
    env["PYTHONPATH"] = str(plugin_dir)  # the recorder only: nothing of this repo is importable there
    assert _collected(release_dir, env) == here, "the release collects other tests than this checkout"
    proc = subprocess.run([sys.executable, "-m", "pytest", *RELEASE_RUN, "-p", "release_outcomes",
                           f"--outcomes={out}", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--hypothesis-profile", "release_check"],
                          cwd=release_dir, env=env, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "implementation under test: student" in proc.stdout or proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads(out.read_text())
    ran = {n for n in here if n.split("::")[0] in RELEASE_RUN}
    assert set(results) == ran, f"ran {len(results)} of the {len(ran)} tests of {RELEASE_RUN}"
    bad = [f"{nodeid}: {r['outcome']} {r['exceptions'][:2]} {r['messages'][:1]}" for nodeid, r in results.items()
           if not (r["outcome"] == "skipped" and "gpu" in r["markers"])
           and not (r["outcome"] == "failed" and "NotImplementedError" in r["exceptions"])]
    assert not bad, "in the release, not failing with the stubs' NotImplementedError:\n" + "\n".join(bad[:20])
    assert proc.returncode == 1, f"pytest exit code {proc.returncode}"


# ------------------------------------------------------------------ submission CI


def _borrow_venv(repo: Path) -> None:
    """Give ``repo`` a .venv that reads this one's packages (no install, no
    network), stamped the way ./lab stamps a venv it set up, so ``./lab grade``
    runs as for a student. It is a real venv of the base interpreter whose site
    folder adds this one's: the sandbox binds the interpreter and every site
    folder, as for a student's venv (a venv made of links into this one would
    point the sandbox at paths it does not bind, and every problem would be a
    grader error)."""
    venv = repo / ".venv"
    here = Path(sys.prefix)
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True,  # type: ignore[attr-defined]
                   capture_output=True, timeout=120)
    (site_dir,) = [Path(p) for p in sys.path if p.startswith(str(here)) and p.endswith("site-packages")]
    (theirs,) = (venv / "lib").glob("python3*/site-packages")
    (theirs / "_borrowed.pth").write_text(f"import site; site.addsitedir({str(site_dir)!r})\n")
    files = subprocess.run("cat pyproject.toml constraints.txt tests/entry_point/lab_impl_option.py"
                           " | cksum | cut -d' ' -f1", shell=True, cwd=repo, capture_output=True, text=True,
                           check=True).stdout.strip()
    # The torch build ./lab asks for on this machine: the one it set this venv up with.
    ours = here / ".lab-stamp"
    build = ours.read_text().strip().partition(" torch=")[2] if ours.is_file() else ""
    (venv / ".lab-stamp").write_text(f"{files} torch={build or 'cpu'}\n")


def test_ci_workflow_runs_ci_run_and_uploads_its_json(release_dir):
    workflow = (release_dir / ".github" / "workflows" / "grade.yml").read_text()
    runs = re.findall(r"^\s*run:\s*(.+)$", workflow, flags=re.M)
    assert runs == [".ci/run"], runs
    uploaded = re.findall(r"^\s*path:\s*(.+)$", workflow, flags=re.M)
    ci_run = (release_dir / ".ci" / "run").read_text()
    json_out = re.search(r"--json\s+(\S+)", ci_run)
    assert json_out and uploaded == [json_out.group(1)], (uploaded, ci_run)
    assert "./lab grade" in ci_run and "--public-only" in ci_run


@pytest.mark.timeout(1200)
def test_ci_run_grades_the_stubs_with_the_public_checks(release_dir, tmp_path):
    """What the workflow runs, run verbatim in a copy of the release: the grader
    works without reference/ and grader/hidden/, and writes the uploaded JSON."""
    repo = tmp_path / "clone"
    shutil.copytree(release_dir, repo, symlinks=True)
    _borrow_venv(repo)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    proc = subprocess.run([".ci/run"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The job summary: appended to, the score and a row per problem graded.
    shown = summary.read_text()
    assert shown.startswith("earlier step\n### score 0/") and "| problem | § | points | status |" in shown, shown
    assert "| precision | 1.1 | 0/10 | failed | not implemented yet: bytes\\_per\\_element" in shown, shown
    assert "setting up" not in proc.stderr, "./lab reinstalled the venv"
    result = json.loads((repo / "grade-out" / "results.json").read_text())
    assert result["score"] == 0, f"the stubs scored {result['score']}"
    assert result["max_score"] > 0
    assert result["checks"].startswith("public checks only (this is the student release)"), result["checks"]
    assert "hidden checks that extend these public tests" in result["checks"]
    names = {p["name"] for p in result["problems"]}
    shipped = {m for m in HANDOUT_MODULES if (repo / "tests" / f"test_{m}.py").exists()}
    assert shipped <= names, f"problems graded: {sorted(names)}; public test files: {sorted(shipped)}"
    for p in result["problems"]:  # graded, every one: failed on its stubs (no grader error), or needs a GPU
        assert p["score"] == 0 and p["status"] in ("failed", "not run on a GPU"), (p["status"], p["output"][:500])

"""The command lines README.md and docs/authoring.md give instructors run as
written: ``pytest --impl PATH`` with a space (the project's pytest11 entry
point, tests/entry_point/lab_impl_option.py, installed by ./lab setup or ``pip
install -e .``) and with ``=``, from the repository and from another folder,
and ``python -m grader check``.

Each pytest line runs as the document writes it, with the selection narrowed
by ``PYTEST_ADDOPTS`` to one quick problem (the line's own ``-m`` wins): what is
tested is how the line is read, not the whole suite again."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.entry_point.lab_impl_option import join_impl, restarted_command, runs_pytest

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/authoring.md")
#: Why a test of the space form is skipped.
NOT_INSTALLED = "this environment did not install the project (./lab setup, pip install -e .): no pytest11 entry point"
#: What a document writes for "a submission folder": built from the reference here.
PLACEHOLDER = "/path/to/submission"


def _commands(document: str) -> list[str]:
    """The lines of the document's ```bash blocks that run pytest with --impl, or the check."""
    text = (REPO / document).read_text() if (REPO / document).is_file() else ""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if ("pytest" in command and "--impl" in command) or re.search(r"-m grader check\b", command):
                out.append(command)
    return out


CASES = [(doc, cmd) for doc in DOCUMENTS for cmd in _commands(doc)]


def test_the_documents_give_these_commands():
    readme = [cmd for doc, cmd in CASES if doc == "README.md"]
    assert any(f"--impl {PLACEHOLDER}" in cmd for cmd in readme), readme  # the form with a space
    assert any(doc == "docs/authoring.md" and "grader check" in cmd for doc, cmd in CASES), CASES


@pytest.fixture(scope="module")
def submission(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("submission")
    shutil.copytree(REPO / "reference", folder / "student", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def _impl_option_installed() -> bool:
    """Whether this environment installed the project (its pytest11 entry point)."""
    return any(ep.name == "lab_impl_option" for ep in metadata.entry_points(group="pytest11"))


@pytest.mark.parametrize(("document", "command"), CASES, ids=[f"{d}: {c}" for d, c in CASES])
def test_documented_command_runs_as_written(document, command, submission):
    if "--impl " in command and not _impl_option_installed():
        pytest.skip(NOT_INSTALLED)
    words = [str(submission) if w == PLACEHOLDER else w for w in shlex.split(command)]
    env = {**os.environ, "PYTEST_ADDOPTS": "-m views -p no:cacheprovider -q"}
    proc = subprocess.run(words, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{document}: {command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if "pytest" in command:
        assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]


@pytest.mark.parametrize("form", ["space", "equals"])
def test_impl_path_from_another_folder(form, submission, tmp_path):
    """From outside the repository, the submission given relative to that folder."""
    if form == "space" and not _impl_option_installed():
        pytest.skip(NOT_INSTALLED)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    relative = os.path.relpath(submission, elsewhere)
    impl = ["--impl", relative] if form == "space" else [f"--impl={relative}"]
    proc = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "tests" / "test_views.py"), *impl, "-q",
                           "-p", "no:cacheprovider"], cwd=elsewhere, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(("args", "joined"), [
    (["--impl", "/x", "-q"], ["--impl=/x", "-q"]),
    (["-q", "--impl", "reference"], ["-q", "--impl=reference"]),
    (["--impl=/x"], ["--impl=/x"]),
    (["--impl"], ["--impl"]),  # no value: pytest says so
    (["--", "--impl", "/x"], ["--", "--impl", "/x"]),
    (["-k", "impl", "--impl", "a b"], ["-k", "impl", "--impl=a b"]),
])
def test_join_impl(args, joined):
    assert join_impl(args) == joined


@pytest.mark.parametrize(("orig", "expected"), [
    (["/v/bin/python", "-m", "pytest", "--impl", "x"], True),
    (["/v/bin/python", "-X", "importtime", "-m", "pytest"], True),
    (["/v/bin/python", "/v/bin/pytest", "--impl", "x"], True),
    (["/v/bin/python", "-m", "grader", "--impl", "x"], False),
    (["/v/bin/python", "-c", "import pytest", "-m", "pytest"], False),
    (["/v/bin/python", "script.py", "pytest"], False),
    (["/v/bin/python"], False),
])
def test_runs_pytest(orig, expected):
    assert runs_pytest(orig) is expected


def test_impl_path_outside_the_checkout_with_a_space(submission):
    """From the checkout, no test path, the submission outside it: the line
    pytest misreads without the entry point (PATH taken for a test folder, the
    project's configuration and conftest.py never found: "unrecognized
    arguments: --impl")."""
    if not _impl_option_installed():
        pytest.skip(NOT_INSTALLED)
    assert REPO not in submission.parents
    proc = subprocess.run([sys.executable, "-m", "pytest", "--impl", str(submission), "-m", "views", "-q",
                           "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(("orig", "argv", "parsed", "expected"), [
    # python -m pytest, interpreter options kept
    (["/v/bin/python", "-X", "dev", "-m", "pytest", "--impl", "x", "-q"], ["--impl", "x", "-q"],
     ("--impl", "x", "-q"), ["/v/bin/python", "-X", "dev", "-m", "pytest", "--impl=x", "-q"]),
    # the pytest script
    (["/v/bin/python", "/v/bin/pytest", "-q", "--impl", "a b"], ["-q", "--impl", "a b"], ("-q", "--impl", "a b"),
     ["/v/bin/python", "/v/bin/pytest", "-q", "--impl=a b"]),
    # already one word: nothing to do
    (["/v/bin/python", "-m", "pytest", "--impl=x"], ["--impl=x"], ("--impl=x",), None),
    # pytest.main() with other arguments than the command line's
    (["/v/bin/python", "-m", "pytest", "--impl", "x"], ["--impl", "x"], ("tests",), None),
    # not pytest
    (["/v/bin/python", "-m", "grader", "--impl", "x"], ["--impl", "x"], ("--impl", "x"), None),
])
def test_restarted_command(orig, argv, parsed, expected):
    assert restarted_command(orig, argv, parsed) == expected


@pytest.mark.full
def test_a_plain_pip_install_reads_impl_with_a_space(tmp_path, submission):
    """A virtual environment made the usual way (``python -m venv``, ``pip
    install -e .`` at the lock's versions), not by ./lab: ``pytest --impl PATH``
    runs from the checkout with the submission outside it, and from another
    folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
                              str(REPO / "constraints.txt"), "-e", str(REPO)], capture_output=True, text=True,
                             timeout=1800)
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, args in ((REPO, ["-m", "views"]), (elsewhere, [str(REPO / "tests" / "test_views.py")])):
        proc = subprocess.run([python, "-m", "pytest", *args, "--impl", os.path.relpath(submission, cwd), "-q",
                               "-p", "no:cacheprovider"], cwd=cwd, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout, proc.stdout[-2000:]

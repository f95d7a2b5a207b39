"""The command line's manners: ``python -m grader --help`` imports nothing heavy
and shows no markup, the grader's exit codes, ``./lab`` names an unknown
command and says what its set-up installs, and a grade shows each problem as
it starts and finishes (grader/report/progress.py) on stderr, never on stdout.

The help's speed is measured in benchmarks/cli.py (figures, not asserts); here
the test is what makes it fast: torch and the pipeline are not imported.
"""

from __future__ import annotations

import functools
import glob
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader import cli
from grader.report.progress import GradeProgress, summary

REPO = Path(__file__).resolve().parent.parent


def _imported(importtime_stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


# ------------------------------------------------------------------ python -m grader --help


def test_help_imports_neither_torch_nor_the_pipeline_and_shows_no_markup():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "grader", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = _imported(proc.stderr)
    assert "grader.cli" in modules, "the importtime output was not read"  # the parse above is not vacuous
    heavy = sorted(m for m in modules if m.split(".")[0] in ("torch", "numpy", "hypothesis", "pytest", "rich")
                   or m in ("grader.engine", "grader.report.render", "grader.report.table", "grader.report.platforms",
                           "grader.groups", "grader.sandbox.isolation"))
    assert not heavy, f"--help imported {heavy}"
    assert proc.stdout.startswith("usage: python -m grader"), proc.stdout[:200]
    for markup in ("``", ":mod:", ":func:", ":class:"):
        assert markup not in proc.stdout, f"{markup!r} in --help:\n{proc.stdout}"
    assert "--hypothesis-profile" in proc.stdout and "Exit code" in proc.stdout


@pytest.mark.parametrize("option", ["--profile", "--hypothesis-profile"])
def test_profile_has_pytests_name_too(option):
    assert cli.parser().parse_args([option, "ci"]).profile == "ci"
    assert cli.parser().parse_args([]).profile is None  # the rubric's default, decided by the engine


@pytest.mark.parametrize("argv", [["--hypothesis-profile", "fast"], ["--frobnicate"], ["--parallel", "2"]])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage: python -m grader" in capsys.readouterr().err


# ------------------------------------------------------------------ ./lab


def test_lab_names_an_unknown_command_and_exits_2():
    proc = subprocess.run([str(REPO / "lab"), "frobnicate"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("lab: unknown command 'frobnicate'\n"), proc.stderr
    assert "./lab grade" in proc.stderr and proc.stdout == ""  # the usage, on stderr with the error
    helped = subprocess.run([str(REPO / "lab"), "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "./lab grade" in helped.stdout and "unknown" not in helped.stderr
    assert "set -euo" not in helped.stdout  # the usage is the header comment, not the script


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("checkout", ["instructor", "student release"])
def test_lab_test_help_is_short_and_runs_nothing(tmp_path, flag, checkout):
    """``./lab test --help`` (and -h, among other arguments) prints one short help
    and exits 0 without setting up .venv, type-checking or running pytest: in a
    copy holding only lab (and selftest/run, in the instructor checkout) whose
    python3 records any call, nothing is called and no .venv appears."""
    repo = tmp_path / "repo"
    (repo / "selftest").mkdir(parents=True)
    shutil.copy2(REPO / "lab", repo / "lab")
    if checkout == "instructor":
        shutil.copy2(REPO / "selftest" / "run", repo / "selftest" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'called'}\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([str(repo / "lab"), "test", "-x", flag], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: ./lab test") and len(lines) < 100 and proc.stdout.count("usage:") == 1, lines
    assert "pytest --help" in proc.stdout  # where pytest's own options are
    assert not (tmp_path / "called").exists() and not (repo / ".venv").exists()
    assert ("mypy" in proc.stdout and "selftest" in proc.stdout) == (checkout == "instructor"), proc.stdout


FAKE_PYTHON = """#!/bin/sh
# Stands in for python3: "-m venv DIR" makes DIR/bin/python, which logs pip's
# arguments instead of installing and runs anything else with the real python.
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    cat > "$3/bin/python" <<EOF
#!/bin/sh
if [ "\\$1" = -m ] && [ "\\$2" = pip ]; then echo "pip \\$*" >> "$PIP_LOG"; exit 0; fi
exec "$REAL_PYTHON" "\\$@"
EOF
    chmod +x "$3/bin/python"
    exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def _fake_setup(tmp_path: Path, system: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``./lab setup`` in a fresh clone of the files it reads, with a python3 whose
    venv logs pip's arguments instead of installing (``uname`` says ``system``; a
    stand-in ``bwrap`` keeps it from installing bubblewrap); (the run, pip's calls)."""
    repo = tmp_path / "clone"
    (repo / "tests" / "entry_point").mkdir(parents=True)
    for name in ("lab", "pyproject.toml", "constraints.txt", "tests/entry_point/lab_impl_option.py"):
        shutil.copy2(REPO / name, repo / name)
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("uname", f"#!/bin/sh\necho {system}\n"), ("bwrap", "#!/bin/sh\n"),
                       ("nvidia-smi", "#!/bin/sh\nexit 9\n")):  # no CUDA device here, whatever the machine
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    log = tmp_path / "pip.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAB_")}, **env,
           "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "PYTHON": str(fake / "python3"),
           "REAL_PYTHON": sys.executable, "PIP_LOG": str(log)}
    proc = subprocess.run([str(repo / "lab"), "setup"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    return proc, (log.read_text().splitlines() if log.is_file() else [])


def test_lab_setup_says_what_it_installs(tmp_path):
    """A fresh set-up names the packages, each with its version in the lock, and
    where they go, on stderr; pip itself stays quiet (-q) and nothing reaches stdout."""
    proc, pips = _fake_setup(tmp_path, "Darwin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    pin = next(line.strip() for line in (REPO / "constraints.txt").read_text().splitlines()
               if line.startswith("torch=="))
    installing = [line for line in proc.stderr.splitlines() if line.startswith("lab: installing ")]
    assert len(installing) == 1, proc.stderr
    assert installing[0].startswith(f"lab: installing {pin}, numpy==") and " into .venv (" in installing[0]
    listed = installing[0].removeprefix("lab: installing ").partition(" into ")[0].split(", ")
    assert all("==" in name for name in listed), f"not pinned by the lock: {listed}"
    assert "matplotlib" not in installing[0]  # no selftest/: a student's checkout, no instructor extras
    assert any("install -q -c constraints.txt -r .venv/requirements.txt" in p for p in pips), pips
    # then the project itself, without its dependencies: its pytest11 entry point
    assert pips[-1].endswith("install -q --disable-pip-version-check --no-deps -e ."), pips
    assert "lab: asking for PyPI's torch (on macOS" in proc.stderr
    assert (tmp_path / "clone" / ".venv" / ".lab-stamp").is_file()


@pytest.fixture
def cpu_index(tmp_path):
    """A package index on loopback that holds a torch/ page (it serves files only)."""
    root = tmp_path / "index"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="this machine has a CUDA device")
def test_lab_setup_asks_for_the_cpu_build_without_a_cuda_device(tmp_path, cpu_index):
    proc, pips = _fake_setup(tmp_path, "Linux", LAB_TORCH_CPU_INDEX=cpu_index)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device here: asking for torch's CPU build (LAB_TORCH=cuda ./lab setup" in proc.stderr
    install = [p for p in pips if " install -q " in p and "-c constraints.txt" in p]
    assert len(install) == 1 and f"--extra-index-url {cpu_index}" in install[0], pips
    assert "lab: installed torch " in proc.stderr  # what it installed, read back from torch itself


def test_lab_setup_says_when_the_cpu_build_cannot_be_reached(tmp_path):
    proc, pips = _fake_setup(tmp_path, "Linux", LAB_TORCH_CPU_INDEX="http://127.0.0.1:9")  # the discard port
    assert proc.returncode == 0, proc.stderr
    assert "http://127.0.0.1:9 cannot be reached from here" in proc.stderr
    assert not any("--extra-index-url" in p for p in pips), pips


def test_lab_setup_asks_for_the_cuda_build_when_told(tmp_path, cpu_index):
    proc, pips = _fake_setup(tmp_path, "Linux", LAB_TORCH="cuda", LAB_TORCH_CPU_INDEX=cpu_index)
    assert proc.returncode == 0, proc.stderr
    assert "asking for PyPI's torch, the CUDA build (LAB_TORCH=cpu ./lab setup" in proc.stderr
    assert not any("--extra-index-url" in p for p in pips), pips


def test_lab_setup_refuses_an_unknown_build(tmp_path):
    proc, _ = _fake_setup(tmp_path, "Linux", LAB_TORCH="rocm")
    assert proc.returncode == 2 and "LAB_TORCH must be cpu, cuda or auto" in proc.stderr


# ------------------------------------------------------------------ progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _line(problem: str, event: str, **fields: object) -> bytes:
    return json.dumps({"problem": problem, "event": event, **fields}).encode() + b"\n"


def test_progress_lines_each_problem_of_a_phase_as_it_starts_and_ends():
    out, clock = io.StringIO(), _Clock()
    progress = GradeProgress(out, rich=False, clock=clock)
    progress.assign(["views", "optimizers"], "hidden checks")
    progress.event(_line("views", "start", checks=2))
    progress.event(_line("views", "check", outcome="passed"))
    clock.now += 3
    progress.event(_line("views", "check", outcome="failed"))
    progress.event(_line("views", "end"))
    progress.event(_line("optimizers", "start", checks=3))
    progress.event(_line("optimizers", "check", outcome="timeout"))
    progress.event(_line("optimizers", "check", outcome="passed"))
    clock.now += 38
    progress.event(_line("optimizers", "check", outcome="passed"))
    progress.event(_line("optimizers", "end"))
    assert out.getvalue().splitlines() == [
        "views (hidden checks): started",
        "views (hidden checks): 1/2 checks passed (1 failed) in 3.0 s",
        "optimizers (hidden checks): started",
        "optimizers (hidden checks): 2/3 checks passed (1 timeout) in 38 s",
    ]


def test_progress_drops_what_was_not_planned_and_ends_with_the_process():
    out = io.StringIO()
    progress = GradeProgress(out, rich=False, clock=_Clock())
    progress.assign(["data", "flops"])
    for line in [b"not json", b"[1]", _line("\x1b[2Jevil", "start", checks=1),
                 _line("views", "start", checks=1),  # not planned
                 _line("data", "check", outcome="\x1b[31mpassed"),
                 _line("data", "start", checks=3)]:
        progress.event(line)
    assert out.getvalue() == "data: started\n"
    progress.ended()  # the process died with data's checks not done, and flops never started (a collection error)
    assert out.getvalue().splitlines()[1:] == ["data: 0/3 checks passed (3 without a result) in 0.0 s",
                                               "flops: no checks ran"]
    progress.event(_line("data", "check", outcome="passed"))  # after its end: ignored
    assert len(out.getvalue().splitlines()) == 3


def test_progress_summary_names_every_kind_of_outcome():
    assert summary(15, 15, {}, 41.2) == "15/15 checks passed in 41 s"
    assert summary(1, 4, {"failed": 1, "not run": 2}, 2.04) == "1/4 checks passed (1 failed, 2 not run) in 2.0 s"
    assert summary(0, 3, {"timeout": 2, "grader error": 1}, 1) == \
        "0/3 checks passed (2 timeouts, 1 grader error) in 1.0 s"


def test_progress_on_a_terminal_is_a_rich_display_that_ends_with_each_result():
    out = io.StringIO()
    progress = GradeProgress(out, rich=True, clock=_Clock())
    progress.assign(["views"])
    progress.event(_line("views", "start", checks=2))
    progress.event(_line("views", "check", outcome="passed"))
    progress.event(_line("views", "check", outcome="passed"))
    progress.event(_line("views", "end"))
    progress.note("regrading views alone, after a grader error")
    progress.close()
    progress.close()  # twice is fine
    text = out.getvalue()
    assert "views" in text and "2/2 checks passed" in text and "views: started" not in text
    assert "regrading views alone" in text


def test_a_verbose_grade_shows_each_problem_on_stderr_and_keeps_stdout_for_the_table(tmp_path):
    """A real grade with --verbose (the reference, one problem): its start and
    its finish on stderr, in that order, counting the checks the JSON records;
    stdout is the table, under the operator's header. Its public checks, then
    its hidden ones (a phase after all public checks of the grade): a start and
    a finish each."""
    (tmp_path / "sub").mkdir()
    shutil.copytree(REPO / "reference", tmp_path / "sub" / "student")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(tmp_path / "sub"), "--problems", "precision",
                           "--hypothesis-profile", "dev", "--json", str(out), "--verbose"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["profile"] == "dev"  # --hypothesis-profile is --profile
    (problem,) = result["problems"]
    checks = len(problem["checks"])
    assert checks > 0 and problem["status"] == "passed"
    lines = [line for line in proc.stderr.splitlines() if line.startswith("precision")]
    public = sum(c["test"].startswith("tests/") for c in problem["checks"])
    assert len(lines) == 4 and lines[0] == "precision: started", proc.stderr
    assert re.fullmatch(rf"precision: {public}/{public} checks passed in [0-9.]+ s", lines[1]), lines
    assert lines[2] == "precision (hidden checks): started", lines
    hidden = checks - public
    assert re.fullmatch(rf"precision \(hidden checks\): {hidden}/{hidden} checks passed in [0-9.]+ s", lines[3])
    assert "started" not in proc.stdout and "checks passed" not in proc.stdout
    assert re.search(r"^precision +1\.1 +10/10 +passed", proc.stdout, flags=re.M), proc.stdout  # the table
    assert proc.stdout.startswith(f"grading {tmp_path / 'sub'}\nsandbox: "), proc.stdout[:500]


def test_a_students_grade_holds_what_a_student_needs_only(tmp_path):
    """Without --verbose (stderr no terminal): nothing on stderr, no path, no
    sandbox, no note about this machine; the table fits 100 columns; below it
    each lost item's first failure once, never a line of the table again, and
    one line on where to look."""
    from grader.corpus import build_wrong, wrong_submissions

    (entry,) = [w for w in wrong_submissions() if w.name == "einops_ops-mean_as_sum"]
    sub = build_wrong(entry, tmp_path / "w")
    proc = subprocess.run([sys.executable, "-m", "grader", str(sub), "--problems", "einops_ops",
                           "--profile", "dev"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    out = proc.stdout
    for operator in (str(tmp_path), str(REPO), "sandbox", "calibration", "bubblewrap", "profile"):
        assert operator not in out, (operator, out[:3000])
    table, _, rest = out.partition("\nchecks: ")
    assert table.startswith("problem ") and all(len(ln) <= 100 for ln in table.splitlines()), table
    assert re.search(r"^einops_ops +2 +7/10 +failed", table, flags=re.M), table
    shown = [ln.strip() for ln in table.splitlines()[2:] if ln.strip()]
    assert not [ln for ln in rest.splitlines() if ln.strip() in shown], rest
    heads = [ln for ln in rest.splitlines() if ln.startswith("── ")]
    assert heads == ["── einops_ops · sum_hidden and mean_hidden",
                     "── einops_ops · worked examples and non-contiguous views"], rest
    assert rest.count("Reproduce: pytest tests/test_einops_ops.py::") == 2, rest
    assert rest.rstrip().splitlines()[-1] == \
        "where to look: handout §2 (einops_ops); `pytest -m einops_ops` shows each failing public test", rest

"""Batch grading with a fake grader (fast): discovery of export layouts, one row per
submission whatever happens, atomic results, resume after SIGKILL, timeouts,
summary files, shards, Slurm scripts and merging.

The fake grader (``FAKE_GRADER``) honours the grader's CLI contract (SUBMISSION,
``--json``, ``--problems``; exit 0 whenever grading completed) and scores each
problem from markers in ``student/<problem>.py``, so the expected gradebook is known
exactly. The real grader is exercised in ``test_batch_integration.py``.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from grader.instructor import batch

REPO = Path(__file__).resolve().parent.parent

FAKE_GRADER = r'''
import json, os, sys, time, zipfile
args = sys.argv[1:]
sub, out = args[0], args[args.index("--json") + 1]
problems = args[args.index("--problems") + 1].split(",") if "--problems" in args else ["precision", "views"]
log = os.environ.get("FAKE_GRADER_LOG")
if log:
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {os.path.basename(sub.rstrip('/'))}\n")
def sources():
    if zipfile.is_zipfile(sub):
        z = zipfile.ZipFile(sub)
        return {n.split("/")[-1]: z.read(n).decode() for n in z.namelist()
                if n.endswith(".py") and "student/" in n}
    for base in [sub] + [os.path.join(sub, d) for d in sorted(os.listdir(sub))]:
        pkg = os.path.join(base, "student")
        if os.path.isdir(pkg):
            return {n: open(os.path.join(pkg, n)).read() for n in os.listdir(pkg) if n.endswith(".py")}
    sys.exit("fake grader: no student/")
src = sources()
time.sleep(float(os.environ.get("FAKE_GRADER_SLEEP", "0")))
result = {"submission": sub, "score": 0.0, "max_score": 0.0, "gpu_points_not_run": 0.0, "execution_time": 0.1,
          "sandbox": "none", "profile": "dev", "problems": []}
for name in problems:
    text = src.get(name + ".py", "")
    if "# HANG" in text:
        time.sleep(1000)
    if "# CRASH" in text:
        os._exit(3)
    try:
        compile(text, name, "exec")
        status = "failed" if ("NotImplementedError" in text or "# BUG" in text or not text) else "passed"
        if "# FAULT" in text and not os.environ.get("FAKE_GRADER_MACHINE_FIXED"):
            status = "grader error"
    except SyntaxError:
        status = "error"
    score = 5.0 if status == "passed" else 0.0
    result["problems"].append({"name": name, "section": "1", "score": score, "max_score": 5.0, "status": status,
                               "visibility": "visible", "output": "", "checks": []})
    result["score"] += score
    result["max_score"] += 5.0
tmp = out + ".part"
with open(tmp, "w") as f:
    json.dump(result, f)
os.replace(tmp, out)
'''


@pytest.fixture
def fake_grader(tmp_path, monkeypatch):
    script = tmp_path / "fake_grader.py"
    script.write_text(FAKE_GRADER)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    monkeypatch.setenv(batch.GRADER_ENV, cmd)
    return cmd


def make_sub(root: Path, name: str, precision: str = "x = 1\n", views: str | None = "y = 2\n", *,
             nest: str | None = None, as_zip: bool = False) -> Path:
    """A submission folder (or zip) whose student/ modules hold the given text."""
    folder = root / name
    pkg = folder / nest / "student" if nest else folder / "student"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "precision.py").write_text(precision)
    if views is not None:
        (pkg / "views.py").write_text(views)
    if not as_zip:
        return folder
    archive = root / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(folder).as_posix())
    import shutil

    shutil.rmtree(folder)
    return archive


def run_batch(subs: Path, out: Path, *extra: str, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def read_gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as f:
        return {row["id"]: row for row in csv.DictReader(f)}


def small_class(root: Path) -> dict[str, tuple[str, float]]:
    """Submissions of every kind; returns id -> (status, score)."""
    root.mkdir()
    make_sub(root, "alice")                                                    # 10
    make_sub(root, "bob", views="# BUG\n")                                     # 5
    make_sub(root, "carol", precision="raise NotImplementedError\n", views="raise NotImplementedError\n")  # 0
    make_sub(root, "dave", views="def f(:\n")                                  # syntax error: 5
    make_sub(root, "erin", nest="erin-repo")                                   # one level deep: 10
    make_sub(root, "frank", as_zip=True)                                       # zip: 10
    make_sub(root, "grace", nest="inner", as_zip=True)                         # zip, one level deep: 10
    (root / "heidi").mkdir()                                                   # no student/
    (root / "heidi" / "README.md").write_text("I could not finish\n")
    (root / "ivan.zip").write_bytes(b"PK\x03\x04 this is not really a zip")   # bad zip
    make_sub(root, "judy", views="# CRASH\n")                                  # grader crashes
    (root / "notes.txt").write_text("not a submission")
    return {"alice": ("graded", 10), "bob": ("graded", 5), "carol": ("graded", 0), "dave": ("graded", 5),
            "erin": ("graded", 10), "frank": ("graded", 10), "grace": ("graded", 10), "heidi": ("no student/", 0),
            "ivan": ("bad zip", 0), "judy": ("grader error", 0)}


def test_every_submission_gets_a_row_with_its_reason(tmp_path, fake_grader):
    expected = small_class(tmp_path / "subs")
    out = tmp_path / "out"
    proc = run_batch(tmp_path / "subs", out, "--jobs", "2", "--problems", "precision,views")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    book = read_gradebook(out)
    assert set(book) == set(expected), f"rows {sorted(book)}, expected {sorted(expected)}"
    for sub_id, (status, score) in expected.items():
        row = book[sub_id]
        assert (row["status"], float(row["score"])) == (status, score), f"{sub_id}: {row}"
        assert row["max_score"] == "10", f"{sub_id}: max_score {row['max_score']!r}"
        assert status == "graded" or row["reason"], f"{sub_id}: no reason given for {status}"
        rec = json.loads((out / "results" / f"{sub_id}.json").read_text())
        assert rec["id"] == sub_id and rec["status"] == status
    assert book["bob"]["views"] == "0" and book["bob"]["precision"] == "5"
    assert "exit code 3" in book["judy"]["reason"]
    assert "not a zip" in book["ivan"]["reason"].lower() or "bad zip" in book["ivan"]["reason"]
    # non-TTY: one progress line per graded submission
    assert proc.stdout.count("] ") >= len(expected), proc.stdout
    summary = (out / "summary.md").read_text()
    assert "| precision | 5 |" in summary and "| views | 5 |" in summary, summary
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "tmp").exists() and not list((out / "results").glob(".*"))


def test_rerun_resumes_without_regrading(tmp_path, fake_grader):
    small_class(tmp_path / "subs")
    out = tmp_path / "out"
    assert run_batch(tmp_path / "subs", out, "--jobs", "2").returncode == 0
    first = (out / "gradebook.csv").read_text()
    log = tmp_path / "graded.log"
    # a grader that would crash: any regrade would show up as "grader error"
    # (judy's grader crashed the first time: no verdict, so it is the one regraded)
    proc = run_batch(tmp_path / "subs", out, "--jobs", "2",
                     env={batch.GRADER_ENV: "false", "FAKE_GRADER_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert "resuming: 9 of 10" in proc.stdout, proc.stdout
    assert [r for r in _strip_times((out / "gradebook.csv").read_text()) if r[0] != "judy"] == \
        [r for r in _strip_times(first) if r[0] != "judy"]
    # a truncated results file is incomplete: that submission is regraded (and judy, still without a verdict)
    (out / "results" / "bob.json").write_text('{"batch_version": 1, "id": "bob", "sta')
    proc = run_batch(tmp_path / "subs", out, env={"FAKE_GRADER_LOG": str(log)})
    assert sorted(ln.split()[1] for ln in log.read_text().splitlines()) == ["bob", "judy"]
    assert read_gradebook(out)["bob"]["score"] == "5"


def test_rerun_regrades_a_resubmission_under_the_same_name(tmp_path, fake_grader):
    """Records are keyed by content too: a folder whose files changed, a zip
    replaced by another under the same name, are regraded without --force; an
    unchanged one (its mtime touched) is not."""
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "kept")
    make_sub(subs, "edited", views=None)
    make_sub(subs, "zipped", views=None, as_zip=True)
    out, log = tmp_path / "out", tmp_path / "graded.log"
    assert run_batch(subs, out, "--jobs", "2").returncode == 0
    book = read_gradebook(out)
    assert book["edited"]["score"] == "5" and book["zipped"]["score"] == "5", book
    (subs / "edited" / "student" / "views.py").write_text("y = 2\n")  # the views problem done since
    (subs / "zipped.zip").unlink()
    make_sub(subs, "zipped", as_zip=True)
    os.utime(subs / "kept" / "student" / "precision.py")
    proc = run_batch(subs, out, "--jobs", "2", env={"FAKE_GRADER_LOG": str(log)})
    assert proc.returncode == 0 and "resuming: 1 of 3" in proc.stdout and "2 changed since graded" in proc.stdout, \
        proc.stdout
    assert sorted(ln.split()[1] for ln in log.read_text().splitlines()) == ["edited", "zipped.zip"]  # the staged path
    book = read_gradebook(out)
    assert book["edited"]["score"] == "10" and book["zipped"]["score"] == "10" and book["kept"]["score"] == "10", book


def test_content_hash_sees_what_a_grade_depends_on(tmp_path):
    """A file's bytes, a new file, a renamed one, a link's target change the hash;
    .git and __pycache__ do not."""
    from grader.instructor.records import content_hash

    folder = make_sub(tmp_path, "sub")
    first = content_hash(folder)
    assert content_hash(folder) == first
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "student" / "__pycache__").mkdir()
    (folder / "student" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert content_hash(folder) == first
    hashes = {first}
    (folder / "student" / "notes.txt").write_text("")
    hashes.add(content_hash(folder))
    (folder / "student" / "notes.txt").rename(folder / "student" / "notes.md")
    hashes.add(content_hash(folder))
    os.symlink("precision.py", folder / "student" / "link.py")
    hashes.add(content_hash(folder))
    (folder / "student" / "link.py").unlink()
    os.symlink("views.py", folder / "student" / "link.py")
    hashes.add(content_hash(folder))
    assert len(hashes) == 5


def test_rerun_regrades_what_held_no_verdict(tmp_path, fake_grader):
    """A timeout row, a grader-error row and a graded row with a problem in a
    grader error are regraded by a rerun; the others are kept."""
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "fine")
    make_sub(subs, "faulty", views="# FAULT\n")
    make_sub(subs, "crashy", views="# CRASH\n")
    out, log = tmp_path / "out", tmp_path / "graded.log"
    assert run_batch(subs, out, "--jobs", "2").returncode == 0
    book = read_gradebook(out)
    assert book["faulty"]["status"] == "graded" and book["faulty"]["score"] == "5", book["faulty"]
    assert book["crashy"]["status"] == "grader error", book["crashy"]
    proc = run_batch(subs, out, "--jobs", "2", env={"FAKE_GRADER_LOG": str(log), "FAKE_GRADER_MACHINE_FIXED": "1"})
    assert proc.returncode == 0 and "resuming: 1 of 3" in proc.stdout, proc.stdout
    assert sorted(ln.split()[1] for ln in log.read_text().splitlines()) == ["crashy", "faulty"]
    assert read_gradebook(out)["faulty"]["score"] == "10"


def _strip_times(text: str) -> list[list[str]]:
    rows = list(csv.reader(text.splitlines()))
    col = rows[0].index("wall_time_s")
    return [r[:col] + r[col + 1:] for r in rows]


def test_sigkill_midway_then_rerun_loses_no_row_and_grades_once(tmp_path, fake_grader):
    subs = tmp_path / "subs"
    subs.mkdir()
    for i in range(12):
        make_sub(subs, f"s{i:02d}", views="# BUG\n" if i % 3 == 0 else "y = 2\n")
    out, log = tmp_path / "out", tmp_path / "graded.log"
    env = {**os.environ, "FAKE_GRADER_SLEEP": "0.4", "FAKE_GRADER_LOG": str(log)}
    proc = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), "--jobs", "2"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(list((out / "results").glob("s*.json"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {p.stem for p in (out / "results").glob("s*.json")}
    assert 4 <= len(done_before) < 12, f"kill came too late or too early: {sorted(done_before)}"
    started = [ln.split() for ln in log.read_text().splitlines()]
    # the graders in flight die with the batch (supervisor + PDEATHSIG)
    time.sleep(0.5)
    alive = [pid for pid, _ in started if _alive(int(pid))]
    assert not alive, f"graders still running after the batch was killed: {alive}"
    for p in (out / "results").glob("s*.json"):
        assert batch.load_record(p, p.stem) is not None, f"{p.name} is incomplete after SIGKILL"
    log.write_text("")
    proc2 = subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), "--jobs", "2"],
                           cwd=REPO, env={**env, "FAKE_GRADER_SLEEP": "0"}, capture_output=True, text=True,
                           timeout=120)
    assert proc2.returncode == 0, proc2.stderr
    regraded = sorted(ln.split()[1] for ln in log.read_text().splitlines())
    assert regraded == sorted({f"s{i:02d}" for i in range(12)} - done_before), "graded twice or skipped"
    book = read_gradebook(out)
    assert len(book) == 12
    for i in range(12):
        assert float(book[f"s{i:02d}"]["score"]) == (5.0 if i % 3 == 0 else 10.0), book[f"s{i:02d}"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (dead) parent's reaper is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_timeout_kills_the_grader_and_records_it(tmp_path, fake_grader):
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "hangs", views="# HANG\n")
    make_sub(subs, "fine")
    out, log = tmp_path / "out", tmp_path / "graded.log"
    start = time.monotonic()
    proc = run_batch(subs, out, "--jobs", "2", "--timeout", "3", env={"FAKE_GRADER_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 60
    book = read_gradebook(out)
    assert book["hangs"]["status"] == "timeout" and "3 s" in book["hangs"]["reason"], book["hangs"]
    assert book["fine"]["score"] == "10"
    pids = [int(ln.split()[0]) for ln in log.read_text().splitlines() if ln.endswith("hangs")]
    time.sleep(0.3)
    assert pids and not any(_alive(p) for p in pids), "the hung grader was not killed"


GRADESCOPE_METADATA = """\
---
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '001'
    :email: ada@example.edu
  - :name: Charles Babbage
    :sid: '002'
    :email: charles@example.edu
  :created_at: 2025-04-10 12:00:00.000000000 -07:00
  :score: 0.0
  :status: processed
submission_102:
  :submitters:
  - :name: Grace Hopper
    :sid: '003'
    :email: grace@example.edu
  :created_at: 2025-04-11 09:30:00.000000000 -07:00
  :status: processed
"""


def test_gradescope_export_zip_with_metadata(tmp_path, fake_grader):
    export = tmp_path / "assignment_export"
    export.mkdir()
    make_sub(export, "submission_101")
    # Gradescope keeps what students uploaded: here the files of student/ at the top
    (export / "submission_102").mkdir()
    (export / "submission_102" / "precision.py").write_text("x = 1\n")
    (export / "submission_metadata.yml").write_text(GRADESCOPE_METADATA)
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(export.rglob("*")):
            z.write(p, p.relative_to(tmp_path).as_posix())
    out = tmp_path / "out"
    proc = run_batch(archive, out)
    assert proc.returncode == 0, proc.stderr
    book = read_gradebook(out)
    assert set(book) == {"submission_101", "submission_102"}
    assert book["submission_101"]["name"] == "Ada Lovelace; Charles Babbage"
    assert book["submission_101"]["sid"] == "001; 002" and book["submission_101"]["score"] == "10"
    assert book["submission_102"]["email"] == "grace@example.edu"
    # loose module files are graded as student/ (views.py is missing: those points are lost)
    assert book["submission_102"]["status"] == "graded" and book["submission_102"]["score"] == "5"


def test_parse_gradescope_metadata():
    meta = batch.parse_gradescope_metadata(GRADESCOPE_METADATA)
    assert meta == {
        "submission_101": [{"name": "Ada Lovelace", "sid": "001", "email": "ada@example.edu"},
                           {"name": "Charles Babbage", "sid": "002", "email": "charles@example.edu"}],
        "submission_102": [{"name": "Grace Hopper", "sid": "003", "email": "grace@example.edu"}],
    }


def test_gradescope_metadata_reader_is_yaml_not_a_line_guess(tmp_path, capsys):
    """Quoted scalars are unquoted with their escapes, folded scalars joined, block
    scalars, tags and flow collections never mistaken for submitters; text outside
    the subset is refused with its line, and the batch then leaves names blank."""
    from grader.instructor.gradescope_export import MetadataError, parse_block_yaml

    text = """\
# exported
'submission 7':
  :submitters:
    - :name: "O'Brien \\u00e9"
      :sid: 'it''s'
      :email:
    -
      :name: A long
        name
  :results: !ruby/object:Foo
    :submitters: |
      - :name: not a submitter
    :x: [1, 2,
      3]
submission_8:
  :submitters: []
"""
    assert batch.parse_gradescope_metadata(text) == {
        "submission 7": [{"name": "O'Brien \u00e9", "sid": "it's"}, {"name": "A long name"}],
        "submission_8": [],
    }
    assert parse_block_yaml(text)["submission 7"][":results"][":x"] == "[1, 2, 3]"
    for bad in ("a:\n\tb: 1\n", "a: 'x\n", "a:\n  b: 1\n c: 2\n", "- a\nb: 1\n"):
        with pytest.raises(MetadataError, match="line"):
            parse_block_yaml(bad)
    make_sub(tmp_path, "submission_1")
    (tmp_path / "submission_metadata.yml").write_text("submission_1:\n  :submitters: 'unclosed\n")
    assert [(s.id, s.submitters) for s in batch.discover(tmp_path)] == [("submission_1", [])]
    assert "line 2" in capsys.readouterr().err


def test_shards_partition_the_class_deterministically(tmp_path):
    ids = [f"student-{i}" for i in range(200)]
    shards = [[s for s in ids if batch.shard_index(s, 4) == i] for i in range(4)]
    assert sorted(s for shard in shards for s in shard) == sorted(ids)
    assert all(len(s) > 20 for s in shards), [len(s) for s in shards]
    assert [batch.shard_index(s, 4) for s in ids] == [batch.shard_index(s, 4) for s in ids]
    with pytest.raises(SystemExit):
        batch.main(["x", "--shard", "4/4"])


def test_slurm_array_job_and_merge_equal_one_batch(tmp_path, fake_grader):
    expected = small_class(tmp_path / "subs")
    out = tmp_path / "cluster"
    proc = run_batch(tmp_path / "subs", out, "--slurm", "3", "--jobs", "2", "--problems", "precision,views")
    assert proc.returncode == 0, proc.stderr
    script = (out / "grade.sbatch").read_text()
    assert "#SBATCH --array=0-2" in script and "--shard \"${shard}/3\"" in script
    assert "--problems precision,views" in script and "{{" not in script
    for i in range(3):  # what Slurm does: one task per array index
        task = subprocess.run(["bash", str(out / "grade.sbatch")], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SLURM_ARRAY_TASK_ID": str(i), "SLURM_CPUS_PER_TASK": "1"})
        assert task.returncode == 0, task.stderr
    sizes = [len(read_gradebook(out / "shards" / f"shard-{i}")) for i in range(3)]
    assert sum(sizes) == len(expected), sizes
    merge = subprocess.run(["bash", str(out / "merge.sbatch")], capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    merged = read_gradebook(out)
    assert {k: (v["status"], float(v["score"])) for k, v in merged.items()} == expected
    assert (out / "summary.png").exists() and (out / "summary.md").exists()


def test_merge_refuses_conflicting_shards(tmp_path):
    rec = {"batch_version": 1, "id": "a", "source": "x", "submitters": [], "status": "bad zip", "reason": "r",
           "score": 0.0, "max_score": None, "result": None}
    for d, reason in (("s0", "one"), ("s1", "two")):
        batch.write_json_atomic(tmp_path / d / "results" / "a.json", {**rec, "reason": reason})
    with pytest.raises(SystemExit, match="graded in both"):
        batch.main(["--merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])


def test_staging_never_follows_a_link_and_names_never_share_a_record(tmp_path, fake_grader):
    """Loose handout modules that are links (to the reference, to a classmate), a linked
    student/, a linked zip, a linked submission: rejected, each with its reason, and
    nothing is staged. "a b" and "a_b" get records of their own, also on resume."""
    subs = tmp_path / "subs"
    subs.mkdir()
    classmate = make_sub(subs, "classmate")
    loose = subs / "loose_links"
    loose.mkdir()
    (loose / "precision.py").symlink_to(REPO / "reference" / "precision.py")
    (loose / "views.py").symlink_to(classmate / "student" / "views.py")
    linked_pkg = subs / "linked_student"
    linked_pkg.mkdir()
    (linked_pkg / "student").symlink_to(classmate / "student")
    linked_zip = subs / "linked_zip"
    linked_zip.mkdir()
    make_sub(tmp_path, "elsewhere", as_zip=True)
    (linked_zip / "mine.zip").symlink_to(tmp_path / "elsewhere.zip")
    (subs / "linked_entry").symlink_to(classmate)
    make_sub(subs, "a b", views="# BUG\n")
    make_sub(subs, "a_b")
    out = tmp_path / "out"
    proc = run_batch(subs, out, "--jobs", "2", "--problems", "precision,views")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    book = read_gradebook(out)
    rejected = {k: v["reason"] for k, v in book.items() if v["status"] == "rejected"}
    assert sorted(rejected) == ["linked_entry", "linked_student", "linked_zip", "loose_links"], book
    assert all("symbolic link" in reason or "not regular" in reason for reason in rejected.values()), rejected
    assert all(float(book[k]["score"]) == 0 for k in rejected)
    assert not (out / "staged" / "loose_links" / "student" / "precision.py").exists()
    ids = [k for k in book if k.startswith("a_b")]
    assert len(ids) == 2 and {book[k]["score"] for k in ids} == {"5", "10"}, ids
    sources = {Path(book[k]["source"]).name: book[k]["score"] for k in ids}
    assert sources == {"a b": "5", "a_b": "10"}
    # the resumed batch without "a_b" must not hand its record to anyone else
    shutil.rmtree(subs / "a_b")
    assert run_batch(subs, out, "--jobs", "1", "--problems", "precision,views").returncode == 0
    assert {Path(r["source"]).name: r["score"] for r in read_gradebook(out).values()
            if r["id"].startswith("a_b")}["a b"] == "5"


def test_control_characters_never_reach_the_terminal(tmp_path, monkeypatch):
    """A reason holding escape sequences is printed without them."""
    script = tmp_path / "evil_grader.py"
    script.write_text("import sys\nsys.stderr.write('\\x1b]0;pwned\\x07\\x1b[2Jboom\\n')\nsys.exit(4)\n")
    monkeypatch.setenv(batch.GRADER_ENV, f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "alice")
    out = tmp_path / "out"
    proc = run_batch(subs, out, "--problems", "precision")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "boom" in proc.stdout
    assert "\x1b" not in (out / "gradebook.csv").read_text()


def test_jobs_and_worker_memory_fit_the_free_memory(monkeypatch):
    """--jobs and the per-worker limit shrink so that every worker that can run at once fits."""
    import psutil

    from grader.sandbox import limits

    class VM:
        available = 10 << 30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM)
    jobs, per_worker, message = limits.plan_jobs(8, 8 << 30)
    assert jobs * (limits.TRUSTED_SHARE_BYTES + 2 * per_worker) <= VM.available and "lowered" in message
    assert per_worker >= limits.MIN_WORKER_BYTES and jobs == 1
    VM.available = 200 << 30
    assert limits.plan_jobs(4, 8 << 30) == (4, 8 << 30, "")
    assert limits.worker_slots(8 << 30) == (200 - 1) // 8
    assert limits.fitted_memory_limit(8 << 30) == 8 << 30
    VM.available = 5 << 30
    assert limits.fitted_memory_limit(8 << 30) == limits.MIN_WORKER_BYTES


def test_jobs_share_one_worker_budget(monkeypatch):
    """jobs x problems at once never exceeds min(cores, memory slots)."""
    from grader import util
    from grader.sandbox import limits

    monkeypatch.setattr(util, "cores", lambda: 4)
    monkeypatch.setattr(limits, "worker_slots", lambda memory_bytes: 3)
    assert batch.share_budget(1) == (1, 3)
    assert batch.share_budget(2) == (2, 1)
    assert batch.share_budget(5) == (3, 1)
    monkeypatch.setattr(limits, "worker_slots", lambda memory_bytes: 16)
    assert batch.share_budget(2) == (2, 2)

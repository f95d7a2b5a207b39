"""Batch grading with a fake grader (fast): one row per submission whatever
happens, atomic results, resume (also after SIGKILL) that regrades only what
changed or held no verdict, timeouts, staging that never follows a link, and
a terminal safe from the reasons printed.

The fake grader and the submission builders are in selftest/batching.py;
export layouts are in test_batch_gradescope.py, shards, Slurm scripts,
merging and job sizing in test_batch_planning.py."""

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
from pathlib import Path

from grader.instructor import batch, grading, records
from selftest.batching import (
    REPO,
    fake_grader_fixture,  # noqa: F401 (the fixture fake_grader)
    make_sub,
    read_gradebook,
    run_batch,
    small_class,
)


def test_every_submission_gets_a_row_with_its_reason(tmp_path, fake_grader):
    """Each row says why in its own words, never repeating its status; the
    class summary's counts add up on a class with one of each outcome (graded
    pass and fail, a module that does not import, a bad zip, no student/, a
    grader error, and mfu, a problem run for nobody)."""
    expected = small_class(tmp_path / "subs")
    out = tmp_path / "out"
    proc = run_batch(tmp_path / "subs", out, "--jobs", "2", "--problems", "precision,views,mfu")
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
    assert "not a zip" in book["ivan"]["reason"].lower()
    for row in book.values():  # once "bad zip: bad zip: ..." in the progress lines
        assert not row["reason"].lower().startswith(row["status"]), row
        assert f"{row['status']}: {row['status']}" not in proc.stdout
    assert book["dave"]["reason"] == "does not import: student/views.py, line 1: SyntaxError: invalid syntax; " \
                                     "not graded: views", book["dave"]
    assert (book["alice"]["reason"], book["bob"]["reason"]) == ("full marks", "failed: views")
    assert {row["mfu"] for row in book.values()} == {"not run"}
    _assert_summary_adds_up((out / "summary.md").read_text(), len(expected), not_run_for_all={"mfu"})
    # non-TTY: one progress line per graded submission
    assert proc.stdout.count("] ") >= len(expected), proc.stdout
    summary = (out / "summary.md").read_text()
    assert "| precision | 5 |" in summary and "| views | 5 |" in summary, summary
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "tmp").exists() and not list((out / "results").glob(".*"))


def _assert_summary_adds_up(summary: str, size: int, not_run_for_all: set[str]) -> None:
    """Every problem row of summary.md: its outcome counts add up to its
    denominator ("of"), which with "not run" is the class; a problem run for
    nobody reads "not run" for its mean and pass rate."""
    from grader.instructor.gradebook import OUTCOMES

    head = next(ln for ln in summary.splitlines() if ln.startswith("| problem |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    rows = [dict(zip(cols, (c.strip() for c in ln.strip("|").split("|")), strict=True))
            for ln in summary.splitlines() if ln.startswith("| ") and not ln.startswith("| problem |")]
    assert rows and set(OUTCOMES) <= set(cols), summary
    for row in rows:
        counted = sum(int(row[k]) for k in OUTCOMES if k != "not run")
        assert counted == int(row["of"]) and int(row["of"]) + int(row["not run"]) == size, row
        if row["problem"] in not_run_for_all:
            assert row["pass rate"] == row["mean score"] == "not run", row
        else:
            assert row["pass rate"].endswith("%"), row


def test_rerun_resumes_without_regrading(tmp_path, fake_grader):
    small_class(tmp_path / "subs")
    out = tmp_path / "out"
    assert run_batch(tmp_path / "subs", out, "--jobs", "2").returncode == 0
    first = (out / "gradebook.csv").read_text()
    log = tmp_path / "graded.log"
    # a grader that would crash: any regrade would show up as "grader error"
    # (judy's grader crashed the first time: no verdict, so it is the one regraded)
    proc = run_batch(tmp_path / "subs", out, "--jobs", "2",
                     env={grading.GRADER_ENV: "false", "FAKE_GRADER_LOG": str(log)})
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


def test_atomic_writes_are_as_readable_as_the_umask_says(tmp_path):
    """Every report, gradebook and similarity file goes through write_atomic:
    the course's staff share its folder, so its mode is 0o666 less the umask
    (mkstemp's 0o600 would leave the group out), for a new file and a replaced one."""
    from grader.util import write_atomic

    target = tmp_path / "out" / "gradebook.csv"
    old = os.umask(0o002)
    try:
        write_atomic(target, "first\n")
        assert target.stat().st_mode & 0o777 == 0o664
        os.umask(0o027)
        write_atomic(target, "second\n")
        assert target.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    assert target.read_text() == "second\n"
    assert [p.name for p in target.parent.iterdir()] == ["gradebook.csv"], "a temporary file was left"


def test_rerun_regrades_what_held_no_verdict_a_bounded_number_of_times(tmp_path, fake_grader):
    """A timeout row, a grader-error row and a result with a problem in a
    grader error (its row says "grader error" too, with the points it did
    get) are regraded by a rerun; the others are kept. A submission that keeps
    ending with no verdict is graded at most MAX_ATTEMPTS times, reruns
    included, and the rerun says so."""
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "fine")
    make_sub(subs, "faulty", views="# FAULT\n")
    make_sub(subs, "crashy", views="# CRASH\n")
    out, log = tmp_path / "out", tmp_path / "graded.log"
    assert run_batch(subs, out, "--jobs", "2").returncode == 0
    book = read_gradebook(out)
    assert book["faulty"]["status"] == "grader error" and book["faulty"]["score"] == "5", book["faulty"]
    assert "views" in book["faulty"]["reason"], book["faulty"]
    assert book["crashy"]["status"] == "grader error", book["crashy"]
    proc = run_batch(subs, out, "--jobs", "2", env={"FAKE_GRADER_LOG": str(log), "FAKE_GRADER_MACHINE_FIXED": "1"})
    assert proc.returncode == 0 and "resuming: 1 of 3" in proc.stdout, proc.stdout
    assert sorted(ln.split()[1] for ln in log.read_text().splitlines()) == ["crashy", "faulty"]
    book = read_gradebook(out)
    assert book["faulty"]["score"] == "10" and book["faulty"]["status"] == "graded", book["faulty"]
    for attempt in (3, 4):  # crashy's third attempt, then none
        log.unlink()
        proc = run_batch(subs, out, "--jobs", "2", env={"FAKE_GRADER_LOG": str(log)})
        graded = log.read_text().split() if log.exists() else []
        assert ("crashy" in graded) == (attempt <= batch.MAX_ATTEMPTS), (attempt, graded)
    assert f"1 left with no verdict after {batch.MAX_ATTEMPTS} attempts" in proc.stdout, proc.stdout
    assert json.loads((out / "results" / "crashy.json").read_text())["attempts"] == batch.MAX_ATTEMPTS


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
        assert records.load_record(p, p.stem) is not None, f"{p.name} is incomplete after SIGKILL"
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
    monkeypatch.setenv(grading.GRADER_ENV, f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
    subs = tmp_path / "subs"
    subs.mkdir()
    make_sub(subs, "alice")
    out = tmp_path / "out"
    proc = run_batch(subs, out, "--problems", "precision")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "boom" in proc.stdout
    assert "\x1b" not in (out / "gradebook.csv").read_text()

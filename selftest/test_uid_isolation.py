"""The uid isolation mode (grader/sandbox/uidsandbox.py): the worker as an unprivileged
uid where bubblewrap cannot run, and the refusal to grade an instructor's
checkout with no isolation at all. The cheats that need filesystem isolation
are graded in this mode too, in selftest/test_cheat_corpus.py."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader.sandbox import isolation as sandbox_mod
from grader.sandbox import uidsandbox
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from selftest.uidmode import REPO, _runs_as, locked_checkout, uid_setup

UID, GID = uidsandbox.worker_ids()


@pytest.fixture(scope="module")
def worker_python() -> str:
    python, why = uid_setup(UID)
    if python is None:
        pytest.skip(why)
    return python


@pytest.fixture
def open_folder():
    """A folder other users may enter (pytest's tmp_path is closed to them)."""
    path = Path(tempfile.mkdtemp(prefix="lab-uid-test-"))
    path.chmod(0o755)
    yield path
    from grader.sandbox.scratch import remove_tree

    remove_tree(path)


def _fake_checkout(root: Path) -> Path:
    """A checkout laid out as an instructor's, world-readable as git leaves it,
    with one world-writable folder."""
    for rel in ("reference/precision.py", "grader/hidden/test_precision_hidden.py", "grader/engine.py",
                "tests/test_precision.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("SECRET = 1\n")
        (root / rel).chmod(0o644)
    for folder in (root, root / "reference", root / "grader", root / "grader" / "hidden"):
        folder.chmod(0o755)
    (root / "tests").chmod(0o777)
    return root


def test_probe_finds_what_the_worker_uid_could_read_and_write(worker_python, open_folder):
    """As the worker's uid, the probe reads the reference and hidden checks of an
    unlocked checkout and writes its world-writable folder; once locked (the
    checkout itself traversable, as when the virtual environment lives in it),
    it does neither, and still reaches a run's working copy and scratch folder."""
    repo = _fake_checkout(open_folder / "checkout")
    wrong = uidsandbox.probe(UID, GID, repo, python=worker_python)
    assert f"it can read {repo / 'reference'}/ (2 entries)" in wrong, wrong
    assert f"{repo / 'grader' / 'hidden'}/ (2 entries)" in wrong, wrong
    assert f"it can write {repo / 'tests'}" in wrong, wrong
    uidsandbox.lock(repo)
    repo.chmod(0o711)
    assert uidsandbox.probe(UID, GID, repo, python=worker_python) == ""
    assert not _runs_as(UID, ["/bin/cat", str(repo / "reference" / "precision.py")])
    assert not _runs_as(UID, ["/usr/bin/touch", str(repo / "tests" / "forged.json")])


def test_worker_uid_cannot_read_reference_nor_write_the_grader(worker_python):
    """This checkout, locked as setup.sh locks it: the worker's uid reads none of
    reference/, grader/hidden/, grader/, and writes nothing of the grader's."""
    with locked_checkout():
        assert uidsandbox.probe(UID, GID, REPO, python=worker_python) == ""
        for secret in ("reference/precision.py", "grader/hidden/test_precision_hidden.py", "grader/engine.py"):
            assert not _runs_as(UID, ["/bin/cat", str(REPO / secret)]), f"uid {UID} read {secret}"
        assert not _runs_as(UID, ["/bin/ls", str(REPO / "grader")])
        for spot in ("grader/results.json", "results.json", "grader/hidden/conftest.py"):
            assert not _runs_as(UID, ["/usr/bin/touch", str(REPO / spot)]), f"uid {UID} wrote {spot}"


@pytest.fixture
def no_isolation(monkeypatch):
    """Neither bubblewrap nor the uid mode works here (as on macOS, or in a
    container without user namespaces where the grader is not root)."""
    monkeypatch.delenv(uidsandbox.ISOLATION_ENV, raising=False)
    monkeypatch.setattr(sandbox_mod, "bwrap_usable", lambda: (False, "bubblewrap unavailable"))
    monkeypatch.setattr(uidsandbox, "uid_isolation", lambda *a: (False, "uid isolation: the grader is not root"))


def test_no_isolation_refuses_an_instructor_checkout(no_isolation, monkeypatch):
    """With the reference and hidden checks on disk and no isolation, "auto"
    refuses, naming the fixes; only an explicit "rlimits" grades; the student
    release (nothing to hide) runs on rlimits and says so."""
    monkeypatch.setattr(uidsandbox, "holds_secrets", lambda repo=REPO: True)
    with pytest.raises(RuntimeError) as refused:
        Sandbox(limits=Limits())
    message = str(refused.value)
    assert "reference" in message and "bubblewrap" in message and "python -m grader.sandbox lock" in message
    assert "--sandbox rlimits" in message
    with pytest.raises(RuntimeError, match="--sandbox uid"):
        Sandbox(limits=Limits(), want="uid")
    assert Sandbox(limits=Limits(), want="rlimits").mode == "rlimits"
    monkeypatch.setenv(uidsandbox.ISOLATION_ENV, "none")
    assert Sandbox(limits=Limits()).mode == "rlimits"
    monkeypatch.delenv(uidsandbox.ISOLATION_ENV)
    monkeypatch.setattr(uidsandbox, "holds_secrets", lambda repo=REPO: False)
    release = Sandbox(limits=Limits())
    assert release.mode == "rlimits" and release.describe().startswith("rlimits only (bubblewrap unavailable")


def test_isolation_is_chosen_by_env_and_bad_values_are_refused(monkeypatch):
    """``$LAB_ISOLATION`` picks the mode "auto" stands for; a mode that does not
    work here is an error, never a silent fallback; a bad value is a ValueError."""
    monkeypatch.setenv(uidsandbox.ISOLATION_ENV, "chroot")
    with pytest.raises(ValueError, match="LAB_ISOLATION"):
        Sandbox(limits=Limits())
    monkeypatch.setenv(uidsandbox.ISOLATION_ENV, "uid")
    monkeypatch.setattr(sandbox_mod, "bwrap_usable", lambda: pytest.fail("uid mode must not fall back to bwrap"))
    monkeypatch.setattr(uidsandbox, "uid_isolation", lambda uid, gid, repo: (False, "uid isolation: it can read X"))
    with pytest.raises(RuntimeError, match="it can read X"):
        Sandbox(limits=Limits())
    monkeypatch.setattr(uidsandbox, "uid_isolation", lambda uid, gid, repo: (True, f"unprivileged uid {uid}"))
    box = Sandbox(limits=Limits())
    assert box.mode == "uid" and box.uid == UID and box.gid == GID
    assert box.credentials() == {"user": UID, "group": GID, "extra_groups": []}
    again = Sandbox.restored(box.mode, box.why, limits=box.limits, cuda=False, uid=box.uid, gid=box.gid)
    assert again.credentials() == box.credentials() and again.describe().startswith(f"unprivileged uid {UID} ")


def test_worker_uid_is_configurable_and_never_root(monkeypatch):
    """``$LAB_WORKER_UID`` fixes the worker's uid (and gid); 0 is refused."""
    monkeypatch.setenv(uidsandbox.WORKER_UID_ENV, "4242:4343")
    assert uidsandbox.worker_ids() == (4242, 4343)
    monkeypatch.setenv(uidsandbox.WORKER_UID_ENV, "0")
    with pytest.raises(ValueError, match="unprivileged"):
        uidsandbox.worker_ids()
    monkeypatch.delenv(uidsandbox.WORKER_UID_ENV)
    uid, gid = uidsandbox.worker_ids()
    assert uid == gid and uidsandbox.UID_BASE <= uid < uidsandbox.UID_BASE + uidsandbox.UID_SLOTS


_WORKER_CHECK = r'''
import json, os, sys, tempfile
from pathlib import Path
from grader.sandbox.limits import Limits
from grader.sandbox.isolation import Sandbox
from grader.staging.workcopy import make_working_copy
from grader.sandbox.errors import Limit
from grader.sandbox.forkserver import ForkServer
from grader.worker.main import ServerConfig
import time

sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30), want="uid")
run = Path(tempfile.mkdtemp(prefix="grader-"))
run.chmod(0o711)
(run / "sub" / "student").mkdir(parents=True)
work = make_working_copy(run / "sub" / "student", run / "work")
scratch = run / "scratch"
scratch.mkdir()
scratch.chmod(0o777)
server = ForkServer(sandbox, work, scratch, ServerConfig(parent=os.getpid()), 1 << 20)
try:
    server.wait_ready(Limit(cpu=120, wall=time.monotonic() + 600))
    worker = server.spawn(Limit(cpu=120, wall=time.monotonic() + 600))
    worker.wait_ready(Limit(cpu=120, wall=time.monotonic() + 600))
    seen = {}
    for who, pid in (("server", server.server_pid), ("worker", worker.pid)):
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        seen[who] = {"uid": status["Uid"].split(), "gid": status["Gid"].split(), "groups": status["Groups"].split()}
    procs = (worker.cgroup.path / "cgroup.procs").read_text().split() if worker.cgroup is not None else None
    print(json.dumps({**seen, "pid": worker.pid, "procs": procs, "expected": [sandbox.uid, sandbox.gid]}))
    worker.kill()
finally:
    server.kill()
'''


def test_uid_worker_runs_as_its_uid_without_groups_in_its_pids_cgroup(worker_python):
    """A fork server and the worker it forks in uid mode are, seen from /proc,
    the worker's uid and gid in all four slots (real, effective, saved,
    filesystem), with no supplementary group, and the worker is (where a pids
    cgroup can be made) inside its own cgroup: the grader moved it there,
    since the uid cannot."""
    with locked_checkout():
        proc = subprocess.run([worker_python, "-c", _WORKER_CHECK], cwd=REPO, capture_output=True, text=True,
                              timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    uid, gid = seen["expected"]
    assert uid >= uidsandbox.UID_BASE
    for who in ("server", "worker"):
        assert seen[who]["uid"] == [str(uid)] * 4 and seen[who]["gid"] == [str(gid)] * 4, seen
        assert seen[who]["groups"] == [], seen
    assert seen["procs"] is None or str(seen["pid"]) in seen["procs"], seen
    print(f"worker: uid {uid}, gid {gid}, pids cgroup: {'yes' if seen['procs'] is not None else 'not here'}")


_USER_NAME_CHECK = r'''
import subprocess, sys
from pathlib import Path
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits

sandbox = Sandbox(limits=Limits(), want="uid")
argv, env, _ = sandbox.command(Path(sys.argv[1]), Path(sys.argv[1]), ["fork-server"])
proc = subprocess.run([argv[0], "-I", "-c", "import getpass; print(getpass.getuser())"], cwd="/", env=env,
                      capture_output=True, text=True, timeout=120, **sandbox.credentials())
print(proc.returncode, proc.stdout.strip(), proc.stderr.strip().splitlines()[-1:])
'''


def test_uid_worker_has_a_user_name_without_a_passwd_entry(worker_python, open_folder):
    """The worker's uid has no passwd entry; in the uid mode's environment,
    getpass.getuser() (which torch's inductor cache folder asks, and which
    stopped every fork server under torch 2.11) still names a user."""
    with pytest.raises(KeyError):
        pwd.getpwuid(UID)
    with locked_checkout():
        proc = subprocess.run([worker_python, "-c", _USER_NAME_CHECK, str(open_folder)], cwd=REPO,
                              capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[:2] == ["0", sandbox_mod.WORKER_USER], proc.stdout


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="uid isolation: Linux, as root")
def test_working_copy_and_scratch_belong_to_one_grading(open_folder):
    """After hand_over, the worker's uid reads its working copy (read-only) and
    writes its scratch folder; the uid of another grading on the machine does
    neither (no copying a classmate's code, no tampering with its files)."""
    work, scratch = open_folder / "work", open_folder / "scratch"
    (work / "student").mkdir(parents=True)
    (work / "student" / "precision.py").write_text("ANSWER = 42\n")
    scratch.mkdir()
    scratch.chmod(0o777)
    uidsandbox.hand_over(work, scratch, GID)
    own, other = UID, UID + 1 if UID + 1 < uidsandbox.UID_BASE + uidsandbox.UID_SLOTS else UID - 1
    assert _runs_as(own, ["/bin/cat", str(work / "student" / "precision.py")])
    assert _runs_as(own, ["/usr/bin/touch", str(scratch / "mine")])
    assert not _runs_as(own, ["/usr/bin/touch", str(work / "student" / "forged.py")])
    assert not _runs_as(other, ["/bin/cat", str(work / "student" / "precision.py")])
    assert not _runs_as(other, ["/usr/bin/touch", str(scratch / "theirs")])


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="gives files to another uid (root, Linux)")
def test_the_uids_files_are_counted_past_many_files_of_others(tmp_path, monkeypatch):
    """In uid mode a measured call counts the bytes of the files the worker's
    uid made or changed during it in the host's world-writable folders:
    found in a folder it made, whatever the number of other users' files
    beside it (a busy /tmp), each inode once; a file it made before the call
    counts when the call rewrites it (deleting or overwriting what an earlier
    call left hides nothing); another uid's files are not counted."""
    from grader.sandbox import meter

    uid, other = 64999, 64998
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    for i in range(50):  # more than the walk's cap of the uid's own entries below
        (shared / f"theirs-{i}").write_bytes(b"x" * 4096)
        os.chown(shared / f"theirs-{i}", other, other)
    mine = shared / "mine"
    mine.mkdir()
    os.chown(mine, uid, uid)
    earlier, untouched = mine / "earlier", mine / "untouched"
    for f in (earlier, untouched):
        f.write_bytes(bytes(1 << 20))
        os.chown(f, uid, uid)
    monkeypatch.setattr(meter, "HOST_WRITABLE", (str(shared),))
    watch = meter.StorageWatch(os.getpid(), None, sandboxed=False, owner=uid)
    data = mine / "offload"
    data.write_bytes(os.urandom(1 << 20))
    os.chown(data, uid, uid)
    os.link(data, mine / "again")  # a second name of the same inode
    with open(earlier, "r+b") as f:  # rewritten in place
        f.write(os.urandom(1 << 20))
    (shared / "theirs-new").write_bytes(b"y" * (1 << 20))
    os.chown(shared / "theirs-new", other, other)
    counted = watch.stop()
    assert counted == data.stat().st_blocks * 512 + earlier.stat().st_blocks * 512 >= 2 << 20

"""What the selftests of the uid isolation mode need (grader/sandbox/uidsandbox.py).

:func:`uid_setup` gives an interpreter the worker's uid can run, locks this
checkout for the test's duration (as the Gradescope bundle's setup.sh does),
and says why the mode cannot be tested here instead (a skip reason): not
Linux, not root, no interpreter other users can run, or another checkout's
reference readable by the worker's uid (it would hide nothing).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grader.sandbox import uidsandbox

REPO = Path(__file__).resolve().parent.parent


def _runs_as(uid: int, argv: list[str]) -> bool:
    """Whether ``argv`` exits 0 when run as ``uid`` (and gid ``uid``)."""
    try:
        proc = subprocess.run(argv, user=uid, group=uid, extra_groups=[], cwd="/", capture_output=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def worker_python(uid: int) -> str | None:
    """An interpreter with this one's packages that ``uid`` can run: this one,
    or (when it lives where other users cannot go, e.g. pyenv under /root) a
    virtual environment, made once, of the system's Python of the same version
    that imports this one's site-packages. None when there is neither."""
    if _runs_as(uid, [sys.executable, "-I", "-c", "import torch"]):
        return sys.executable
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.is_file():
        return None
    venv = Path(tempfile.gettempdir()) / f"lab-uid-python-{sys.version_info.major}{sys.version_info.minor}"
    python = venv / "bin" / "python"
    with contextlib.suppress(FileNotFoundError):  # root runs it: never one another user made or may change
        st = venv.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
    # One test process builds it at a time (xdist: two building at once clear each other's files).
    fd = os.open(str(_private_dir() / "python.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with _held(fd):
            if not _runs_as(uid, [str(python), "-I", "-c", "import torch"]):
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run([str(system), "-m", "venv", "--without-pip", "--clear", str(venv)], check=True,
                                   capture_output=True, timeout=300)
                    venv.chmod(0o755)
                    site = Path(subprocess.run(
                        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True).stdout.strip())
                    ours = Path(sysconfig.get_paths()["purelib"]).resolve()
                    (site / "_lab_packages.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    finally:
        os.close(fd)
    return str(python) if _runs_as(uid, [str(python), "-I", "-c", "import torch"]) else None


# Run as the worker's uid: every reference/precision.py it can read within a few levels of the places a cheat
# searches (the corpus's read_reference walks these), so the answer is the worker's view, not root's.
_SEARCH = """
import os, sys
found = []
for base in ("/work", "/check", "/home", "/root", "/tmp", "/srv", "/opt", "/mnt", "/var/tmp"):
    for dirpath, dirs, files in os.walk(base):
        if dirpath.count(os.sep) >= 7:
            dirs[:] = []
        if os.path.basename(dirpath) == "reference" and "precision.py" in files:
            path = os.path.join(dirpath, "precision.py")
            try:
                with open(path, "rb"):
                    found.append(path)
            except OSError:
                pass
print("\\n".join(found))
"""


def other_references(uid: int) -> list[str]:
    """Copies of the reference outside this checkout that ``uid`` can read:
    found by a search run as ``uid`` through the folders where checkouts,
    clones and temporary copies live (a cheat looks there first)."""
    try:
        proc = subprocess.run(["/usr/bin/env", "python3", "-I", "-c", _SEARCH], user=uid, group=uid, extra_groups=[],
                              cwd="/", capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError) as e:
        return [f"(the search as uid {uid} failed: {e})"]
    if proc.returncode != 0:
        return [f"(the search as uid {uid} failed: {proc.stderr.strip()[-200:]})"]
    ours = (REPO / "reference").resolve()
    return [p for p in proc.stdout.split("\n") if p and Path(p).resolve().parent != ours]


@contextlib.contextmanager
def locked_checkout() -> Iterator[None]:
    """This checkout locked (:func:`grader.sandbox.uidsandbox.lock`) while any test
    process of this run needs it (a count under a file lock: xdist runs tests
    in several processes), its modes given back after the last."""
    state = _private_dir() / f"{hashlib.sha256(bytes(REPO)).hexdigest()[:16]}.json"
    fd = os.open(str(state) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with _held(fd):
            record = json.loads(state.read_text()) if state.exists() else {"count": 0, "changed": []}
            record["changed"] += uidsandbox.lock(REPO)
            record["count"] += 1
            state.write_text(json.dumps(record))
        yield
    finally:
        with _held(fd):
            record = json.loads(state.read_text())
            record["count"] -= 1
            if record["count"] <= 0:
                uidsandbox.unlock([tuple(c) for c in record["changed"]])
                state.unlink()
            else:
                state.write_text(json.dumps(record))
        os.close(fd)


def _private_dir() -> Path:
    """This user's folder for the uid selftests' locks and state, kept where
    the workers (which run while the checkout is locked) cannot write."""
    private = Path(tempfile.gettempdir()) / "lab-uid-lock"
    with contextlib.suppress(FileExistsError):
        private.mkdir(mode=0o700)
    st = private.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise RuntimeError(f"{private} is not a private folder of this user")
    return private


@contextlib.contextmanager
def _held(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def uid_setup(uid: int, *, alone: bool = False) -> tuple[str | None, str]:
    """(an interpreter ``uid`` can run, "") where the uid mode can be tested
    here, else (None, why not). ``alone``: also that no other checkout's
    reference is readable to ``uid`` (a cheat would find that one)."""
    if sys.platform != "linux":
        return None, "uid isolation is Linux only"
    if os.geteuid() != 0:
        return None, "uid isolation needs the grader to run as root"
    python = worker_python(uid)
    if python is None:
        return None, (f"no Python that uid {uid} can run ({sys.executable} is in a folder closed to other users, "
                      "and there is no system Python of the same version)")
    others = other_references(uid) if alone else []
    if others:
        return None, (f"another checkout's reference is readable to uid {uid} ({others[0]}): uid isolation hides "
                      "this checkout's only")
    return python, ""

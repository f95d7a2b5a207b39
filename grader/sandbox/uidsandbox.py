"""Isolation by user id: the worker as an unprivileged uid, where bubblewrap cannot run.

Bubblewrap needs user namespaces, which a Docker container without them (the
likely Gradescope case) does not give. There the grader, running as root,
starts each worker with ``setgroups([])``, ``setgid`` and ``setuid`` to an
unprivileged uid of its own (:func:`worker_ids`; no account needed), as
PrairieLearn does. What that uid can reach is what the file permissions let
any other user reach, so this mode rests on three things:

* **The checkout is locked** (:func:`lock`, run by the Gradescope bundle's
  ``setup.sh``, or ``python -m grader.sandbox lock``): every top-level
  entry of the repository but the one holding the interpreter (the virtual
  environment) loses its group and other permissions (``reference/``,
  ``grader/`` with ``grader/hidden``, ``tests/``, ``.git``, ...), and the
  repository folder itself becomes traversable but not listable (``0711``) so
  the virtual environment inside it stays usable. The worker needs nothing of
  the repository: its working copy holds its own copy of the worker script
  and of the public harness.
* **Only the working copy and the scratch folder are open to it**: the run's
  temporary folders are traversable, not listable (``0711``); the trusted
  files in them (the plan, with its hidden seed) are ``0600``, the unpacked
  submission ``0700``; the working copy is root's and read-only to the
  worker's group alone, the scratch folder writable by that group alone
  (:func:`hand_over`), and the trusted tests' ``tmp_path`` folders in it
  writable (:func:`open_pytest_temp_dirs`), as the bwrapped worker's scratch
  bind is.
* **The kernel hides the trusted processes**: ``/proc/PID/cwd``, ``root``,
  ``environ`` and ``fd`` of a root process cannot be followed by another uid,
  and root's processes cannot be signalled or traced by it.

:func:`probe` checks all of it as the worker's uid, in a short process of its
own: it must not read any file of ``reference/`` or ``grader/`` (hidden checks
included), nor list them, nor write anywhere in the repository (or rename it),
nor follow ``/proc/<grader>/cwd``; it must read and write a folder laid out as
the run's. The grader runs it once per run and uses this mode only when it
passes (:func:`uid_isolation`).

What this mode does not hide: files elsewhere on the machine that are
world-readable (another checkout of the course repository, a copy of the
reference under ``/tmp``): keep the grading machine to the one locked
checkout, as Gradescope's image is. (The optimizers' worker alone also
restricts itself with Landlock, where the kernel has it, to keep it from
torch.optim's own files: :meth:`grader.sandbox.isolation.Sandbox.seals_optim`.) Workers of one run share the uid (one
submission); each run (each ``python -m grader``, so each submission of a
batch) takes its own uid, so one submission's worker cannot signal, trace or
read another's.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.util import REPO

__all__ = ["ISOLATION_ENV", "MODES", "WORKER_UID_ENV", "hand_over", "holds_secrets", "lock", "open_pytest_temp_dirs",
           "probe", "requested_mode", "uid_isolation", "unlock", "worker_ids"]

#: Environment variable choosing the sandbox where the command line does not
#: (``--sandbox auto``): one of :data:`MODES` (``none`` is ``rlimits``).
ISOLATION_ENV = "LAB_ISOLATION"
MODES = ("auto", "bwrap", "uid", "rlimits")
#: Environment variable fixing the worker's uid (``UID`` or ``UID:GID``).
WORKER_UID_ENV = "LAB_WORKER_UID"
#: Default uids: one per grading process, from a range Debian reserves and no
#: distribution hands out (60000-64999), within a container's usual 65536-uid map.
UID_BASE, UID_SLOTS = 60000, 5000


def requested_mode(want: str) -> str:
    """The sandbox asked for: ``want``, or for "auto" ``$LAB_ISOLATION`` (if set).
    Raises ValueError for a value not in :data:`MODES` (``none``: rlimits)."""
    if want == "auto":
        want = os.environ.get(ISOLATION_ENV, "").strip().lower() or "auto"
        want = "rlimits" if want == "none" else want
    if want not in MODES:
        raise ValueError(f"unknown sandbox {want!r} (${ISOLATION_ENV} or --sandbox: one of {', '.join(MODES)}, none)")
    return want


def worker_ids() -> tuple[int, int]:
    """(uid, gid) the workers of this grading process run as: ``$LAB_WORKER_UID``
    (``UID`` or ``UID:GID``), else one of :data:`UID_SLOTS` uids from
    :data:`UID_BASE` chosen by this process's id (concurrent gradings on one
    machine have distinct pids, so distinct uids, but for a one-in-5000 clash)."""
    value = os.environ.get(WORKER_UID_ENV, "").strip()
    if value:
        uid_text, _, gid_text = value.partition(":")
        try:
            ids = int(uid_text), int(gid_text or uid_text)
        except ValueError:
            raise ValueError(f"${WORKER_UID_ENV} must be UID or UID:GID, got {value!r}") from None
        if min(ids) <= 0:
            raise ValueError(f"${WORKER_UID_ENV} must name an unprivileged uid and gid (not 0), got {value!r}")
        return ids
    uid = UID_BASE + os.getpid() % UID_SLOTS
    return uid, uid


def holds_secrets(repo: Path = REPO) -> bool:
    """Whether ``repo`` holds what a submission must never read: the reference
    or the hidden checks (an instructor's checkout, not the student release)."""
    return (repo / "reference").exists() or (repo / "grader" / "hidden").exists()


def _interpreter_entry(repo: Path) -> str | None:
    """The top-level entry of ``repo`` that holds the running interpreter (its
    virtual environment), which the worker must be able to run; else None."""
    for prefix in (sys.prefix, str(Path(sys.executable).parent.parent)):
        with contextlib.suppress(ValueError):
            return Path(prefix).relative_to(repo).parts[0]
    return None


def lock(repo: Path = REPO) -> list[tuple[str, int]]:
    """Make ``repo`` unreadable and unwritable to every other user but for its
    interpreter: each top-level entry but the virtual environment (and links,
    which are not followed) loses its group and other permissions, and the
    folder itself becomes ``0711`` (traversable, not listable) when the
    interpreter lives in it, else ``0700``. Returns the (path, mode) pairs
    changed, their old modes, for :func:`unlock`."""
    repo = repo.resolve()
    keep = _interpreter_entry(repo) or _interpreter_entry(Path(os.path.abspath(REPO)))
    changed: list[tuple[str, int]] = []

    def set_mode(path: Path, mode: int) -> None:
        old = stat.S_IMODE(path.lstat().st_mode)
        if old != mode:
            changed.append((str(path), old))
            os.chmod(path, mode)

    for entry in sorted(repo.iterdir()):
        if entry.name == keep or entry.is_symlink():
            continue
        set_mode(entry, stat.S_IMODE(entry.lstat().st_mode) & ~0o077)
    set_mode(repo, 0o711 if keep else 0o700)
    return changed


def unlock(changed: list[tuple[str, int]]) -> None:
    """Give back the modes :func:`lock` changed."""
    for path, mode in reversed(changed):
        with contextlib.suppress(OSError):
            os.chmod(path, mode)


#: The probe, run as the worker's uid: prints a JSON list of what is wrong.
_PROBE = r"""
import json, os, sys
args = json.loads(sys.argv[1])
wrong = []
for path in args["secret"]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
        wrong.append("it can read " + path)
    except OSError:
        pass
seen = 0
for top in args["unwritable"]:
    if os.access(top, os.W_OK):
        wrong.append("it can write " + top)
for root, dirs, files in os.walk(args["repo"]):
    for name in dirs + files:
        path = os.path.join(root, name)
        seen += 1
        if not os.path.islink(path) and os.access(path, os.W_OK):
            wrong.append("it can write " + path)
    if seen > 50000 or len(wrong) > 20:
        break
cwd = "/proc/%d/cwd" % args["grader"]
try:
    os.listdir(cwd)
    wrong.append("it can follow " + cwd + " (the grader's folder)")
except OSError:
    pass
try:
    with open(args["readable"], "rb") as f:
        f.read()
    probe = os.path.join(args["writable"], "probe")
    with open(probe, "w") as f:
        f.write("x")
    os.unlink(probe)
except OSError as e:
    wrong.append("it cannot reach its working copy and scratch folder in the temporary folder "
                 + args["tempdir"] + " (" + e.__class__.__name__ + ": " + str(e.strerror) + ")")
print(json.dumps(wrong))
"""


def _secret_paths(repo: Path) -> list[str]:
    """Folders and files of ``repo`` the worker must not read: ``reference/``,
    ``grader/`` (``grader/hidden`` included) and the files in them (at most 400)."""
    out: list[str] = []
    for top in (repo / "reference", repo / "grader", repo / "grader" / "hidden"):
        if top.is_dir():
            out.append(str(top))
            out += [str(p) for p in sorted(top.glob("*.py"))[:200]]
    if (repo / ".git").is_dir():
        out.append(str(repo / ".git"))
    return out


def probe(uid: int, gid: int, repo: Path = REPO, python: str = sys.executable) -> str:
    """What the worker's uid can do that it must not (``""``: nothing), checked
    by a process running as ``uid``/``gid`` with no supplementary groups: read
    or list ``reference/``, ``grader/`` or ``grader/hidden`` of ``repo``, write
    anything in ``repo`` or rename it, follow ``/proc/<this process>/cwd``;
    and whether it can reach a folder laid out in the temporary folder as the
    run's (a ``0711`` folder holding a readable working copy and a writable
    scratch folder). ``python`` is the worker's interpreter (this one)."""
    base = Path(tempfile.mkdtemp(prefix="grader-probe-"))
    try:
        base.chmod(0o711)
        (base / "work").mkdir(mode=0o755)
        (base / "work").chmod(0o755)
        readable = base / "work" / "file"
        readable.write_text("x")
        readable.chmod(0o644)
        (base / "scratch").mkdir()
        (base / "scratch").chmod(0o777)
        site = [p for p in sys.path if p.endswith("-packages") and Path(p).is_dir()]
        args = {"secret": _secret_paths(repo), "repo": str(repo),
                "unwritable": [str(repo), str(repo.parent), sys.prefix, *site],
                "grader": os.getpid(), "readable": str(readable), "writable": str(base / "scratch"),
                "tempdir": tempfile.gettempdir()}
        try:
            proc = subprocess.run([python, "-I", "-c", _PROBE, json.dumps(args)], user=uid, group=gid,
                                  extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            hint = (": the interpreter must lie in folders other users may enter (not, say, pyenv under /root)"
                    if isinstance(e, PermissionError) else "")
            return f"the interpreter cannot run as uid {uid} ({type(e).__name__}: {e}){hint}"
        if proc.returncode != 0:
            return f"the probe as uid {uid} failed (status {proc.returncode}): {proc.stderr.strip()[-300:]}"
        try:
            wrong = json.loads(proc.stdout)
        except ValueError:
            return f"the probe as uid {uid} said nothing readable"
        return _summary(wrong, repo)
    finally:
        from grader.sandbox.scratch import remove_tree

        with contextlib.suppress(OSError):
            remove_tree(base)


def _summary(wrong: list[str], repo: Path) -> str:
    """The probe's findings, short: what it read per secret folder, the first
    paths it could write, then the rest."""
    tops = sorted((str(repo / t) for t in ("reference", "grader", "grader/hidden", ".git")), key=len, reverse=True)
    read: dict[str, int] = {}
    written: list[str] = []
    other: list[str] = []
    for line in wrong:
        if line.startswith("it can read "):
            path = line.removeprefix("it can read ")
            top = next((t for t in tops if path == t or path.startswith(t + "/")), path)
            read[top] = read.get(top, 0) + 1
        elif line.startswith("it can write "):
            written.append(line.removeprefix("it can write "))
        else:
            other.append(line)
    parts = [f"it can read {top}/ ({n} entries)" for top, n in read.items()]
    if written:
        parts.append("it can write " + ", ".join(written[:3]) + (f" (and {len(written) - 3} more)"
                                                                 if len(written) > 3 else ""))
    return "; ".join(parts + other)


def fix_hint() -> str:
    """How an instructor makes uid isolation work (said when it does not)."""
    return ("lock the checkout (python -m grader.sandbox lock: the reference, hidden checks and grader "
            "become unreadable to other users) and grade as root")


@functools.lru_cache(maxsize=4)
def uid_isolation(uid: int, gid: int, repo: Path = REPO) -> tuple[bool, str]:
    """Whether workers may run as ``uid``/``gid`` here, isolated by the
    permissions (probed once per process): Linux, the grader is root, and
    :func:`probe` finds nothing wrong. The second value says why not."""
    if sys.platform != "linux":
        return False, "uid isolation: Linux only"
    if os.geteuid() != 0:
        return False, "uid isolation: the grader is not root"
    wrong = probe(uid, gid, repo)
    if wrong:
        return False, f"uid isolation: as uid {uid}, {wrong[:600]}"
    return True, f"unprivileged uid {uid}"


def hand_over(work: Path, scratch: Path, gid: int) -> None:
    """Give the working copy and the scratch folder to the worker's group
    ``gid`` alone: the working copy ``root:gid``, folders ``0750``, files
    ``0640`` (read-only to the worker); the scratch folder ``root:gid 0770``.
    Other users, the workers of another grading on this machine among them
    (each grading has its own uid and gid), can neither read this submission
    nor write into its scratch folder, which the trusted tests read back."""
    for path in [work, *work.rglob("*")]:
        if path.is_symlink():
            continue
        os.chown(path, 0, gid)
        path.chmod(0o750 if path.is_dir() else 0o640)
    os.chown(scratch, 0, gid)
    scratch.chmod(0o770)


def open_pytest_temp_dirs() -> None:
    """Let a uid-isolated worker use the trusted tests' ``tmp_path`` folders, as
    a bwrapped one does (the scratch folder is bound read-write): pytest makes
    them ``0700``; from now on this process's :class:`pytest.TempPathFactory`
    makes them ``0777`` (they live in the scratch folder, which is)."""
    import pytest

    factory = pytest.TempPathFactory
    if getattr(factory, "_opened_for_worker", False):
        return
    getbasetemp, mktemp = factory.getbasetemp, factory.mktemp

    def opened_base(self: pytest.TempPathFactory) -> Path:
        path = getbasetemp(self)
        path.chmod(0o777)
        return path

    def opened(self: pytest.TempPathFactory, basename: str, numbered: bool = True) -> Path:
        path = mktemp(self, basename, numbered)
        path.chmod(0o777)
        return path

    factory.getbasetemp, factory.mktemp = opened_base, opened  # type: ignore[method-assign]
    factory._opened_for_worker = True  # type: ignore[attr-defined]

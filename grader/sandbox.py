"""Where and how the submission's code runs: a working copy and a sandbox.

The working copy (:func:`make_working_copy`) is a fresh folder holding only the
submission's ``student/`` (regular files, capped), the public harness the worker
needs (``tests/__init__.py``, ``tests/wire.py``, ``tests/harness.py``,
``tests/scenarios/``) and the worker script: nothing of ``reference/`` or of
``grader/hidden``.

The sandbox (:class:`Sandbox`) builds the worker's command line. With
bubblewrap (``bwrap``) usable, the worker sees a new root holding read-only
binds of what Python needs (``/usr``, the interpreter prefix, the virtual
environment), the working copy (read-only, at ``/submission``), a small tmpfs
``/tmp``, and the trusted tests' scratch folder (read-write, at its own path, so a
path a test passes means the same file on both sides); no network, its own
PID/IPC/UTS namespaces, no capabilities, a new session, and it dies with its
parent. Everywhere, the worker lowers its rlimits (CPU time, address space,
file size, open files, core dumps) and on Linux installs a seccomp filter that
refuses to create processes, before it imports submission code. A problem
whose checks need a child process (rubric ``processes = N``) gets a worker
without that filter, capped by RLIMIT_NPROC at the user's current task count
plus N (which the kernel does not enforce for root).
Without a usable bwrap (macOS, containers without user namespaces) only those
last measures remain, and every report says so.

What holds for root too: the seccomp filter (mandatory where the platform has
it), a pids cgroup per worker where one can be made (:class:`PidsCgroup`), the
scratch folder's caps checked from the trusted side (:class:`ScratchWatch`),
and the memory budget (:func:`worker_slots`, :func:`fitted_memory_limit`,
:func:`plan_jobs`): the limits of all the workers that can run at once fit the
free memory. :func:`remove_tree` removes what a submission left without
recursing or following links; :func:`printable` strips terminal controls.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER_SCRIPT = "_grader_worker.py"
MOUNT = "/submission"

#: Caps on what is copied from a submission's student/ folder.
MAX_FILES = 2000
MAX_BYTES = 64 << 20
MAX_DEPTH = 32


class SubmissionError(Exception):
    """The submission cannot be graded (no student/, too big, unreadable)."""


#: Data (RLIMIT_DATA: heap and anonymous writable mappings) of the trusted
#: pytest process (public tests, hidden checks, the reference's oracle
#: computations). Measured: grading the reference on every problem peaks at
#: 1.2 GiB of address space (1189 MiB VmPeak, 471 MiB resident), so 4 GiB
#: leaves room; a reply that would need more is refused before (tests.wire's
#: logical-size bounds) or ends the run with an error.
TRUSTED_MEMORY_BYTES = 4 << 30
#: What the trusted process is counted for in the memory budget (resident).
TRUSTED_SHARE_BYTES = 1 << 30
#: A worker's address space never goes below this (torch alone maps about
#: 1.5 GiB): below it, grading waits or runs fewer jobs instead.
MIN_WORKER_BYTES = 3 << 30


@dataclass(frozen=True)
class Limits:
    """Resources of one worker process (one per problem), and of what all the
    workers of a run share: the scratch folder (bytes actually allocated on
    disk, entries, depth), checked from the trusted side while calls run."""

    memory_bytes: int = 8 << 30
    cpu_seconds: int = 600
    file_bytes: int = 16 << 30  # sparse token files of the data checks are big
    open_files: int = 1024
    tmpfs_bytes: int = 256 << 20
    scratch_bytes: int = 1 << 30
    scratch_entries: int = 20_000
    scratch_depth: int = 64
    trusted_memory_bytes: int = TRUSTED_MEMORY_BYTES

    def rlimits(self, gpu: bool) -> dict[str, int]:
        out = {"CPU": self.cpu_seconds, "FSIZE": self.file_bytes, "NOFILE": self.open_files, "CORE": 0}
        # CUDA maps huge virtual ranges; the address-space cap would break it.
        if not gpu:
            out["AS"] = self.memory_bytes
        return out


# Terminal escape sequences (CSI, OSC up to BEL or ST, other ESC pairs), C0/C1
# controls but newline and tab, and the bidirectional overrides that reorder
# what a reader sees.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` without terminal control sequences (what a submission's
    exception message could use to rewrite a terminal or a report): escape
    sequences and control characters are dropped, ``\\n`` and ``\\t`` kept."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def worker_slots(memory_limit_bytes: int, trusted: int = 1) -> int:
    """How many workers of ``memory_limit_bytes`` fit in the memory this machine
    has free now, once ``trusted`` trusted pytest processes have their share.

    The kernel does not reserve what an rlimit allows, so this is the promise
    the grader keeps instead: it never starts more workers at once than this
    (the spare worker only when it fits, ``batch --jobs`` capped).
    """
    import psutil

    free = psutil.virtual_memory().available - trusted * TRUSTED_SHARE_BYTES
    return max(0, int(free // max(1, memory_limit_bytes)))


def fitted_memory_limit(configured_bytes: int, workers: int = 2, trusted: int = 1) -> int:
    """The per-worker address-space limit: ``configured_bytes`` or, on a smaller
    machine, what lets ``workers`` workers (a problem's and the spare) fit in
    the free memory; never below :data:`MIN_WORKER_BYTES`."""
    import psutil

    free = psutil.virtual_memory().available - trusted * TRUSTED_SHARE_BYTES
    return max(MIN_WORKER_BYTES, min(configured_bytes, int(free // max(1, workers))))


def plan_jobs(jobs: int, configured_bytes: int) -> tuple[int, int, str]:
    """(jobs, per-worker bytes, message) for ``jobs`` graders run at once, each
    a trusted process and up to two workers (a problem's and the spare), so
    that all their limits fit the free memory: the per-worker limit is lowered
    first (never below :data:`MIN_WORKER_BYTES`), then the number of jobs."""
    import psutil

    free = psutil.virtual_memory().available
    want = max(1, jobs)
    n = want
    while n > 1 and (free - n * TRUSTED_SHARE_BYTES) // (2 * n) < MIN_WORKER_BYTES:
        n -= 1
    per_worker = max(MIN_WORKER_BYTES, min(configured_bytes, int((free - n * TRUSTED_SHARE_BYTES) // (2 * n))))
    message = ""
    if n < want:
        message = (f"--jobs {want} lowered to {n}: {free / (1 << 30):.1f} GiB of memory is free, and each grader "
                   f"needs {TRUSTED_SHARE_BYTES / (1 << 30):g} GiB plus two workers of at least "
                   f"{MIN_WORKER_BYTES / (1 << 30):g} GiB")
    elif per_worker < configured_bytes:
        message = (f"each worker's memory limit lowered to {per_worker / (1 << 30):.1f} GiB so that {n} graders "
                   f"fit in the {free / (1 << 30):.1f} GiB free")
    return n, per_worker, message


def remove_tree(path: Path | str) -> None:
    """Remove ``path`` and everything below it, iteratively and fd-relatively.

    A submission controls what is in its scratch folder and what its zip
    unpacks to: folders thousands deep (recursive removers hit the recursion
    limit, paths pass PATH_MAX), folders without permissions, symlinks to
    anything. This never recurses, never follows a symlink (it unlinks it),
    holds two descriptors at a time, and makes each folder writable before
    emptying it. Raises ``OSError`` if something cannot be removed.
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow
    os.chmod(path, 0o700)
    fd = os.open(path, flags)
    names: list[str] = []  # the path from ``path`` down to the folder ``fd`` is
    try:
        while True:
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o700)
            child = None
            with os.scandir(fd) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if child is not None:
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700, dir_fd=fd)  # known to be a folder, not a link
                sub = os.open(child, flags, dir_fd=fd)
                os.close(fd)
                fd, names = sub, [*names, child]
                continue
            if not names:
                break
            parent = os.open("..", flags & ~nofollow, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)  # emptied: an error here stops the removal
    finally:
        os.close(fd)
    os.rmdir(path)


def scratch_usage(path: Path | str, max_entries: int, max_depth: int) -> tuple[int, int, int]:
    """(bytes allocated on disk, entries, deepest level) under ``path``, walked
    without following links and without recursion. Stops counting once
    ``max_entries`` or ``max_depth`` is passed (the caller only needs to know
    that it was), so one call costs at most ``max_entries`` stats and
    ``max_depth`` open descriptors."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        top = os.open(path, flags)
    except OSError:
        return 0, 0, 0
    total = entries = deepest = 0
    stack: list[tuple[int, int]] = [(top, 0)]
    try:
        while stack:
            fd, depth = stack.pop()
            try:
                deepest = max(deepest, depth)
                if depth > max_depth or entries > max_entries:
                    continue
                with os.scandir(fd) as it:
                    for entry in it:
                        entries += 1
                        if entries > max_entries:
                            break
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
                        if stat.S_ISDIR(st.st_mode):
                            if depth + 1 > max_depth:
                                deepest = max(deepest, depth + 1)
                                continue
                            with contextlib.suppress(OSError):
                                stack.append((os.open(entry.name, flags, dir_fd=fd), depth + 1))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return total, entries, deepest


class ScratchWatch:
    """Watches the scratch folder the workers share (the one place a bwrapped
    worker can write on the host disk) from the trusted side, every
    ``interval`` seconds, and calls ``over(reason)`` while it holds more than
    the limits allow (bytes allocated, entries, depth). The callback kills the
    workers; what they wrote stays bounded by the limit plus what one worker
    writes in one interval, and is removed with the run's folder."""

    def __init__(self, scratch: Path, limits: Limits, over: Callable[[str], None], interval: float = 0.5) -> None:
        self.scratch, self.limits, self.over, self.interval = scratch, limits, over, interval
        self.peak_bytes = self.peak_entries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scratch-watch", daemon=True)

    def start(self) -> ScratchWatch:
        self._thread.start()
        return self

    def check(self) -> str:
        """Measure once; the reason the scratch folder is over its limits, or ""."""
        lim = self.limits
        used, entries, depth = scratch_usage(self.scratch, lim.scratch_entries, lim.scratch_depth)
        self.peak_bytes, self.peak_entries = max(self.peak_bytes, used), max(self.peak_entries, entries)
        if used > lim.scratch_bytes:
            return f"the scratch folder holds more than {lim.scratch_bytes >> 20} MiB"
        if entries > lim.scratch_entries:
            return f"the scratch folder holds more than {lim.scratch_entries} files and folders"
        if depth > lim.scratch_depth:
            return f"the scratch folder is more than {lim.scratch_depth} folders deep"
        return ""

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            reason = self.check()
            if reason:
                self.over(reason)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def pids_limit(processes: int) -> int:
    """Tasks (processes and threads: the kernel counts both) a worker's pids
    cgroup allows: torch's thread pools (a few per CPU), bwrap, and the
    ``processes`` the rubric grants."""
    return 64 + 3 * (os.cpu_count() or 1) + processes


class PidsCgroup:
    """A pids cgroup for one worker, where this process may make one (root
    with cgroup v1, or a delegated cgroup v2 subtree): unlike RLIMIT_NPROC,
    its ``pids.max`` binds root too. ``create`` returns None elsewhere (then
    the seccomp filter, mandatory on Linux x86_64/aarch64, is what stops
    processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_tasks: int) -> PidsCgroup | None:
        parent = _pids_parent()
        if parent is None:
            return None
        _remove_stale_cgroups(parent)
        path = parent / f"grader-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(max_tasks))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup: a shell moves itself in, then execs it."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def close(self) -> None:
        """Kill whatever is left in it and remove it (a cgroup whose killed
        tasks are still exiting after a few seconds is removed later)."""
        for _ in range(250):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                threading.Event().wait(0.02)  # killed tasks take a moment to leave
        _PENDING.append(self.path)


#: Cgroups whose tasks were still exiting when their worker was closed.
_PENDING: list[Path] = []


def _remove_stale_cgroups(parent: Path) -> None:
    """Empty cgroups left by graders that were killed before removing theirs,
    or by this one when their tasks took long to exit."""
    for path in list(_PENDING):
        with contextlib.suppress(OSError):
            path.rmdir()
            _PENDING.remove(path)
    with contextlib.suppress(OSError):
        for d in parent.glob("grader-*-*"):
            pid = d.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    d.rmdir()  # refused while a task is still in it


@functools.lru_cache(maxsize=1)
def _pids_parent() -> Path | None:
    """The folder of this process's pids cgroup, if it can hold new cgroups."""
    if sys.platform != "linux":
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):  # cgroup v1
            base = Path("/sys/fs/cgroup/pids") / rel.lstrip("/")
            if base.is_dir() and os.access(base, os.W_OK):
                return base
    for line in lines:
        if line.startswith("0::"):  # cgroup v2: the pids controller must be enabled below us
            base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            if "pids" in enabled and os.access(base, os.W_OK):
                return base
    return None


def make_working_copy(student: Path, dest: Path) -> Path:
    """Fill ``dest`` with the submission's ``student/`` and the public harness."""
    if not student.is_dir():
        raise SubmissionError(f"no student/ folder in the submission ({student})")
    dest.mkdir(parents=True, exist_ok=True)
    files = total = 0
    for root, dirs, names in os.walk(student, followlinks=False):
        rel = Path(root).relative_to(student)
        if len(rel.parts) >= MAX_DEPTH:  # before os.walk recurses into thousands of levels
            raise SubmissionError(f"student/ is more than {MAX_DEPTH} folders deep")
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (Path(root) / d).is_symlink())
        (dest / "student" / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(names):
            src = Path(root) / name
            st = src.lstat()
            if not stat.S_ISREG(st.st_mode) or name.endswith((".pyc", ".pyo")):
                continue  # symlinks, devices, FIFOs: never followed
            files, total = files + 1, total + st.st_size
            if files > MAX_FILES or total > MAX_BYTES:
                raise SubmissionError(f"student/ is too big (more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB)")
            shutil.copyfile(src, dest / "student" / rel / name, follow_symlinks=False)
    if not (dest / "student" / "__init__.py").is_file():
        (dest / "student" / "__init__.py").write_text("")
    tests = dest / "tests"
    (tests / "scenarios").mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "wire.py", "harness.py"):
        shutil.copyfile(REPO / "tests" / name, tests / name)
    for src in sorted((REPO / "tests" / "scenarios").glob("*.py")):
        shutil.copyfile(src, tests / "scenarios" / src.name)
    shutil.copyfile(Path(__file__).with_name("worker.py"), dest / WORKER_SCRIPT)
    for path in [dest, *dest.rglob("*")]:  # world-readable, read-only for the worker
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _python_roots() -> list[str]:
    """Folders the interpreter and its packages live in."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent.parent)}
    for p in sys.path:  # site-packages outside the prefixes (e.g. --user installs are off: -I)
        if p and "site-packages" in p and Path(p).is_dir():
            roots.add(p)
    keep = sorted(r for r in roots if r and Path(r).is_dir() and r != "/usr" and not r.startswith("/usr/"))
    # Drop nested roots (bound through their parent) and the repository itself.
    out: list[str] = []
    for r in keep:
        if any(r.startswith(o.rstrip("/") + "/") for o in out) or r == "/":
            continue
        if Path(REPO).resolve() == Path(r).resolve() or str(REPO.resolve()).startswith(r.rstrip("/") + "/"):
            continue  # never expose the repository (a venv inside it is bound on its own)
        out.append(r)
    return out


def _worker_env(gpu: bool) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
           "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}
    if gpu:
        for key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
            if key in os.environ:
                env[key] = os.environ[key]
    return {k: v for k, v in env.items() if v}


@functools.lru_cache(maxsize=1)
def bwrap_usable() -> tuple[bool, str]:
    """Whether bubblewrap works here (probed once by running ``bwrap ... true``)."""
    exe = shutil.which("bwrap")
    if sys.platform != "linux" or exe is None:
        return False, "bubblewrap unavailable"
    probe = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             *_root_binds(), "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bubblewrap unusable ({e})"
    if proc.returncode != 0:
        return False, f"bubblewrap unusable ({proc.stderr.strip()[:200]})"
    return True, "bubblewrap"


def _root_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(d), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    return args


@dataclass
class Sandbox:
    """How workers are started; ``mode`` is "bwrap" or "rlimits"."""

    limits: Limits = field(default_factory=Limits)
    gpu: bool = False
    want: str = "auto"  # auto | bwrap | rlimits
    mode: str = field(init=False)
    why: str = field(init=False)

    def __post_init__(self) -> None:
        ok, why = bwrap_usable() if self.want != "rlimits" else (False, "rlimits requested")
        if self.want == "bwrap" and not ok:
            raise RuntimeError(f"--sandbox bwrap: {why}")
        self.mode, self.why = ("bwrap", why) if ok else ("rlimits", why)

    def describe(self, seccomp: str | None = None) -> str:
        extra = "" if seccomp is None else f", seccomp {seccomp}"
        if self.mode == "bwrap":
            return f"bubblewrap (no network, private filesystem) + rlimits{extra}"
        return f"rlimits only ({self.why}){extra}"

    def command(self, work: Path, scratch: Path, in_fd: int, out_fd: int,
                config: str) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) that start a worker on the working copy ``work``."""
        python = [sys.executable, "-I"]
        env = _worker_env(self.gpu)
        if self.mode != "bwrap":
            config = json.dumps({**json.loads(config), "parent": os.getpid()})
            return [*python, str(work / WORKER_SCRIPT), str(in_fd), str(out_fd), config], env, str(work)
        # Mounts apply in order: the tmpfs /tmp comes first so that binds below
        # /tmp (a checkout and its venv cloned under /tmp, pytest's tmp_path)
        # land on top of it instead of being hidden by it.
        args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL", *_root_binds(), "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.limits.tmpfs_bytes), "--tmpfs", "/tmp"]
        for root in _python_roots():
            args += ["--ro-bind", root, root]
        venv = Path(sys.prefix)
        if str(venv) not in _python_roots():
            args += ["--ro-bind", str(venv), str(venv)]
        for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/passwd", "/etc/group", "/etc/localtime",
                  "/etc/nsswitch.conf", "/etc/alternatives"):
            args += ["--ro-bind-try", f, f]
        args += ["--ro-bind", str(work), MOUNT, "--bind", str(scratch), str(scratch), "--chdir", MOUNT]
        if self.gpu:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind", str(dev), str(dev)]
            args += ["--ro-bind-try", "/sys", "/sys"]
        args += ["--", *python, f"{MOUNT}/{WORKER_SCRIPT}", str(in_fd), str(out_fd), config]
        return args, env, str(work)

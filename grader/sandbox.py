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
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER_SCRIPT = "_grader_worker.py"
MOUNT = "/submission"

#: Caps on what is copied from a submission's student/ folder.
MAX_FILES = 2000
MAX_BYTES = 64 << 20


class SubmissionError(Exception):
    """The submission cannot be graded (no student/, too big, unreadable)."""


@dataclass(frozen=True)
class Limits:
    """Resources of one worker process (one per problem)."""

    memory_bytes: int = 8 << 30
    cpu_seconds: int = 600
    file_bytes: int = 16 << 30  # sparse token files of the data checks are big
    open_files: int = 1024
    tmpfs_bytes: int = 256 << 20

    def rlimits(self, gpu: bool) -> dict[str, int]:
        out = {"CPU": self.cpu_seconds, "FSIZE": self.file_bytes, "NOFILE": self.open_files, "CORE": 0}
        # CUDA maps huge virtual ranges; the address-space cap would break it.
        if not gpu:
            out["AS"] = self.memory_bytes
        return out


def worker_slots(memory_limit_bytes: int) -> int:
    """How many workers of ``memory_limit_bytes`` each fit in the memory available
    now (at least 1): the cap on problems (and submissions) graded at once."""
    import psutil

    return max(1, int(psutil.virtual_memory().available // max(1, memory_limit_bytes)))


def make_working_copy(student: Path, dest: Path) -> Path:
    """Fill ``dest`` with the submission's ``student/`` and the public harness."""
    if not student.is_dir():
        raise SubmissionError(f"no student/ folder in the submission ({student})")
    dest.mkdir(parents=True, exist_ok=True)
    files = total = 0
    for root, dirs, names in os.walk(student, followlinks=False):
        rel = Path(root).relative_to(student)
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

"""The sandbox: the command line that starts a worker.

:class:`Sandbox` builds the worker's command line (:meth:`Sandbox.command`) in
one of three modes: bubblewrap (``bwrap``, where :func:`bwrap_usable`), an
unprivileged uid of its own on a locked checkout (:mod:`grader.sandbox.uidsandbox`,
probed before use), or rlimits only (the student release, or asked for
explicitly). In bubblewrap mode it lays out the worker's new root: read-only
binds of what Python needs, its own working copy at ``/submission``, sized
tmpfs mounts, a read-only ``/dev``, the scratch folder at its own path, and,
for the optimizers' worker, sealed copies of torch.optim's sources
(:mod:`grader.sandbox.optimseal`). What each mode gives and lacks, what holds
for root, and when the grader refuses to grade: see grader/sandbox/README.md.

The sandbox's parts live in their own modules, which never import this one:
:mod:`grader.sandbox.limits` (limits, memory planning), :mod:`grader.sandbox.scratch` (the
scratch folder's watch and removal), :mod:`grader.sandbox.cgroups` (pids cgroups),
:mod:`grader.staging.workcopy` (the working copy); import their names from them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.sandbox import uidsandbox
from grader.sandbox.limits import (
    Limits,
)
from grader.sandbox.optimseal import SealedOptim, carve
from grader.staging.workcopy import WORKER_SCRIPT
from grader.util import REPO
from grader.worker.confine import landlock_abi
from grader.worker.main import WorkerConfig

__all__ = ["MOUNT", "WORKER_USER", "Sandbox", "bwrap_usable"]

MOUNT = "/submission"


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


#: The user name every sandbox's worker sees (LOGNAME and USER).
WORKER_USER = "worker"


def _worker_env(cuda: bool) -> dict[str, str]:
    # One CPU thread: the checks' tensors are small, and a CPU budget means the
    # same on a busy machine only when no thread pool spins waiting for
    # siblings that the machine does not run (OpenMP's busy-waits cost CPU time).
    threads = os.environ.get("OMP_NUM_THREADS", "") if cuda else "1"
    # A user name of its own: the uid mode's worker uid has no passwd entry, and
    # getpass.getuser() (torch's inductor cache folder asks it, before torch
    # 2.13 without a fallback) raises KeyError without LOGNAME or USER.
    # PYTORCH_NVML_BASED_CUDA_CHECK: torch asks NVML, not the CUDA driver,
    # whether CUDA is available (torch.utils.checkpoint asks, in the fork
    # server's warm-up): a fork server that initialised the driver could fork
    # no worker able to use CUDA (torch 2.11's CUDA build marks them "in bad fork").
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
           "LOGNAME": WORKER_USER, "USER": WORKER_USER, "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
           "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if cuda:
        for key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
            if key in os.environ:
                env[key] = os.environ[key]
    return {k: v for k, v in env.items() if v}


def _devices() -> list[str]:
    """The device nodes a Landlock-restricted worker may read and write: every
    entry of ``/dev`` but the shared-memory folders (host memory no limit counts)."""
    return carve(["/dev"], [os.path.realpath(d) for d in ("/dev/shm", "/run/shm", "/dev/mqueue")])


@functools.lru_cache(maxsize=1)
def bwrap_usable() -> tuple[bool, str]:
    """Whether bubblewrap works here (probed once by running ``bwrap ... true``)."""
    exe = shutil.which("bwrap")
    if sys.platform != "linux" or exe is None:
        return False, "bubblewrap unavailable"
    probe = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             *_root_binds(), "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=300)  # once; a busy host is slow
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bubblewrap unusable ({e})"
    if proc.returncode != 0:
        return False, f"bubblewrap unusable ({proc.stderr.strip()[:200]})"
    return True, "bubblewrap"


@functools.lru_cache(maxsize=1)
def _bwrap_help() -> str:
    exe = shutil.which("bwrap")
    try:
        return subprocess.run([exe or "bwrap", "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _pid1_args() -> list[str]:
    """``--as-pid-1`` where this bwrap has it (0.4 and later): the fork server
    runs as its PID namespace's init, with no bwrap reaper beside it, and no
    worker can signal it (init ignores the signals it has no handler for)."""
    return ["--as-pid-1"] if "--as-pid-1" in _bwrap_help() else []


@functools.lru_cache(maxsize=1)
def _no_userns_args() -> list[str]:
    """``--disable-userns`` where this bwrap has it (0.8 and later) and the
    machine lets it make the user namespace that needs: no process of the
    sandbox can make a user namespace of its own (the worker's seccomp filter
    refuses ``unshare`` and ``setns`` everywhere as well)."""
    if "--disable-userns" not in _bwrap_help():
        return []
    args = ["--unshare-user", "--disable-userns"]
    probe = [shutil.which("bwrap") or "bwrap", "--unshare-all", *args, "--die-with-parent", "--new-session",
             "--cap-drop", "ALL", *_root_binds(), "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return args if ok else []


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
    """How workers are started; ``mode`` is "bwrap", "uid" or "rlimits".

    Built with ``want`` ("auto", "bwrap", "uid", "rlimits"; "auto" reads
    ``$LAB_ISOLATION`` first), it decides its mode by probing (once per
    process): bubblewrap, else, as root, an unprivileged uid
    (:mod:`grader.sandbox.uidsandbox`). Asking for a mode that does not work raises
    RuntimeError, and so does "auto" when neither works and this checkout holds
    the reference or hidden checks (a submission could read them): only an
    explicit "rlimits" grades it without filesystem isolation. :meth:`restored`
    rebuilds one whose mode was decided already.
    """

    limits: Limits = field(default_factory=Limits)
    cuda: bool = False  # its workers may use CUDA (the machine has it)
    want: str = "auto"  # auto | bwrap | uid | rlimits
    mode: str = field(init=False)
    why: str = field(init=False)
    uid: int = field(init=False, default=-1)  # the worker's uid and gid (uid mode)
    gid: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        want = uidsandbox.requested_mode(self.want)
        if want == "rlimits":
            self.mode, self.why = "rlimits", "rlimits requested"
            return
        ok, why = bwrap_usable() if want != "uid" else (False, "uid isolation requested")
        if ok:
            self.mode, self.why = "bwrap", why
            return
        if want == "bwrap":
            raise RuntimeError(f"--sandbox bwrap: {why}")
        uid, gid = uidsandbox.worker_ids()
        ok, why_uid = uidsandbox.uid_isolation(uid, gid, REPO)
        if ok:
            self.mode, self.why, self.uid, self.gid = "uid", f"{why_uid}; {why}", uid, gid
            return
        if want == "uid":
            raise RuntimeError(f"--sandbox uid: {why_uid}; {uidsandbox.fix_hint()}")
        if uidsandbox.holds_secrets(REPO):
            raise RuntimeError(
                f"no filesystem isolation for the submission here ({why}; {why_uid}), and this checkout holds the "
                "reference and hidden checks, which it could read or overwrite. Install bubblewrap (with user "
                f"namespaces), or {uidsandbox.fix_hint()}, or pass --sandbox rlimits if you trust the submission "
                "(public checks only)")
        self.mode, self.why = "rlimits", why

    @classmethod
    def restored(cls, mode: str, why: str, *, limits: Limits, cuda: bool, uid: int = -1, gid: int = -1) -> Sandbox:
        """The sandbox another process decided on (the engine, earlier in this
        run): ``mode`` and ``why`` (and the worker's ``uid``/``gid``) as it
        found them, no second probe."""
        if mode not in ("bwrap", "uid", "rlimits"):
            raise ValueError(f"mode must be 'bwrap', 'uid' or 'rlimits', got {mode!r}")
        if mode == "uid" and min(uid, gid) <= 0:
            raise ValueError(f"uid mode needs the worker's unprivileged uid and gid, got {uid}:{gid}")
        sandbox = cls(limits=limits, cuda=cuda, want="rlimits")  # "rlimits": decided without a probe
        sandbox.want, sandbox.mode, sandbox.why, sandbox.uid, sandbox.gid = mode, mode, why, uid, gid
        return sandbox

    def describe(self, seccomp: str | None = None) -> str:
        extra = "" if seccomp is None else f", seccomp {seccomp}"
        if self.mode == "bwrap":
            landlock = " + Landlock" if self.landlocked else ""
            return f"bubblewrap (no network, private filesystem){landlock} + rlimits{extra}"
        if self.mode == "uid":
            landlock = ("Landlock: it writes only to its scratch folder, and the optimizers' worker cannot read "
                        "torch.optim's files" if self.landlocked else
                        "no Landlock: it may write the host's temporary folders, and the optimizers' worker can read "
                        "torch.optim's files")
            return (f"unprivileged uid {self.uid} (no namespaces; the reference, hidden checks and grader "
                    f"unreadable to it; {landlock}) + rlimits{extra}")
        return f"rlimits only ({self.why}){extra}"

    @property
    def landlocked(self) -> bool:
        """Bubblewrap or uid mode on a kernel with Landlock: each worker
        restricts the files it may write (:meth:`worker_config`; in uid mode
        the optimizers' one its reads too)."""
        return self.mode in ("bwrap", "uid") and landlock_abi() >= 1

    @property
    def seals_optim(self) -> bool:
        """Whether the optimizers' worker can be kept from torch.optim's files
        (sealed copies in bubblewrap, Landlock in uid mode): else it has the
        in-process seal only (:func:`grader.worker.seal.seal_torch_optim`)."""
        return self.mode == "bwrap" or self.landlocked

    @staticmethod
    def _sealed_rules(work: Path, sealed_optim: SealedOptim) -> dict[str, list[str]]:
        """What a sealed worker in uid mode may reach once started: the system's
        and the interpreter's folders and its working copy, read-only, without
        torch.optim's algorithm sources and bytecode; the device nodes but the
        shared-memory folders. Nothing writable: no other worker of the
        submission (the same uid, maybe running beside it) can hand it a file
        (its checks write none)."""
        system = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys"]
        read = sealed_optim.readable([*system, *_python_roots(), str(work)])
        return {"read": read, "write": [], "device": _devices()}

    def credentials(self) -> dict[str, Any]:
        """Keyword arguments of :class:`subprocess.Popen` that start the worker
        as its own unprivileged uid and gid, without supplementary groups (uid
        mode; else none)."""
        if self.mode != "uid":
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def wipe(self) -> tuple[str, ...]:
        """The folders a fork server empties before each fork: the sandbox's
        own tmpfs mounts (bwrap mode; elsewhere /tmp is the host's)."""
        return ("/tmp", "/dev/shm") if self.mode == "bwrap" else ()

    def worker_config(self, work: Path, scratch: Path, sealed_optim: SealedOptim | None) -> WorkerConfig:
        """What each worker of a fork server on ``work`` sets for itself: its
        rlimits and, on a kernel with Landlock, the files it may write: its
        scratch folder (and in bubblewrap its sandbox's own ``/tmp`` and
        ``/dev/shm``), the device nodes, nothing of ``/proc`` (no file there
        changes its scheduling or OOM priority), but, for a worker that may use
        CUDA, its own threads' files (the NVIDIA driver names its threads
        through ``/proc/self/task/*/comm``); in uid mode the optimizers' sealed
        worker writes nothing and reads only what :meth:`_sealed_rules` allows.
        A uid-mode worker is not dumpable (no process of its uid may open its
        memory); a bubblewrap one is (a grader of its uid reads its ``/proc``
        files: memory, storage)."""
        config = WorkerConfig(rlimits=self.limits.rlimits(self.cuda),
                              growth=0 if self.cuda else self.limits.growth_bytes, dumpable=self.mode != "uid")
        if not self.landlocked:
            return config
        if self.mode == "uid" and sealed_optim is not None:
            rules = self._sealed_rules(work, sealed_optim)
        else:
            rules = {"write": [str(scratch), *(("/tmp", "/dev/shm") if self.mode == "bwrap" else ())],
                     "device": _devices()}
        if self.cuda:
            rules["write"] = [*rules.get("write", []), "/proc/self/task"]
        return replace(config, landlock=rules)

    def command(self, work: Path, scratch: Path, args: list[str],
                sealed_optim: SealedOptim | None = None) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) that run the worker script on the working copy
        ``work`` with ``args`` (a fork server, or one worker: grader/worker/main.py),
        with ``scratch`` its only writable host folder (bwrap mode; uid mode
        with Landlock). ``sealed_optim``: bind its sealed copies of
        torch.optim's algorithm sources over torch's, and hide torch.optim's
        bytecode (bwrap mode; in uid mode with Landlock each worker keeps itself
        from those files: :meth:`worker_config`)."""
        python = [sys.executable, "-I"]
        env = _worker_env(self.cuda)
        if self.mode != "bwrap":
            if self.mode == "uid":  # its temporary files in the scratch folder, measured and capped
                env.update(HOME=str(scratch), TMPDIR=str(scratch))
            return [*python, str(work / WORKER_SCRIPT), *args], env, str(work)
        # Mounts apply in order: the tmpfs /tmp comes first so that binds below
        # /tmp (a checkout and its venv cloned under /tmp, pytest's tmp_path)
        # land on top of it instead of being hidden by it. Every writable
        # tmpfs is sized (its pages are the machine's shared memory, which no
        # rlimit counts): /dev is made read-only once its device nodes (the
        # GPU's included) are in place, and /dev/shm is a small tmpfs of its
        # own. With --as-pid-1 the fork server is its PID namespace's init: no
        # bwrap helper (which has no seccomp filter) is left for a worker to
        # ptrace, and no worker can signal the server.
        argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL", *_pid1_args(), *_no_userns_args(), *_root_binds(), "--proc", "/proc",
                "--dev", "/dev", "--size", str(self.limits.shm_bytes), "--tmpfs", "/dev/shm",
                "--size", str(self.limits.tmpfs_bytes), "--tmpfs", "/tmp"]
        for root in _python_roots():
            argv += ["--ro-bind", root, root]
        venv = Path(sys.prefix)
        if str(venv) not in _python_roots():
            argv += ["--ro-bind", str(venv), str(venv)]
        if sealed_optim is not None:  # over torch's files: after the binds that hold torch
            for source, dest in sealed_optim.binds():
                argv += ["--ro-bind", str(source), str(dest)]
        for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/passwd", "/etc/group", "/etc/localtime",
                  "/etc/nsswitch.conf", "/etc/alternatives"):
            argv += ["--ro-bind-try", f, f]
        argv += ["--ro-bind", str(work), MOUNT, "--bind", str(scratch), str(scratch), "--chdir", MOUNT]
        if self.cuda:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                argv += ["--dev-bind", str(dev), str(dev)]
            argv += ["--ro-bind-try", "/sys", "/sys"]
        argv += ["--remount-ro", "/dev", "--", *python, f"{MOUNT}/{WORKER_SCRIPT}", *args]
        return argv, env, str(work)

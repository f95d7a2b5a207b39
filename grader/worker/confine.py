"""How a worker confines itself before any submission code runs (sandbox side).

Copied into the working copy beside the worker script as ``_grader_confine.py``
and imported by it (grader/worker/main.py). Like the worker script it imports
only the standard library; the trusted side imports :func:`landlock_abi`,
:data:`LANDLOCK_RIGHTS` and the syscall tables from here (``grader.worker.confine``).

* :func:`set_rlimits`: a worker's own limits (address space, CPU time, file
  size, open files, no core files).
* :func:`forbid` installs the seccomp filter: no new process, no ``ptrace``
  or other process's memory, no new namespace (``unshare``, ``setns``), no
  change of its own scheduling (so a call that waited for a CPU was starved
  by the machine, never by itself) or of its dumpable flag, no
  ``fallocate``, signals only to itself,
  and, for a Landlock-restricted worker, no sockets or System V / POSIX IPC.
* :func:`restrict_files`: Landlock (uid mode): the files it may write (and
  read), no TCP, no abstract sockets or signals outside its domain.

What each protects and why: grader/sandbox/README.md. None of it makes the
verdicts trustworthy (they are computed in the trusted process); it keeps a
hostile submission from harming the machine, the grader's meters or another
worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import resource
import signal
import sys
from typing import Any

# ----------------------------------------------------------------------------- rlimits and process flags

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
_SECCOMP_MODE_FILTER = 2


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def set_rlimits(limits: dict[str, int]) -> None:
    """Set each ``RLIMIT_<name>`` of ``limits`` as both soft and hard limit
    (never above an inherited hard limit; names this platform lacks are skipped)."""
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name}", None)
        if which is None:
            continue
        try:
            _soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # e.g. RLIMIT_AS on macOS
            pass


def limit_growth(growth: int) -> None:
    """Let this process's private writable memory (``RLIMIT_DATA``: the heap
    and every private mapping it writes, thread stacks included) grow by at
    most ``growth`` bytes beyond what it holds now (Linux: ``VmData``)."""
    try:
        with open("/proc/self/status") as f:
            data = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return
    set_rlimits({"DATA": data + growth})


def lift_inherited_data_limit() -> None:
    """The trusted process caps its own data with a soft RLIMIT_DATA, which a
    worker inherits; a worker's own limit is its address space."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))


def die_with(parent: int) -> None:
    """Be killed when the thread that made this process ends (Linux); exit at
    once (status 70) if ``parent`` (0: no check) is already gone."""
    if sys.platform != "linux":
        return
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(70)


def oom_score(adj: int) -> None:
    """Ask the kernel to kill this process first (1000) or later when the
    machine runs out of memory (raising one's own ``oom_score_adj`` needs no
    privilege): the submission's workers go before the processes that hold
    the verdicts."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(adj))


def dumpable(on: bool) -> None:
    """Whether a process of the same uid (without ``CAP_SYS_PTRACE``) may open
    this one's memory (``/proc/PID/mem``, ``process_vm_writev``) and its
    ``/proc`` files that need ptrace access. The fork server turns it off, so no
    worker it forks can change it; a worker turns it back on, so that a
    grader of its own uid can read its ``/proc/PID/root`` and reset its
    high-water mark (Linux)."""
    if sys.platform == "linux":
        _libc().prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0)


# ----------------------------------------------------------------------------- seccomp
# A classic BPF program over struct seccomp_data (linux/seccomp.h):
# ``int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];``
_DATA_NR, _DATA_ARCH = 0, 4


def _arg_low(i: int) -> int:
    """Offset of the low 32 bits of syscall argument ``i`` (little-endian)."""
    return 16 + 8 * i


# Instruction codes (linux/bpf_common.h): class | size | mode, class | op | source.
_BPF_LD, _BPF_JMP, _BPF_RET = 0x00, 0x05, 0x06
_BPF_W, _BPF_ABS, _BPF_K = 0x00, 0x20, 0x00
_BPF_JEQ, _BPF_JGE, _BPF_JSET = 0x10, 0x30, 0x40
_LD_W_ABS = _BPF_LD | _BPF_W | _BPF_ABS
_JEQ_K, _JGE_K, _JSET_K = _BPF_JMP | _BPF_JEQ | _BPF_K, _BPF_JMP | _BPF_JGE | _BPF_K, _BPF_JMP | _BPF_JSET | _BPF_K
_RET_K = _BPF_RET | _BPF_K
# Filter results (linux/seccomp.h).
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_CLONE_THREAD = 0x00010000
_X32_SYSCALL_BIT = 0x40000000


def _errno(code: int) -> int:
    return _RET_ERRNO | code


#: Per architecture: its AUDIT_ARCH value and the numbers of the syscalls the filter names.
SYSCALLS: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "fallocate": 285, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308,
        "sched_setaffinity": 203, "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
        "setpriority": 141, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424, "prctl": 157}),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "fallocate": 47, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268,
        "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118, "sched_setattr": 274,
        "setpriority": 140, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424, "prctl": 167}),
}
#: Channels to other processes that Landlock does not close, refused to a
#: Landlock-restricted worker: sockets (UDP among them), System V shared
#: memory, message queues and semaphores (their ids can be guessed, no path
#: needed), POSIX message queues.
IPC_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {"socket": 41, "socketpair": 53, "shmget": 29, "shmat": 30, "semget": 64, "semop": 65,
               "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "mq_open": 240},
    "aarch64": {"socket": 198, "socketpair": 199, "shmget": 194, "shmat": 196, "semget": 190, "semop": 193,
                "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "mq_open": 180},
}
#: What the filter answers each refused syscall: fork is "try again" (a fork
#: bomb spins without effect), clone3 "not implemented" (so glibc falls back
#: to clone, which creates threads), fallocate "not supported" (it reserves
#: gigabytes faster than the scratch folder's watch looks; posix_fallocate
#: then writes the blocks at the disk's pace), the rest "not permitted".
REFUSED: dict[str, int] = {
    "fork": errno.EAGAIN, "vfork": errno.EAGAIN, "clone3": errno.ENOSYS, "fallocate": errno.EOPNOTSUPP,
    **dict.fromkeys(("ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "sched_setaffinity",
                     "sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority", "tkill",
                     "pidfd_open", "pidfd_send_signal"), errno.EPERM),
}


class _Program:
    """A BPF program with labels: :meth:`jump` names its targets, :meth:`code` resolves them."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.ops.append((_LD_W_ABS, 0, 0, offset))

    def ret(self, value: int) -> None:
        self.ops.append((_RET_K, 0, 0, value))

    def jump(self, code: int, k: int, yes: str | int = 0, no: str | int = 0) -> None:
        """A conditional jump on the accumulator against ``k``: to label ``yes``
        (or that many instructions ahead) when true, ``no`` when false."""
        self.ops.append((code, yes, no, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def code(self) -> list[tuple[int, int, int, int]]:
        def offset(here: int, target: str | int) -> int:
            jump = target if isinstance(target, int) else self.labels[target] - here - 1
            if not 0 <= jump <= 255:
                raise ValueError(f"instruction {here}: a jump of {jump} (classic BPF jumps 0-255 forward)")
            return jump

        return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(self.ops)]


def seccomp_program(machine: str, pid: int, ipc: bool) -> list[tuple[int, int, int, int]]:
    """The filter of a worker whose pid is ``pid``, on ``machine`` (see the
    module docstring; ``ipc``: refuse :data:`IPC_SYSCALLS` too)."""
    audit, nrs = SYSCALLS[machine]
    p = _Program()
    p.load(_DATA_ARCH)
    p.jump(_JEQ_K, audit, yes=1)
    p.ret(_RET_KILL_PROCESS)  # another ABI's syscall numbers mean other syscalls: i386 (int 0x80)
    p.load(_DATA_NR)
    if machine == "x86_64":
        p.jump(_JGE_K, _X32_SYSCALL_BIT, yes="kill")  # the x32 ABI
    refused = {nrs[name]: _errno(code) for name, code in REFUSED.items() if name in nrs}
    if ipc:
        refused.update((nr, _errno(errno.EPERM)) for nr in IPC_SYSCALLS[machine].values())
    for nr, answer in refused.items():
        p.jump(_JEQ_K, nr, no=1)
        p.ret(answer)
    # clone makes a thread (allowed) or a process (CLONE_THREAD unset: refused).
    p.jump(_JEQ_K, nrs["clone"], no=3)
    p.load(_arg_low(0))
    p.jump(_JSET_K, _CLONE_THREAD, yes="allow")
    p.ret(_errno(errno.EAGAIN))
    # Its dumpable flag stays as the worker set it: not dumpable, a grader of
    # its own uid could no longer read its /proc files (memory, storage).
    p.jump(_JEQ_K, nrs["prctl"], no=3)
    p.load(_arg_low(0))
    p.jump(_JEQ_K, _PR_SET_DUMPABLE, no="allow")
    p.ret(_errno(errno.EPERM))
    # Signals to this process only: kill(pid) and rt_sigqueueinfo(pid) with its
    # own pid, 0 (its own process group: it leads a session of its own) or
    # minus its pid; tgkill and rt_tgsigqueueinfo with its own thread group.
    for name in ("kill", "rt_sigqueueinfo"):
        p.jump(_JEQ_K, nrs[name], yes="to_self")
    for name in ("tgkill", "rt_tgsigqueueinfo"):
        p.jump(_JEQ_K, nrs[name], yes="to_own_threads")
    p.ret(_RET_ALLOW)
    p.label("to_self")
    p.load(_arg_low(0))
    p.jump(_JEQ_K, 0, yes="allow")
    p.jump(_JEQ_K, (-pid) & 0xFFFFFFFF, yes="allow")
    p.label("to_own_threads")
    p.load(_arg_low(0))
    p.jump(_JEQ_K, pid, yes="allow")
    p.ret(_errno(errno.EPERM))
    p.label("kill")
    p.ret(_RET_KILL_PROCESS)
    p.label("allow")  # (classic BPF jumps only forward: the shared targets come last)
    p.ret(_RET_ALLOW)
    return p.code()


def seccomp_available() -> bool:
    """Whether this platform has the filter (Linux on x86_64 or aarch64)."""
    return sys.platform == "linux" and platform.machine() in SYSCALLS


def forbid(ipc: bool = False) -> str:
    """Install this process's seccomp filter (:func:`seccomp_program`): "on", else "off"."""
    if not seccomp_available():
        return "off"
    prog = seccomp_program(platform.machine(), os.getpid(), ipc)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    arr = (Filter * len(prog))(*[Filter(*p) for p in prog])
    fprog = Prog(len(prog), arr)
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return "off"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return "off"
    return "on"


# ----------------------------------------------------------------------------- Landlock
# Landlock (Linux 5.13 and later): an unprivileged process gives up, for good,
# every access to files but those it lists. Its access rights, by ABI version:
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_ABI1 = (1 << 13) - 1  # the above, removing and making files, folders, links, devices
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_LL_FILE = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE  # the rights a rule on a file may hold
#: The rights each kind of entry of a worker's Landlock rules grants below its paths.
LANDLOCK_RIGHTS = {"read": _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR,
                   "device": _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR | _LL_WRITE_FILE | _LL_TRUNCATE,
                   "write": _LL_ABI1 | _LL_REFER | _LL_TRUNCATE}
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every arch
_LANDLOCK_CREATE_RULESET_VERSION, _LANDLOCK_RULE_PATH_BENEATH = 1, 1
#: struct landlock_ruleset_attr's later fields: TCP bind and connect (ABI 4),
#: abstract unix sockets and signals (ABI 6), all handled (so none granted).
_LL_NET_ALL, _LL_SCOPE_ALL = 3, 3


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none; Linux only)."""
    if sys.platform != "linux":
        return 0
    return max(0, int(_libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)))


def restrict_files(rules: dict[str, list[str]]) -> str:
    """Let this thread (and the threads and processes it makes from now on)
    reach no TCP port, no abstract unix socket or process outside it, and
    write (and, when ``rules`` has a "read" entry, read) only below the paths
    of ``rules`` (``{"read": [...], "device": [...], "write": [...]}``, rights
    :data:`LANDLOCK_RIGHTS`); and make this process not dumpable, so that no
    process of its uid can open its memory. Returns "on", else why not.
    Irreversible; paths that do not exist are skipped."""
    abi = landlock_abi()
    if abi < 1:
        return "off: the kernel has no Landlock"
    libc = _libc()
    handled = _LL_ABI1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    if "read" not in rules:  # writes only: reading (and executing) stays as the permissions allow
        handled &= ~LANDLOCK_RIGHTS["read"]
    fields = [handled] + ([_LL_NET_ALL] if abi >= 4 else []) + ([_LL_SCOPE_ALL] if abi >= 6 else [])
    ruleset = (ctypes.c_uint64 * len(fields))(*fields)
    fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(ruleset), ctypes.sizeof(ruleset), 0)
    if fd < 0:
        return f"off: landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for kind, paths in rules.items():
            for path in paths:
                try:
                    pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rights = LANDLOCK_RIGHTS[kind] & handled
                    if not os.path.isdir(path):
                        rights &= _LL_FILE
                    rule = PathBeneath(rights, pfd)
                    if libc.syscall(_SYS_LANDLOCK_ADD_RULE, fd, _LANDLOCK_RULE_PATH_BENEATH,
                                    ctypes.byref(rule), 0) != 0:
                        return f"off: landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}"
                finally:
                    os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # required to restrict oneself
            return f"off: no_new_privs: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, fd, 0) != 0:
            return f"off: landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
        # Not dumpable: a process of the same uid outside the domain cannot
        # open its /proc/PID/mem either (Landlock only stops the other way).
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return f"off: not dumpable: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return "on"

"""How a worker confines itself before any submission code runs (sandbox side).

Copied into the working copy beside the worker script as ``_grader_confine.py``
and imported by it (grader/worker/main.py). Like the worker script it imports
only the standard library; the trusted side imports :func:`landlock_abi`,
:data:`LANDLOCK_RIGHTS` and the syscall tables from here (``grader.worker.confine``).

* :func:`set_rlimits`: a worker's own limits (address space, CPU time, file
  size, open files, no core files).
* :func:`forbid` installs the seccomp filter, an allowlist (:data:`ALLOWED`,
  :data:`LIMITED`, :data:`CUDA_ONLY`): threads but no new process, signals
  and limits of its own only, no other process's memory, no namespace, no
  change of anyone's scheduling (so a call that waited for a CPU was starved
  by the machine, never by itself), no io_uring, keyrings, IPC, sockets or
  pipes; everything not listed is refused.
* :func:`restrict_files`: Landlock (where the kernel has it): the files it
  may write (and, for the optimizers' worker in uid mode, read), none of
  ``/proc``'s but a CUDA worker's own threads', no TCP, no abstract sockets
  or signals outside its domain.

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


#: The system calls a worker may make, and why it needs each: the allowlist.
#: Measured (benchmarks/syscalls.py: every call the workers made once their
#: filter was on, grading the reference, the correct corpus and solutions in
#: other styles, in bubblewrap and in uid mode), plus what glibc, Python and
#: torch make on paths those grades did not take (threads, sleeps, signals of
#: its own, file operations of a ``save_checkpoint``). Every other call is
#: refused: with :data:`REFUSED`'s answer, else ``EPERM``. The calls of
#: :data:`LIMITED` are allowed for some arguments only, those of
#: :data:`CUDA_ONLY` only to a worker that may use CUDA. The table in
#: grader/sandbox/README.md lists the same, in words.
ALLOWED: dict[str, str] = {
    **dict.fromkeys(("read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
                     "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl", "flock",
                     "sendfile", "copy_file_range", "fadvise64", "readahead"),
                    "I/O on the descriptors it holds: its request, reply and output pipes, its files"),
    **dict.fromkeys(("open", "openat", "fstat", "stat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
                     "getdents", "getdents64", "readlink", "readlinkat", "access", "faccessat", "faccessat2",
                     "getcwd", "chdir", "fchdir", "umask"),
                    "files: imports, the checks' data, tmp_path; what the sandbox lets it reach"),
    **dict.fromkeys(("mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
                     "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "utimensat", "ftruncate",
                     "truncate", "fsync", "fdatasync"),
                    "writing files where it may (save_checkpoint, save_tokens): measured as storage"),
    **dict.fromkeys(("brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
                     "munlock", "mlock2", "get_mempolicy", "set_mempolicy", "mbind"),
                    "its own memory: allocation, memmaps, NUMA placement (RLIMIT_AS, RLIMIT_DATA, RLIMIT_MEMLOCK)"),
    **dict.fromkeys(("exit", "exit_group", "set_tid_address", "set_robust_list", "rseq", "futex", "sched_yield",
                     "restart_syscall"), "threads: their start, locks and end (torch's and Python's)"),
    **dict.fromkeys(("sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
                     "sched_get_priority_min", "getpriority", "getpid", "gettid", "getppid", "getuid", "geteuid",
                     "getgid", "getegid", "getgroups", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid",
                     "getrlimit", "getrusage", "times", "uname", "sysinfo", "getcpu", "getrandom"),
                    "reading about itself and the machine (CPU count, limits, its own CPU time, random bytes)"),
    **dict.fromkeys(("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
                     "rt_sigsuspend", "sigaltstack", "alarm", "getitimer", "setitimer", "timer_create",
                     "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete"),
                    "signals and timers of its own (Python's signal module, faulthandler)"),
    **dict.fromkeys(("clock_gettime", "clock_getres", "gettimeofday", "time", "clock_nanosleep", "nanosleep",
                     "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
                     "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2"),
                    "clocks, sleeps and waits on its own descriptors"),
    "arch_prctl": "x86_64 thread-local storage",
}
#: Allowed for some arguments only: what each may reach, checked by the filter.
LIMITED: dict[str, str] = {
    "clone": "threads only (CLONE_THREAD): a new process gets EAGAIN",
    "kill": "itself only: its own pid, 0 (its own process group: it leads a session) or minus its pid",
    "rt_sigqueueinfo": "itself only, as kill",
    "tgkill": "its own threads only (its thread group)",
    "rt_tgsigqueueinfo": "its own threads only, as tgkill",
    "prlimit64": "its own limits only (pid 0 or its own): never its fork server's, another worker's",
    "prctl": "the options of PRCTL_OPTIONS: names, its parent-death signal, more filters, reading",
}
#: prctl options a worker may use (linux/prctl.h): never PR_SET_DUMPABLE (a
#: grader of its uid reads its /proc files), PR_SET_PTRACER, PR_SET_MM,
#: PR_SET_TIMERSLACK or core scheduling (its own scheduling).
PRCTL_OPTIONS: dict[str, int] = {
    "PR_SET_PDEATHSIG": 1, "PR_GET_PDEATHSIG": 2, "PR_GET_DUMPABLE": 3, "PR_SET_NAME": 15, "PR_GET_NAME": 16,
    "PR_GET_SECCOMP": 21, "PR_SET_SECCOMP": 22, "PR_CAPBSET_READ": 23, "PR_GET_TIMERSLACK": 30,
    "PR_SET_NO_NEW_PRIVS": 38, "PR_GET_NO_NEW_PRIVS": 39, "PR_GET_THP_DISABLE": 42, "PR_SET_VMA": 0x53564D41,
}
#: Allowed only to a worker that may use CUDA: the NVIDIA driver makes an
#: anonymous file during initialisation, and CUDA fails with error 304
#: without it (NVIDIA/OpenShell issue 1696). Its pages are shared memory no
#: meter of a CPU worker reads: a worker without CUDA gets EPERM.
CUDA_ONLY: dict[str, str] = {"memfd_create": "the NVIDIA driver's initialisation"}
#: Refused with another answer than EPERM: fork is "try again" (a fork bomb
#: spins without effect), clone3 "not implemented" (so glibc falls back to
#: clone, which makes threads), fallocate "not supported" (it reserves
#: gigabytes faster than the scratch folder's watch looks; posix_fallocate
#: then writes the blocks at the disk's pace). Everything else a worker does
#: not need is refused with EPERM, among it: new processes and programs
#: (execve), other processes (ptrace, process_vm_*, pidfd_*, kcmp), its own
#: or anyone's scheduling and priority (sched_set*, setpriority, ioprio_set),
#: namespaces (unshare, setns), io_uring (its operations pass no filter),
#: keyrings, System V and POSIX IPC, sockets and pipes (kernel memory that
#: no meter reads), personality changes, bpf, perf_event_open, userfaultfd,
#: inotify.
REFUSED: dict[str, int] = {"fork": errno.EAGAIN, "vfork": errno.EAGAIN, "clone3": errno.ENOSYS,
                           "fallocate": errno.EOPNOTSUPP}

#: Per architecture: its AUDIT_ARCH value and the numbers of the system calls
#: the filter names or the selftests probe (from the kernel's uapi headers:
#: asm/unistd_64.h on x86_64, asm-generic/unistd.h on aarch64).
SYSCALLS: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
        "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
        "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21,
        "pipe": 22, "select": 23, "sched_yield": 24, "mremap": 25, "msync": 26, "mincore": 27, "madvise": 28,
        "shmget": 29, "shmat": 30, "dup": 32, "dup2": 33, "nanosleep": 35, "getitimer": 36, "alarm": 37,
        "setitimer": 38, "getpid": 39, "sendfile": 40, "socket": 41, "socketpair": 53, "clone": 56, "fork": 57,
        "vfork": 58, "execve": 59, "exit": 60, "kill": 62, "uname": 63, "semget": 64, "semop": 65, "msgget": 68,
        "msgsnd": 69, "msgrcv": 70, "fcntl": 72, "flock": 73, "fsync": 74, "fdatasync": 75, "truncate": 76,
        "ftruncate": 77, "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "rename": 82, "mkdir": 83,
        "rmdir": 84, "link": 86, "unlink": 87, "symlink": 88, "readlink": 89, "chmod": 90, "fchmod": 91,
        "umask": 95, "gettimeofday": 96, "getrlimit": 97, "getrusage": 98, "sysinfo": 99, "times": 100,
        "ptrace": 101, "getuid": 102, "getgid": 104, "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp":
        111, "getgroups": 115, "getresuid": 118, "getresgid": 120, "getpgid": 121, "getsid": 124,
        "rt_sigpending": 127, "rt_sigtimedwait": 128, "rt_sigqueueinfo": 129, "rt_sigsuspend": 130,
        "sigaltstack": 131, "personality": 135, "statfs": 137, "fstatfs": 138, "getpriority": 140,
        "setpriority": 141, "sched_setparam": 142, "sched_getparam": 143, "sched_setscheduler": 144,
        "sched_getscheduler": 145, "sched_get_priority_max": 146, "sched_get_priority_min": 147, "mlock": 149,
        "munlock": 150, "prctl": 157, "arch_prctl": 158, "chroot": 161, "mount": 165, "gettid": 186,
        "readahead": 187, "tkill": 200, "time": 201, "futex": 202, "sched_setaffinity": 203,
        "sched_getaffinity": 204, "epoll_create": 213, "getdents64": 217, "set_tid_address": 218,
        "restart_syscall": 219, "semtimedop": 220, "fadvise64": 221, "timer_create": 222, "timer_settime": 223,
        "timer_gettime": 224, "timer_getoverrun": 225, "timer_delete": 226, "clock_gettime": 228,
        "clock_getres": 229, "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232, "epoll_ctl": 233,
        "tgkill": 234, "mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "mq_open": 240, "add_key": 248,
        "request_key": 249, "keyctl": 250, "ioprio_set": 251, "ioprio_get": 252, "inotify_init": 253,
        "migrate_pages": 256, "openat": 257, "mkdirat": 258, "newfstatat": 262, "unlinkat": 263, "renameat":
        264, "linkat": 265, "symlinkat": 266, "readlinkat": 267, "fchmodat": 268, "faccessat": 269, "pselect6":
        270, "ppoll": 271, "unshare": 272, "set_robust_list": 273, "move_pages": 279, "utimensat": 280,
        "epoll_pwait": 281, "eventfd": 284, "fallocate": 285, "eventfd2": 290, "epoll_create1": 291, "dup3":
        292, "pipe2": 293, "inotify_init1": 294, "preadv": 295, "pwritev": 296, "rt_tgsigqueueinfo": 297,
        "perf_event_open": 298, "prlimit64": 302, "setns": 308, "getcpu": 309, "process_vm_readv": 310,
        "process_vm_writev": 311, "kcmp": 312, "sched_setattr": 314, "renameat2": 316, "seccomp": 317,
        "getrandom": 318, "memfd_create": 319, "bpf": 321, "execveat": 322, "userfaultfd": 323, "mlock2": 325,
        "copy_file_range": 326, "preadv2": 327, "pwritev2": 328, "statx": 332, "rseq": 334, "pidfd_send_signal":
        424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "pidfd_open": 434,
        "clone3": 435, "close_range": 436, "faccessat2": 439, "process_madvise": 440, "epoll_pwait2": 441}),
    "aarch64": (0xC00000B7, {
        "getcwd": 17, "eventfd2": 19, "epoll_create1": 20, "epoll_ctl": 21, "epoll_pwait": 22, "dup": 23,
        "dup3": 24, "fcntl": 25, "inotify_init1": 26, "ioctl": 29, "ioprio_set": 30, "ioprio_get": 31, "flock":
        32, "mkdirat": 34, "unlinkat": 35, "symlinkat": 36, "linkat": 37, "renameat": 38, "mount": 40, "statfs":
        43, "fstatfs": 44, "truncate": 45, "ftruncate": 46, "fallocate": 47, "faccessat": 48, "chdir": 49,
        "fchdir": 50, "chroot": 51, "fchmod": 52, "fchmodat": 53, "openat": 56, "close": 57, "pipe2": 59,
        "getdents64": 61, "lseek": 62, "read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67,
        "pwrite64": 68, "preadv": 69, "pwritev": 70, "sendfile": 71, "pselect6": 72, "ppoll": 73, "readlinkat":
        78, "newfstatat": 79, "fstat": 80, "fsync": 82, "fdatasync": 83, "utimensat": 88, "personality": 92,
        "exit": 93, "exit_group": 94, "set_tid_address": 96, "unshare": 97, "futex": 98, "set_robust_list": 99,
        "nanosleep": 101, "getitimer": 102, "setitimer": 103, "timer_create": 107, "timer_gettime": 108,
        "timer_getoverrun": 109, "timer_settime": 110, "timer_delete": 111, "clock_gettime": 113,
        "clock_getres": 114, "clock_nanosleep": 115, "ptrace": 117, "sched_setparam": 118, "sched_setscheduler":
        119, "sched_getscheduler": 120, "sched_getparam": 121, "sched_setaffinity": 122, "sched_getaffinity":
        123, "sched_yield": 124, "sched_get_priority_max": 125, "sched_get_priority_min": 126,
        "restart_syscall": 128, "kill": 129, "tkill": 130, "tgkill": 131, "sigaltstack": 132, "rt_sigsuspend":
        133, "rt_sigaction": 134, "rt_sigprocmask": 135, "rt_sigpending": 136, "rt_sigtimedwait": 137,
        "rt_sigqueueinfo": 138, "rt_sigreturn": 139, "setpriority": 140, "getpriority": 141, "getresuid": 148,
        "getresgid": 150, "times": 153, "getpgid": 155, "getsid": 156, "getgroups": 158, "uname": 160,
        "getrlimit": 163, "getrusage": 165, "umask": 166, "prctl": 167, "getcpu": 168, "gettimeofday": 169,
        "getpid": 172, "getppid": 173, "getuid": 174, "geteuid": 175, "getgid": 176, "getegid": 177, "gettid":
        178, "sysinfo": 179, "mq_open": 180, "msgget": 186, "msgrcv": 188, "msgsnd": 189, "semget": 190,
        "semtimedop": 192, "semop": 193, "shmget": 194, "shmat": 196, "socket": 198, "socketpair": 199,
        "readahead": 213, "brk": 214, "munmap": 215, "mremap": 216, "add_key": 217, "request_key": 218,
        "keyctl": 219, "clone": 220, "execve": 221, "mmap": 222, "fadvise64": 223, "mprotect": 226, "msync":
        227, "mlock": 228, "munlock": 229, "mincore": 232, "madvise": 233, "mbind": 235, "get_mempolicy": 236,
        "set_mempolicy": 237, "migrate_pages": 238, "move_pages": 239, "rt_tgsigqueueinfo": 240,
        "perf_event_open": 241, "prlimit64": 261, "setns": 268, "process_vm_readv": 270, "process_vm_writev":
        271, "kcmp": 272, "sched_setattr": 274, "renameat2": 276, "seccomp": 277, "getrandom": 278,
        "memfd_create": 279, "bpf": 280, "execveat": 281, "userfaultfd": 282, "mlock2": 284, "copy_file_range":
        285, "preadv2": 286, "pwritev2": 287, "statx": 291, "rseq": 293, "pidfd_send_signal": 424,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "pidfd_open": 434, "clone3":
        435, "close_range": 436, "faccessat2": 439, "process_madvise": 440, "epoll_pwait2": 441}),
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


def seccomp_program(machine: str, pid: int, cuda: bool = False) -> list[tuple[int, int, int, int]]:
    """The filter of a worker whose pid is ``pid``, on ``machine``: the
    allowlist (:data:`ALLOWED`, :data:`LIMITED` with their argument checks,
    :data:`CUDA_ONLY` with ``cuda``), :data:`REFUSED`'s answers, EPERM for
    everything else; any other ABI's call (i386, x32) kills the process.

    Every check is a jump to the next instruction or the one after: a long
    list needs no jump past classic BPF's 255 instructions."""
    audit, nrs = SYSCALLS[machine]
    p = _Program()
    p.load(_DATA_ARCH)
    p.jump(_JEQ_K, audit, yes=1)
    p.ret(_RET_KILL_PROCESS)  # another ABI's syscall numbers mean other syscalls: i386 (int 0x80)
    p.load(_DATA_NR)
    if machine == "x86_64":
        p.jump(_JGE_K, _X32_SYSCALL_BIT, no=1)  # the x32 ABI
        p.ret(_RET_KILL_PROCESS)
    for name, code in REFUSED.items():
        if name in nrs:
            p.jump(_JEQ_K, nrs[name], no=1)
            p.ret(_errno(code))
    for name in [*ALLOWED, *(CUDA_ONLY if cuda else ())]:
        if name in nrs:
            p.jump(_JEQ_K, nrs[name], no=1)
            p.ret(_RET_ALLOW)
    for name in LIMITED:
        if name not in nrs:
            continue
        block = _limited(name, pid)
        p.jump(_JEQ_K, nrs[name], no=len(block))
        p.ops += block  # (every path of a block returns: the calls after it see the number again)
    p.ret(_errno(errno.EPERM))
    return p.code()


def _limited(name: str, pid: int) -> list[tuple[int, str | int, str | int, int]]:
    """The argument check of a :data:`LIMITED` call, each path ending in a return."""
    allow, eperm = (_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _errno(errno.EPERM))
    first = (_LD_W_ABS, 0, 0, _arg_low(0))
    if name == "clone":  # a thread (allowed) or a process (CLONE_THREAD unset: "try again")
        return [first, (_JSET_K, 0, 1, _CLONE_THREAD), allow, (_RET_K, 0, 0, _errno(errno.EAGAIN))]
    if name in ("kill", "rt_sigqueueinfo"):  # to itself: its pid, 0 (its own group) or minus its pid
        return [first, (_JEQ_K, 3, 0, 0), (_JEQ_K, 2, 0, pid), (_JEQ_K, 1, 0, (-pid) & 0xFFFFFFFF), eperm, allow]
    if name in ("tgkill", "rt_tgsigqueueinfo"):  # to its own thread group
        return [first, (_JEQ_K, 1, 0, pid), eperm, allow]
    if name == "prlimit64":  # its own limits: pid 0 or its own
        return [first, (_JEQ_K, 2, 0, 0), (_JEQ_K, 1, 0, pid), eperm, allow]
    if name == "prctl":
        options = list(PRCTL_OPTIONS.values())
        checks = [(_JEQ_K, len(options) - i, 0, k) for i, k in enumerate(options)]
        return [first, *checks, eperm, allow]
    raise ValueError(f"no argument check for {name}")


def seccomp_available() -> bool:
    """Whether this platform has the filter (Linux on x86_64 or aarch64)."""
    return sys.platform == "linux" and platform.machine() in SYSCALLS


def forbid(cuda: bool = False) -> str:
    """Install this process's seccomp filter (:func:`seccomp_program`; ``cuda``:
    it may use CUDA): "on", else "off"."""
    if not seccomp_available():
        return "off"
    prog = seccomp_program(platform.machine(), os.getpid(), cuda)

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
    :data:`LANDLOCK_RIGHTS`; ``/proc`` is a path like any other: its files
    are written only where a rule grants it). Returns "on", else why not.
    Irreversible; paths that do not exist are skipped. (Whether a process of
    its uid outside the domain may open its memory is :func:`dumpable`'s.)"""
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
    finally:
        os.close(fd)
    return "on"

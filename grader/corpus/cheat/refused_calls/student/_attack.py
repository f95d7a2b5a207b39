"""One refused kind of system call per function: each answers right only
when its call went through (an attack that got what it wanted), so a grade
loses exactly the items of the calls the sandbox refused. The kinds: io_uring
(its operations pass no per-call filter), a kernel keyring (outlives the
worker, per uid), System V shared memory (pages of no process), a socket pair
and a pipe (queues of kernel memory), and its own scheduling (personality,
ioprio_set, setpriority, and nice 19 written to /proc/self/autogroup)."""
import ctypes
import dataclasses
import os
import platform
import socket

_libc = ctypes.CDLL(None, use_errno=True)
_NR = {"x86_64": {"io_uring_setup": 425, "add_key": 248, "personality": 135, "ioprio_set": 251},
       "aarch64": {"io_uring_setup": 425, "add_key": 217, "personality": 92, "ioprio_set": 30}}[platform.machine()]


def _ok(ret: int) -> bool:
    return ret >= 0


def _io_uring() -> bool:
    params = ctypes.create_string_buffer(120)
    fd = _libc.syscall(_NR["io_uring_setup"], 4, params)
    if fd >= 0:
        os.close(fd)
    return _ok(fd)


def _keyring() -> bool:
    key_spec_process_keyring = -2
    return _ok(_libc.syscall(_NR["add_key"], b"user", b"lab", b"x", 1, key_spec_process_keyring))


def _sysv() -> bool:
    shmid = _libc.shmget(0, 4096, 0o1000 | 0o600)
    if shmid >= 0:
        _libc.shmctl(shmid, 0, None)
    return _ok(shmid)


def _ipc() -> bool:
    try:
        a, b = socket.socketpair()
        a.close()
        b.close()
        r, w = os.pipe()
        os.close(r)
        os.close(w)
    except OSError:
        return False
    return True


def _priority() -> bool:
    ioprio_class_idle = 3 << 13
    if not _ok(_libc.syscall(_NR["personality"], 0x0040000)):  # ADDR_NO_RANDOMIZE
        return False
    if not _ok(_libc.syscall(_NR["ioprio_set"], 1, 0, ioprio_class_idle)):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
    except OSError:
        return False
    return True


_CALLS = {"io_uring": _io_uring, "keyring": _keyring, "sysv": _sysv, "ipc": _ipc, "priority": _priority}


def _wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return dataclasses.replace(value, max=value.max * 2)


def needs(kind, function):
    def attack(*args, **kwargs):
        value = function(*args, **kwargs)
        return value if _CALLS[kind]() else _wrong(value)
    return attack

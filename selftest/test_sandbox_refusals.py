"""What a worker is refused, probed from inside a real worker, in bubblewrap
and in uid mode: every kind of system call the allowlist leaves out
(grader/worker/confine.py; the table in grader/sandbox/README.md), each
limited call beyond its limit (its fork server's limits, signals to it), and
the files of /proc that would change its scheduling or OOM priority. Each
probe returns "allowed" or the error it got; none may be allowed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

import pytest

from grader.sandbox import uidsandbox
from grader.worker import confine
from selftest.sandboxing import make_impl, needs_bwrap, needs_seccomp
from selftest.uidmode import REPO, locked_checkout, uid_setup

#: A precision module whose bytes_per_element("probe") makes every refused call.
PROBE = r'''
import ctypes, errno, os, platform, resource, socket

_libc = ctypes.CDLL(None, use_errno=True)
_NR = NUMBERS[platform.machine()]


def _syscall(name, *args):
    def run():
        if _libc.syscall(_NR[name], *args) < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return run


def _libc_call(name, *args):
    def run():
        if getattr(_libc, name)(*args) < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return run


def _write(path, text):
    def run():
        with open(path, "w") as f:
            f.write(text)
    return run


def _fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)


def _socket(family):
    return lambda: socket.socket(family, socket.SOCK_STREAM).close()


PROBES = {
    "io_uring_setup": _syscall("io_uring_setup", 4, ctypes.create_string_buffer(120)),
    "add_key": _syscall("add_key", b"user", b"lab", b"x", 1, -2),
    "keyctl": _syscall("keyctl", 0, -2, 0),
    "request_key": _syscall("request_key", b"user", b"lab", None, 0),
    "personality": _syscall("personality", 0x0040000),
    "ioprio_set": _syscall("ioprio_set", 1, 0, 3 << 13),
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, 0, 19),
    "sched_setscheduler": lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)),
    "sched_setaffinity": lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    "shmget": _libc_call("shmget", 0, 4096, 0o1600),
    "semget": _libc_call("semget", 0, 1, 0o1600),
    "msgget": _libc_call("msgget", 0, 0o1600),
    "socket AF_UNIX": _socket(socket.AF_UNIX),
    "socket AF_INET": _socket(socket.AF_INET),
    "socketpair": lambda: [s.close() for s in socket.socketpair()],
    "pipe": lambda: [os.close(fd) for fd in os.pipe()],
    "memfd_create": lambda: os.close(os.memfd_create("lab")),
    "execve": _syscall("execve", b"/nonexistent", None, None),
    "ptrace": _syscall("ptrace", 0, 0, None, None),  # PTRACE_TRACEME
    "process_vm_readv": _syscall("process_vm_readv", os.getpid(), None, 0, None, 0, 0),
    "unshare": _syscall("unshare", 0x10000000),  # CLONE_NEWUSER
    "setns": _syscall("setns", -1, 0),
    "fork": _fork,
    "clone3": _syscall("clone3", None, 0),
    "fallocate": lambda: os.posix_fallocate(os.open("/proc/self/fd/1", os.O_WRONLY), 0, 1),
    "inotify_init1": _syscall("inotify_init1", 0),
    "userfaultfd": _syscall("userfaultfd", 0),
    "pidfd_open": _syscall("pidfd_open", os.getppid(), 0),
    "prlimit64 of its fork server": lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE),
    "kill its fork server": lambda: os.kill(os.getppid(), 0),
    "prctl PR_SET_DUMPABLE": _libc_call("prctl", 4, 1, 0, 0, 0),
    "/proc/self/autogroup": _write("/proc/self/autogroup", "19"),
    "/proc/self/oom_score_adj": _write("/proc/self/oom_score_adj", "0"),
    "/proc/self/comm": _write("/proc/self/comm", "renamed"),
}


def bytes_per_element(what):
    out = {}
    for name, probe in PROBES.items():
        try:
            probe()
            out[name] = "allowed"
        except OSError as e:
            out[name] = errno.errorcode.get(e.errno, str(e.errno))
    return out
'''

#: Probes refused only where the kernel has Landlock (files, not system calls).
LANDLOCK_PROBES = ("/proc/self/autogroup", "/proc/self/oom_score_adj", "/proc/self/comm")
#: The answers the filter gives besides EPERM (confine.REFUSED); (fallocate on a pipe is refused anyway).
ANSWERS = {"fork": "EAGAIN", "clone3": "ENOSYS"}


def _module() -> str:
    numbers = {arch: nrs for arch, (_, nrs) in confine.SYSCALLS.items()}
    return f"NUMBERS = {numbers!r}\n" + textwrap.dedent(PROBE)


def _check(seen: dict[str, str], landlock: bool) -> None:
    allowed = [name for name, answer in seen.items() if answer == "allowed"
               and (landlock or name not in LANDLOCK_PROBES)]
    assert not allowed, f"a worker was allowed: {allowed} ({seen})"
    for name, answer in ANSWERS.items():
        assert seen[name] == answer, (name, seen[name])


@pytest.fixture(scope="module")
def probe_work(tmp_path_factory):
    from grader.staging.workcopy import make_working_copy

    root = tmp_path_factory.mktemp("refusals")
    student = root / "sub" / "student"
    student.mkdir(parents=True)
    (student / "__init__.py").write_text("")
    (student / "precision.py").write_text(_module())
    scratch = root / "scratch"
    scratch.mkdir()
    return make_working_copy(student, root / "work"), scratch


@needs_bwrap
@needs_seccomp
def test_a_bubblewrapped_worker_is_refused_every_call_it_does_not_need(probe_work):
    impl = make_impl(probe_work, want="bwrap")
    try:
        seen = impl.precision.bytes_per_element("probe")
    finally:
        impl.close()
    _check(seen, landlock=confine.landlock_abi() >= 1)


_UID_PROBE = r'''
import json, os, sys, tempfile
from pathlib import Path
from grader.protocol import ProblemSpec
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.remote import RemoteImpl
from grader.sandbox.uidsandbox import hand_over
from grader.staging.workcopy import make_working_copy

sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30), want="uid")
run = Path(tempfile.mkdtemp(prefix="grader-"))
run.chmod(0o711)
(run / "sub" / "student").mkdir(parents=True)
(run / "sub" / "student" / "precision.py").write_text(Path(sys.argv[1]).read_text())
work = make_working_copy(run / "sub" / "student", run / "work")
scratch = run / "scratch"
scratch.mkdir()
hand_over(work, scratch, sandbox.gid)
impl = RemoteImpl("probe", sandbox, work, scratch, [ProblemSpec("precision", 120.0, ())])
impl.enter("precision")
try:
    print(json.dumps(impl.precision.bytes_per_element("probe")))
finally:
    impl.close()
'''


@needs_seccomp
def test_a_uid_mode_worker_is_refused_every_call_it_does_not_need(tmp_path):
    """As a GPU node grades: root, the checkout locked, the worker its own uid."""
    python, why = uid_setup(uidsandbox.worker_ids()[0])
    if python is None:
        pytest.skip(f"uid mode: {why}")
    module = tmp_path / "precision.py"
    module.write_text(_module())
    with locked_checkout():
        proc = subprocess.run([python, "-c", _UID_PROBE, str(module)], cwd=REPO, capture_output=True, text=True,
                              timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(json.loads(proc.stdout.strip().splitlines()[-1]), landlock=confine.landlock_abi() >= 1)


def test_the_sandbox_readme_lists_the_allowlist():
    """grader/sandbox/README.md's table names exactly the calls the filter allows."""
    text = (REPO / "grader" / "sandbox" / "README.md").read_text()
    table = text[text.index("| system calls | what a worker needs them for | limits |"):]
    table = table[: table.index("\n\n")]
    listed = set(re.findall(r"`([a-z_0-9]+)`", "\n".join(line.split("|")[1] for line in table.splitlines()[2:])))
    assert listed == {*confine.ALLOWED, *confine.LIMITED, *confine.CUDA_ONLY}, \
        (listed ^ {*confine.ALLOWED, *confine.LIMITED, *confine.CUDA_ONLY})


def test_the_filter_allows_what_it_lists_and_nothing_else():
    """The program, read back: each allowed number returns ALLOW, each refused
    one its answer, any other EPERM, on both architectures (no jump of it
    reaches past classic BPF's 255 instructions)."""
    for machine, (_, nrs) in confine.SYSCALLS.items():
        for cuda in (False, True):
            prog = confine.seccomp_program(machine, 4242, cuda=cuda)
            assert len(prog) < 4096 and all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in prog)
            allowed = {nrs[n] for n in [*confine.ALLOWED, *(confine.CUDA_ONLY if cuda else ())] if n in nrs}
            direct = {k for code, jt, jf, k in prog if code == 0x15 and jt == 0 and jf == 1}
            assert allowed <= direct, sorted(allowed - direct)
            assert ("memfd_create" in nrs and nrs["memfd_create"] in direct) == cuda
            for name in ("socket", "io_uring_setup", "add_key", "shmget", "execve", "ptrace", "personality"):
                assert nrs[name] not in direct or name in confine.REFUSED, (machine, name)


def test_a_priority_lowered_is_read_from_outside(tmp_path):
    """Where no filter or Landlock stops it (rlimits mode, an old kernel), a
    worker that lowers its own priority makes its wait its own doing, read
    from /proc (grader/sandbox/proctree.py lowered_priority): never the
    machine starving it."""
    import sys

    from grader.sandbox import proctree

    nice = os.getpriority(os.PRIO_PROCESS, 0)
    for code, lowered in (("", False), ("os.nice(5)", True),
                          ("os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))", True)):
        proc = subprocess.Popen([sys.executable, "-c", f"import os, sys, time\n{code}\nprint(1, flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "1"
            assert bool(proctree.lowered_priority(proc.pid, nice)) == lowered, code
        finally:
            proc.kill()
            proc.wait()

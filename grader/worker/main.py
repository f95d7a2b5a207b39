"""The grader's worker: the only process that imports the submission.

This file is copied, as ``_grader_worker.py``, into a fresh working copy that
holds the submission's ``student/`` and the public harness (``tests/wire.py``,
``tests/harness.py``, ``tests/memwatch.py``, ``tests/scenarios/``), and runs there inside the sandbox
(see :mod:`grader.sandbox.isolation`)::

    python -I _grader_worker.py REQUEST_FD REPLY_FD CONFIG_JSON

``CONFIG_JSON`` is a :class:`WorkerConfig` (``WorkerConfig.to_json``); the
trusted side imports that class from here (``grader.worker.main``). This file must
not import anything of ``grader`` (which is not in the working copy), and
imports only the standard library at module level.

Protocol (the one home of the request and reply fields): :mod:`tests.wire`
frames (``wire.read_frame`` / ``wire.write_frame``) of :func:`tests.wire.encode`
bytes, read from ``REQUEST_FD`` and written to ``REPLY_FD`` (never stdout,
which is the submission's log). The first frame the worker writes is a hello
(``{"hello": ...}``); then, for each request
``{"op": "call", "module", "function", "args", "kwargs"}`` or
``{"op": "scenario", "name", "args", "kwargs"}`` it answers
``{"ok": True, "value": ...}`` or ``{"ok": False, "type", "message", "traceback"}``
(``type``: the nearest of ``tests.wire.MAPPED_ERRORS``, else "RemoteError").

Before any submission code is imported the worker lowers its own rlimits,
asks to be killed with its parent, and (on Linux) installs a seccomp filter
(:func:`_forbid_processes`). What these refuse, and that they protect the
machine, not the verdicts (computed in the trusted process): see
grader/sandbox/README.md.

A worker whose first request is about the optimizers (a call of
``student.optimizers`` or a scenario of ``tests.scenarios.optimizers``) seals
torch.optim before it imports the submission (``seal_torch_optim`` of
grader/worker/seal.py, copied beside this file as ``_grader_seal.py``); a
worker that imported the submission for anything else answers no optimizers
request. Why: see grader/README.md, "The trust boundary".
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import platform
import resource
import signal
import sys
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorkerConfig:
    """What the trusted side tells a worker at start (on its command line).

    ``rlimits``: resource names without ``RLIMIT_`` (``{"CPU": 600, "AS": ...}``)
    and the value the worker sets as both its soft and hard limit (never above
    an inherited hard limit). ``cuda``: whether it may report (and use) CUDA.
    ``processes``: how many child processes it may create (0: the seccomp
    filter refuses any). ``parent``: the pid it must die with (0: none; bwrap's
    ``--die-with-parent`` does that job). ``landlock``: the only files it may
    write (and with a "read" entry, read) once started (:func:`restrict_files`;
    empty: no such restriction).
    """

    rlimits: dict[str, int] = field(default_factory=dict)
    cuda: bool = False
    processes: int = 0
    parent: int = 0
    landlock: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        """The config ``to_json`` wrote; raises ValueError/TypeError on anything else."""
        raw = json.loads(text)
        if type(raw) is not dict or set(raw) - {"rlimits", "cuda", "processes", "parent", "landlock"}:
            raise ValueError(f"not a worker config: {text[:200]!r}")
        rlimits = raw.get("rlimits", {})
        landlock = {str(k): [str(p) for p in v] for k, v in dict(raw.get("landlock", {})).items()}
        if set(landlock) - set(LANDLOCK_RIGHTS):
            raise ValueError(f"not a worker config: landlock {sorted(landlock)}")
        return cls(rlimits={str(k): int(v) for k, v in dict(rlimits).items()}, cuda=bool(raw.get("cuda", False)),
                   processes=int(raw.get("processes", 0)), parent=int(raw.get("parent", 0)), landlock=landlock)


def _set_rlimits(limits: dict[str, int]) -> None:
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


def _limit_processes(margin: int) -> None:
    """RLIMIT_NPROC counts every task (threads too) of the real user, system-wide:
    allow the user's current count plus ``margin`` (Linux; root is exempt)."""
    if sys.platform != "linux" or margin <= 0:
        return
    uid, tasks = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    _set_rlimits({"NPROC": tasks + margin})


def _die_with_parent(parent: int) -> None:
    if sys.platform != "linux":
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != parent:  # the parent is already gone
        os._exit(70)


# Seccomp: refuse fork/vfork/clone-without-CLONE_THREAD/clone3 with EAGAIN
# (clone3 with ENOSYS so that glibc falls back to clone for threads), and
# every syscall of a foreign ABI (i386 int 0x80, x32). fallocate gets
# EOPNOTSUPP: it reserves gigabytes of disk in one call, faster than the
# scratch folder's watch looks; posix_fallocate then writes the blocks, at
# the disk's pace, which the watch keeps up with. ptrace gets EPERM: nothing
# the worker could attach to (bwrap's helper, where bwrap lacks --as-pid-1)
# is its business.
_ARCH = {"x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "fallocate": 285,
                                 "ptrace": 101}),
         "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435, "fallocate": 47, "ptrace": 117})}
# A worker restricted by Landlock also gets EPERM from the channels to other
# processes that Landlock does not close: sockets (UDP among them), SysV shared
# memory, message queues and semaphores (their ids can be guessed, no path
# needed), POSIX message queues.
_IPC = {"x86_64": {"socket": 41, "socketpair": 53, "shmget": 29, "shmat": 30, "semget": 64, "semop": 65,
                   "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "mq_open": 240},
        "aarch64": {"socket": 198, "socketpair": 199, "shmget": 194, "shmat": 196, "semget": 190, "semop": 193,
                    "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "mq_open": 180}}


def _forbid_processes(ipc: bool = False) -> str:
    """Install the seccomp filter (see above; ``ipc``: refuse :data:`_IPC`
    too): "on", else "off"."""
    if sys.platform != "linux" or platform.machine() not in _ARCH:
        return "off"
    import ctypes
    import errno

    audit, nrs = _ARCH[platform.machine()]
    allow, eagain = 0x7FFF0000, 0x00050000 | errno.EAGAIN
    enosys = 0x00050000 | errno.ENOSYS
    kill = 0x80000000  # SECCOMP_RET_KILL_PROCESS

    def stmt(code: int, k: int) -> tuple[int, int, int, int]:
        return (code, 0, 0, k)

    def jeq(k: int, jt: int, jf: int) -> tuple[int, int, int, int]:
        return (0x15, jt, jf, k)

    prog = [stmt(0x20, 4), jeq(audit, 1, 0), stmt(0x06, kill), stmt(0x20, 0)]
    if platform.machine() == "x86_64":
        prog += [(0x35, 0, 1, 0x40000000), stmt(0x06, kill)]  # x32 ABI
    prog += [jeq(nrs["clone3"], 0, 1), stmt(0x06, enosys)]
    prog += [jeq(nrs["fallocate"], 0, 1), stmt(0x06, 0x00050000 | errno.EOPNOTSUPP)]
    prog += [jeq(nrs["ptrace"], 0, 1), stmt(0x06, 0x00050000 | errno.EPERM)]
    for nr in _IPC[platform.machine()].values() if ipc else ():
        prog += [jeq(nr, 0, 1), stmt(0x06, 0x00050000 | errno.EPERM)]
    for name in ("fork", "vfork"):
        if name in nrs:
            prog += [jeq(nrs[name], 0, 1), stmt(0x06, eagain)]
    prog += [jeq(nrs["clone"], 0, 3), stmt(0x20, 16), (0x45, 1, 0, 0x00010000), stmt(0x06, eagain)]
    prog += [stmt(0x06, allow)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    arr = (Filter * len(prog))(*[Filter(*p) for p in prog])
    fprog = Prog(len(prog), arr)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return "off"
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        return "off"
    return "on"


# Landlock (Linux 5.13 and later): an unprivileged process gives up, for good,
# every access to files but those it lists. Its access rights, by ABI version:
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_ABI1 = (1 << 13) - 1  # the above, removing and making files, folders, links, devices
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_LL_FILE = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE  # the rights a rule on a file may hold
#: The rights each kind of entry of :attr:`WorkerConfig.landlock` grants below its paths.
LANDLOCK_RIGHTS = {"read": _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR,
                   "device": _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR | _LL_WRITE_FILE | _LL_TRUNCATE,
                   "write": _LL_ABI1 | _LL_REFER | _LL_TRUNCATE}
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every arch


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none; Linux only)."""
    if sys.platform != "linux":
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, 1)))  # LANDLOCK_CREATE_RULESET_VERSION


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
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    handled = _LL_ABI1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    if "read" not in rules:  # writes only: reading (and executing) stays as the permissions allow
        handled &= ~LANDLOCK_RIGHTS["read"]
    # struct landlock_ruleset_attr, as long as this ABI reads it: files; TCP
    # bind and connect (ABI 4; no rule grants them); abstract unix sockets and
    # signals to processes outside the domain (ABI 6).
    fields = [handled] + ([3] if abi >= 4 else []) + ([3] if abi >= 6 else [])
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
                    if libc.syscall(_SYS_LANDLOCK_ADD_RULE, fd, 1, ctypes.byref(rule), 0) != 0:  # PATH_BENEATH
                        return f"off: landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}"
                finally:
                    os.close(pfd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to restrict oneself
            return f"off: no_new_privs: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, fd, 0) != 0:
            return f"off: landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
        # Not dumpable: a process of the same uid outside the domain cannot
        # open its /proc/PID/mem either (Landlock only stops the other way).
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
            return f"off: not dumpable: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return "on"


def _error(e: BaseException) -> dict[str, Any]:
    import builtins

    from tests.wire import MAPPED_ERRORS

    # The nearest builtin base class the trusted side knows (a subclass of
    # ValueError passes ``pytest.raises(ValueError)`` locally, so here too).
    name = next((c.__name__ for c in type(e).__mro__
                 if c.__name__ in MAPPED_ERRORS and getattr(builtins, c.__name__, None) is c), "RemoteError")
    tb_obj = e.__traceback__
    while tb_obj is not None and tb_obj.tb_frame.f_code.co_filename == __file__:
        tb_obj = tb_obj.tb_next  # the worker's own frames are noise to students
    tb = "".join(traceback.format_exception(type(e), e, tb_obj))
    return {"ok": False, "type": name, "original": type(e).__qualname__,
            "message": str(e)[:20_000], "traceback": tb[-20_000:]}


def _about_optimizers(req: dict[str, Any]) -> bool:
    """Whether a request runs the submission's optimizers."""
    if req.get("op") == "call":
        return req.get("module") == "optimizers"
    return str(req.get("name", "")).startswith("tests.scenarios.optimizers:")


def _submission_imported() -> bool:
    return any(name == "student" or name.startswith("student.") for name in sys.modules)


def _lift_inherited_data_limit() -> None:
    """The trusted process caps its own data with a soft RLIMIT_DATA, which
    this process inherits; the worker's own limit is its address space."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))


def _first_to_go() -> None:
    """Ask the kernel to kill this process first when the machine runs out of
    memory (raising one's own ``oom_score_adj`` needs no privilege): the
    submission's worker, never the trusted processes that hold the verdicts."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def main() -> None:
    _first_to_go()
    in_fd, out_fd, config = int(sys.argv[1]), int(sys.argv[2]), WorkerConfig.from_json(sys.argv[3])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.dont_write_bytecode = True
    from tests.memwatch import return_freed_memory

    return_freed_memory()  # resident memory follows live data (memory checks read it from outside)
    _lift_inherited_data_limit()
    _set_rlimits(config.rlimits)
    _die_with_parent(config.parent)
    import numpy  # noqa: F401  (pre-imported: a warm worker answers at once)
    import torch

    from tests import wire
    from tests.harness import HANDOUT_MODULES, Modules, scenario_name

    # Every scenario, resolved from the working copy's harness before any
    # submission code runs: a submission that later rebinds
    # tests.scenarios.x.f does not change what a request runs. (It could still
    # patch these very function objects: nothing in this process is
    # trustworthy once the submission runs, which is why no verdict rests on
    # what a scenario reports about the implementation; see tests/harness.py.)
    scenarios: dict[str, Any] = {}
    for path in sorted(os.listdir(os.path.join(here, "tests", "scenarios"))):
        if path.endswith(".py") and path != "__init__.py":
            module = importlib.import_module(f"tests.scenarios.{path[:-3]}")
            for value in vars(module).values():
                if callable(value) and getattr(value, "__module__", None) == module.__name__ \
                        and not isinstance(value, type) and not value.__name__.startswith("_"):
                    scenarios[scenario_name(value)] = value

    processes = config.processes
    if processes:
        _limit_processes(processes + 64)  # + torch's threads
    sealed_files = "read" in config.landlock  # the optimizers' worker in uid mode (grader/sandbox/optimseal.py)
    seccomp = "off (processes allowed)" if processes else _forbid_processes(ipc=sealed_files)
    if not processes and seccomp != "on" and sys.platform == "linux" and platform.machine() in _ARCH:
        # Mandatory where the platform has it: RLIMIT_NPROC does not bind root
        # (graders often run as root), so without the filter nothing would.
        os.write(2, b"grader worker: the seccomp filter could not be installed; refusing to run\n")
        os._exit(71)
    if config.landlock:  # after every import the harness needs; before any submission code
        if sealed_files:
            # torch.optim.Optimizer imports torch._dynamo on first use, which makes
            # its cache folder on import: done now, while the worker may still write.
            import torch._dynamo

        state = restrict_files(config.landlock)
        if state != "on":  # asked for: the files it would keep from the submission are open
            os.write(2, f"grader worker: Landlock could not restrict its files ({state}); refusing to run\n".encode())
            os._exit(72)
    wire.write_frame(out_fd, wire.encode({"hello": {
        "seccomp": seccomp, "python": sys.version.split()[0], "torch": str(torch.__version__),
        "cuda": bool(torch.cuda.is_available()) if config.cuda else False}}))
    modules = Modules("student")
    sealed = False

    while True:
        body = wire.read_frame(in_fd)
        if body is None:
            return
        req = wire.decode(body)
        try:
            if _about_optimizers(req) and not sealed:
                if _submission_imported():  # too late: the submission may hold torch.optim's originals
                    raise RuntimeError("grader: this worker ran the submission before its optimizers checks; "
                                       "they run in a fresh worker")
                import _grader_seal  # (grader/worker/seal.py, beside this file in the working copy)

                left = _grader_seal.seal_torch_optim()
                if left:
                    raise RuntimeError(f"grader: torch.optim could not be sealed ({', '.join(left[:5])} survived)")
                sealed = True
            args, kwargs = req["args"], req["kwargs"]
            if req["op"] == "call":
                module, function = req["module"], req["function"]
                if module not in HANDOUT_MODULES or not function.isidentifier() or function.startswith("_"):
                    raise AttributeError(f"{module}.{function} is not a handout function")
                fn = getattr(importlib.import_module(f"student.{module}"), function)
                where = f"{module}.{function}"
                value = fn(*args, **kwargs)
            else:
                fn = scenarios.get(req["name"])
                if fn is None:
                    raise ValueError(f"not a scenario: {req['name']!r}")
                where = fn.__qualname__
                value = fn(modules, *args, **kwargs)
            try:
                reply = wire.encode({"ok": True, "value": value})
            except wire.WireError as e:
                reply = wire.encode({"ok": False, "type": "NotData", "original": "WireError",
                                     "message": f"{where} returned something that is not data: {e}",
                                     "traceback": ""})
        except BaseException as e:  # the submission's error, whatever it is, is data
            reply = wire.encode(_error(e))
        wire.write_frame(out_fd, reply)


if __name__ == "__main__":
    main()

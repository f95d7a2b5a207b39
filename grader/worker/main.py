"""The grader's workers: the only processes that import the submission.

This file is copied, as ``_grader_worker.py``, into a fresh working copy that
holds the submission's ``student/``, the public harness (``tests/codec.py``, ``tests/wire.py``,
``tests/harness.py``, ``tests/memwatch.py``, ``tests/scenarios/``) and its two
companions (``_grader_confine.py``: rlimits, seccomp, Landlock;
``_grader_seal.py``: the torch.optim seal), and runs there inside the sandbox
(see :mod:`grader.sandbox.isolation`)::

    python -I _grader_worker.py fork-server CONTROL_FD SERVER_CONFIG_JSON
    python -I _grader_worker.py worker REQUEST_FD REPLY_FD SERVER_CONFIG_JSON WORKER_CONFIG_JSON

It must not import anything of ``grader`` (which is not in the working copy),
and imports only the standard library at module level; the trusted side
imports :class:`ServerConfig` and :class:`WorkerConfig` from here
(``grader.worker.main``).

**The fork server** (Linux): imports numpy, torch and the harness (nothing of
the submission), so that a worker starts without importing torch again; with
``seal`` it seals torch.optim in itself first (grader/worker/seal.py). It says
hello on ``CONTROL_FD`` (a Unix stream socket to the trusted side), then
serves spawn requests there: a :class:`WorkerConfig` as JSON with three file
descriptors (requests in, replies out, output) passed alongside. For each it
kills and reaps any worker it forked before, empties its ``wipe`` folders
(the sandbox's own temporary folders, so that a new worker finds nothing an
earlier one left there), forks a worker and answers ``{"pid": N}`` (N as its
own PID namespace numbers it). It is never dumpable: no worker of its uid can
open its memory. Elsewhere (macOS) the trusted side starts each worker as a
process of its own with ``worker`` instead (fork after importing torch is not
safe there).

**A worker** confines itself before it reads a request (a session of its own,
killed with its fork server, its output on the output descriptor, rlimits,
Landlock where asked, then the seccomp filter, mandatory where the platform
has one: :mod:`grader.worker.confine`), writes a hello frame, and answers
requests until its request pipe closes. Protocol (the one home of the request
fields): :mod:`tests.wire` frames of :func:`tests.wire.encode` bytes, in
:func:`tests.wire.serve`'s loop (LocalImpl's child process runs the same);
the first frame a worker writes is a hello (``{"hello": ...}``); then, for
each request ``{"op": "call", "module", "function", "args", "kwargs"}`` or
``{"op": "scenario", "name", "args", "kwargs"}`` (or ``{"op": "prepare"}``
before calls whose memory is measured: :meth:`_Harness.answer`; or ``{"op":
"import", "module"}``, a problem's first request: the module is imported,
the value None) it answers
with :func:`tests.wire.value_reply` or :func:`tests.wire.error_reply` (the
reply fields, and which exception each error becomes on the trusted side).
A worker serves what its server is configured as (``ServerConfig.seal``):
which problems need a sealed server is the trusted side's decision (the
rubric's ``sealed_optim``), checked there.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import socket
import stat
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

#: Exit statuses of a worker that refuses to run (the trusted side reads them
#: before any submission code ran: the grader's or the machine's fault).
EXIT_PARENT_GONE, EXIT_NO_SECCOMP, EXIT_NO_LANDLOCK, EXIT_NO_SEAL = 70, 71, 72, 73


@dataclass(frozen=True)
class ServerConfig:
    """What the trusted side tells a fork server (or a lone worker) at start.

    ``parent``: the pid it must die with (0: none; bwrap's ``--die-with-parent``
    does that job). ``seal``: seal torch.optim before anything else (the
    workers of the optimizers). ``wipe``: folders emptied before each fork
    (the sandbox's own tmpfs mounts). ``cuda``: whether workers may report
    (and use) CUDA (the server never touches it: a process that initialised
    CUDA cannot fork). ``dynamo``: import torch._dynamo too (a worker that
    gives up writing files must not need to make its cache folder later).
    """

    parent: int = 0
    seal: bool = False
    wipe: tuple[str, ...] = ()
    cuda: bool = False
    dynamo: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        raw = json.loads(text)
        if type(raw) is not dict or set(raw) - {"parent", "seal", "wipe", "cuda", "dynamo"}:
            raise ValueError(f"not a server config: {text[:200]!r}")
        return cls(parent=int(raw.get("parent", 0)), seal=bool(raw.get("seal", False)),
                   wipe=tuple(str(p) for p in raw.get("wipe", ())), cuda=bool(raw.get("cuda", False)),
                   dynamo=bool(raw.get("dynamo", False)))


@dataclass(frozen=True)
class WorkerConfig:
    """What the trusted side tells each worker it starts.

    ``rlimits``: resource names without ``RLIMIT_`` (``{"CPU": 600, "AS": ...}``)
    and the value the worker sets as both its soft and hard limit (never above
    an inherited hard limit). ``growth``: the private memory (bytes) it may
    take beyond what it holds when it starts (0: no such limit; its
    ``RLIMIT_DATA``, so a call past it fails with MemoryError and the kernel
    never has to kill it for memory on a machine that holds the promise).
    ``dumpable``: whether a process of its uid may read its memory and its
    ``/proc`` files that need that (a grader of its uid reads them: bubblewrap
    and rlimits modes) or not (uid mode, where the grader is root).
    ``landlock``: the only files it may write (and with a "read" entry, read)
    once started (:func:`grader.worker.confine.restrict_files`; empty: no such
    restriction).
    """

    rlimits: dict[str, int] = field(default_factory=dict)
    landlock: dict[str, list[str]] = field(default_factory=dict)
    growth: int = 0
    dumpable: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        """The config ``to_json`` wrote; raises ValueError/TypeError on anything else."""
        raw = json.loads(text)
        if type(raw) is not dict or set(raw) - {"rlimits", "landlock", "growth", "dumpable"}:
            raise ValueError(f"not a worker config: {text[:200]!r}")
        landlock = {str(k): [str(p) for p in v] for k, v in dict(raw.get("landlock", {})).items()}
        if set(landlock) - {"read", "device", "write"}:
            raise ValueError(f"not a worker config: landlock {sorted(landlock)}")
        return cls(rlimits={str(k): int(v) for k, v in dict(raw.get("rlimits", {})).items()}, landlock=landlock,
                   growth=int(raw.get("growth", 0)), dumpable=bool(raw.get("dumpable", True)))


# ----------------------------------------------------------------------------- what a worker answers
class _Harness:
    """What the server imports once for all its workers: torch, the harness
    and every scenario, resolved before any submission code runs (a submission
    that later rebinds ``tests.scenarios.x.f`` does not change what a request
    runs; it could still patch these very function objects, which is why no
    verdict rests on what a scenario reports, see tests/harness.py)."""

    def __init__(self, here: str, config: ServerConfig) -> None:
        import numpy  # noqa: F401  (imported once here, not by each worker)
        import torch

        if config.dynamo:
            # torch.optim.Optimizer imports torch._dynamo on first use, which makes
            # its cache folder on import: done now, while files may still be written.
            import torch._dynamo
        from tests import wire
        from tests.harness import Modules, scenario_name

        self.torch, self.wire = torch, wire
        self.modules = Modules("student")
        self.scenarios: dict[str, Any] = {}
        for path in sorted(os.listdir(os.path.join(here, "tests", "scenarios"))):
            if path.endswith(".py") and path != "__init__.py":
                module = importlib.import_module(f"tests.scenarios.{path[:-3]}")
                for value in vars(module).values():
                    if callable(value) and getattr(value, "__module__", None) == module.__name__ \
                            and not isinstance(value, type) and not value.__name__.startswith("_"):
                        self.scenarios[scenario_name(value)] = value
        self.measured = False  # whether it is ready for calls whose memory is measured (from outside)
        self.sealed = False
        if config.seal:
            import _grader_seal  # (grader/worker/seal.py, beside this file in the working copy)

            left = _grader_seal.seal_torch_optim()
            if left:
                os.write(2, f"grader worker: torch.optim could not be sealed ({', '.join(left[:5])} survived)\n"
                         .encode())
                os._exit(EXIT_NO_SEAL)
            self.sealed = True
        _warm_up(torch, optimizers=not self.sealed)

    def answer(self, req: Any) -> bytes:
        """The reply frame's bytes for one decoded request. ``{"op":
        "prepare"}`` readies this worker for calls whose memory the trusted
        side reads from outside: its resident memory follows live data from
        then on (this costs CPU on every allocation: measured workers only) and
        holds what a freshly started process would (:func:`_map_cached_pages`),
        so that a measured peak compares what a call holds."""
        wire = self.wire
        if type(req) is dict and req.get("op") == "prepare":
            if not self.measured:
                from tests.memwatch import return_freed_memory

                return_freed_memory()
                _map_cached_pages()
                self.measured = True
            return wire.encode({"ok": True, "value": None})
        try:
            if req["op"] == "import":  # the problem's first request: does its module import?
                getattr(self.modules, req["module"])  # (a handout module: the rubric's)
                return wire.value_reply(None, f"import {req['module']}")
            args, kwargs = req["args"], req["kwargs"]
            if req["op"] == "call":
                module, function = req["module"], req["function"]
                if not function.isidentifier() or function.startswith("_"):
                    raise AttributeError(f"{module}.{function} is not a handout function")
                fn = getattr(getattr(self.modules, module), function)  # (a handout module: the rubric's)
                where = f"{module}.{function}"
                value = fn(*args, **kwargs)
            else:
                fn = self.scenarios.get(req["name"])
                if fn is None:
                    raise ValueError(f"not a scenario: {req['name']!r}")
                where = fn.__qualname__
                value = fn(self.modules, *args, **kwargs)
            return wire.value_reply(value, where)
        except BaseException as e:  # the submission's error, whatever it is, is data
            return wire.error_reply(e, skip=__file__)


def _map_cached_pages() -> None:
    """Map into this process every page of its file mappings (torch's and
    Python's libraries) that the page cache holds, as a freshly started
    process that imported them has them mapped. A forked process inherits no
    page table entry of its parent's file mappings: without this, its first
    use of a library's code maps those pages then, and a measured call would
    count megabytes of library code it merely ran as memory it held. Pages
    already cached are mapped without reading anything (``mincore``, then
    ``MADV_POPULATE_READ``, Linux 5.14 and later); best effort."""
    if sys.platform != "linux":
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    madv_populate_read = 22
    maps: list[list[str]] = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        maps = [line.split() for line in f]
    for fields in maps:
        if len(fields) < 6 or not fields[5].startswith("/") or "r" not in fields[1]:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        pages = (end - start) // page
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(end - start), vec) != 0:
            continue
        run = None
        for i in range(pages + 1):
            cached = i < pages and vec[i] & 1
            if cached and run is None:
                run = i
            elif not cached and run is not None:
                libc.madvise(ctypes.c_void_p(start + run * page), ctypes.c_size_t((i - run) * page),
                             madv_populate_read)
                run = None


def _warm_up(torch: Any, optimizers: bool) -> None:
    """Run once what torch initialises on first use (autograd, autocast, the
    CPU kernels, serialisation, activation checkpointing, and, unless sealed,
    torch.optim), so that each forked worker shares it instead of paying for
    it again (about a second of CPU and 70 MiB each): harness code, on
    tensors of its own, before any submission code exists in the process. On
    one thread: a thread pool would make forking unsafe. Not with a torch
    built for CUDA, its checkpointing and optimizers: their first use asks
    the CUDA driver whether a device exists (torch 2.11, even on a machine
    without one), after which no process forked from this one may use CUDA,
    and ``torch.manual_seed`` there no longer seeds it."""
    import io

    import torch.utils.checkpoint

    cuda_build = torch.version.cuda is not None

    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8, generator=g)
    model(x).sum().backward()
    torch.einsum("bi,bj->bij", x, x).sum()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            model(x).float().sum().backward()
    if not cuda_build:
        torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False).sum().backward()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "rng": torch.get_rng_state()}, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=True)
    if optimizers and not cuda_build:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        optimizer.step()
        optimizer.zero_grad()


def _work(harness: _Harness, server: ServerConfig, config: WorkerConfig, in_fd: int, out_fd: int) -> None:
    """Confine this process as a worker, say hello, answer requests until the request pipe closes."""
    import _grader_confine as confine

    confine.set_rlimits(config.rlimits)
    if config.growth:
        confine.limit_growth(config.growth)
    if config.landlock:
        state = confine.restrict_files(config.landlock)
        if state != "on":  # asked for: the files it would keep from the submission are open
            os.write(2, f"grader worker: Landlock could not restrict its files ({state}); refusing to run\n".encode())
            os._exit(EXIT_NO_LANDLOCK)
    confine.dumpable(config.dumpable)  # before the filter, which keeps the flag as it is
    seccomp = confine.forbid(cuda=server.cuda)
    if seccomp != "on" and confine.seccomp_available():
        # Mandatory where the platform has it: RLIMIT_NPROC does not bind root
        # (graders often run as root), so without the filter nothing would.
        os.write(2, b"grader worker: the seccomp filter could not be installed; refusing to run\n")
        os._exit(EXIT_NO_SECCOMP)
    torch = harness.torch
    harness.wire.serve(in_fd, out_fd, harness, hello={
        "seccomp": seccomp, "python": sys.version.split()[0], "torch": str(torch.__version__),
        "cuda": bool(torch.cuda.is_available()) if server.cuda else False})


# ----------------------------------------------------------------------------- the fork server
def _empty(folder: str) -> None:
    """Remove everything below ``folder`` that is on its own filesystem (a
    mount below it, the scratch folder bound there, is neither entered nor
    removed), never following a link; best effort."""
    try:
        device = os.lstat(folder).st_dev
    except OSError:
        return
    emptied: list[str] = []  # its own folders, parents first
    for root, dirs, files in os.walk(folder, topdown=True):
        keep = []
        for d in dirs:
            path = os.path.join(root, d)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode) and st.st_dev == device:
                    os.chmod(path, stat.S_IRWXU)  # (a folder, not a link: lstat said so)
                    keep.append(d)
                    emptied.append(path)
                elif not stat.S_ISDIR(st.st_mode):
                    os.unlink(path)  # a link to a folder
        dirs[:] = keep
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
    for path in reversed(emptied):
        with contextlib.suppress(OSError):  # a folder holding a mount point stays
            os.rmdir(path)


def _reap(children: set[int]) -> None:
    """Kill the workers this server forked and wait for them."""
    for pid in list(children):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        children.discard(pid)
    with contextlib.suppress(ChildProcessError):  # (and anything reparented to it as PID 1)
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _serve_forks(harness: _Harness, server: ServerConfig, control: socket.socket) -> None:
    """Fork one worker per spawn request on ``control`` (see the module docstring)."""
    import _grader_confine as confine

    children: set[int] = set()
    me = os.getpid()
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            return
        if not msg:
            _reap(children)
            return
        try:
            if len(fds) != 3:
                raise ValueError(f"a spawn request needs 3 file descriptors, got {len(fds)}")
            config = WorkerConfig.from_json(msg.decode())
            _reap(children)
            for folder in server.wipe:
                _empty(folder)
            pid = os.fork()
        except Exception as e:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
            continue
        if pid == 0:  # the worker
            status = 1
            try:
                control.close()
                in_fd, out_fd, log_fd = fds
                os.setsid()
                confine.die_with(me)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                confine.oom_score(1000)
                _work(harness, server, config, in_fd, out_fd)
                status = 0
            finally:
                os._exit(status)
        children.add(pid)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())


def main(argv: list[str]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.dont_write_bytecode = True
    import _grader_confine as confine

    mode = argv[0] if argv else ""
    if mode == "fork-server":
        control, server = socket.socket(fileno=int(argv[1])), ServerConfig.from_json(argv[2])
    elif mode == "worker":
        in_fd, out_fd = int(argv[1]), int(argv[2])
        server, config = ServerConfig.from_json(argv[3]), WorkerConfig.from_json(argv[4])
    else:
        sys.exit("usage: _grader_worker.py fork-server CONTROL_FD SERVER_JSON | worker IN OUT SERVER_JSON WORKER_JSON")
    confine.lift_inherited_data_limit()
    confine.set_rlimits({"CORE": 0})
    confine.die_with(server.parent)
    if mode == "worker":
        confine.oom_score(1000)
        harness = _Harness(here, server)
        _work(harness, server, config, in_fd, out_fd)
        return
    confine.oom_score(900)  # before its workers (1000), after the trusted processes
    confine.dumpable(False)
    harness = _Harness(here, server)
    # What the server imported stays out of the garbage collector's passes, which
    # would otherwise write to (and so copy into each worker) every page of it.
    gc.collect()
    gc.freeze()
    control.send(json.dumps({"hello": {"python": sys.version.split()[0], "torch": str(harness.torch.__version__),
                                       "cuda_forks": _cuda_survives_fork()}}).encode())
    _serve_forks(harness, server, control)


def _cuda_survives_fork() -> bool:
    """Whether a process forked from this one may still use CUDA: false once
    this process initialised the CUDA driver (torch then marks every child
    "in bad fork" and refuses CUDA there). Asked of a forked child, which
    exits at once."""
    pid = os.fork()
    if pid == 0:
        import torch

        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


if __name__ == "__main__":
    main(sys.argv[1:])

"""How much a worker may use, and how many workers fit the machine.

:class:`Limits` are one worker's resources (rlimits, its tmpfs) and what the
workers of a run share (the scratch folder's caps, checked by
:class:`grader.sandbox.scratch.ScratchWatch`). The memory budget
(:func:`worker_slots`, :func:`fitted_memory_limit`, :func:`plan_jobs`) is the
promise the grader keeps instead of the kernel, which reserves nothing an
rlimit allows: the limits of all the workers that can run at once fit the free
memory, which is the machine's or, in a container, its cgroup's
(:func:`grader.util.memory_available`). Nothing here imports another grader
module but :mod:`grader.util`.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.util import memory_available

#: Data (RLIMIT_DATA: heap and anonymous writable mappings) of the trusted
#: pytest process (public tests, hidden checks, the reference's oracle
#: computations). Measured: grading the reference on every problem peaks at
#: 1.2 GiB of address space (1189 MiB VmPeak, 471 MiB resident), so 4 GiB
#: leaves room; a reply that would need more is refused before (tests.codec's
#: logical-size bounds) or ends the run with an error.
TRUSTED_MEMORY_BYTES = 4 << 30
#: Bytes of a worker's output kept for the instructors' log (the rest is read and dropped).
LOG_CAP = 64 << 10
#: What the trusted process is counted for in the memory budget (resident).
TRUSTED_SHARE_BYTES = 1 << 30
#: A worker's address space never goes below this (torch alone maps about
#: 1.5 GiB): below it, grading waits or runs fewer jobs instead.
MIN_WORKER_BYTES = 3 << 30


@dataclass(frozen=True)
class Limits:
    """Resources of one worker process (one per problem), and of what all the
    workers of a run share: the scratch folder (bytes actually allocated on
    disk, entries, depth), checked from the trusted side while calls run.
    ``call_cpu`` is the CPU seconds of one call, ``start_cpu`` those of a fork
    server's start-up (it imports torch), ``wall_factor`` how many times its
    CPU limit a wait may last in wall-clock time (a backstop)."""

    memory_bytes: int = 8 << 30
    cpu_seconds: int = 600
    file_bytes: int = 16 << 30  # sparse token files of the data checks are big
    open_files: int = 1024
    tmpfs_bytes: int = 128 << 20  # the worker's /tmp (bwrap mode; its pages are host memory)
    shm_bytes: int = 16 << 20  # the worker's /dev/shm (a tmpfs of its own)
    scratch_bytes: int = 1 << 30
    scratch_entries: int = 20_000
    scratch_depth: int = 64
    trusted_memory_bytes: int = TRUSTED_MEMORY_BYTES
    reply_bytes: int = 512 << 20  # the most one reply frame may hold
    growth_bytes: int = 512 << 20  # private memory a worker may take beyond what it starts with (RLIMIT_DATA)
    call_cpu: float = 60.0
    start_cpu: float = 60.0
    wall_factor: float = 10.0

    def rlimits(self, cuda: bool) -> dict[str, int]:
        out = {"CPU": self.cpu_seconds, "FSIZE": self.file_bytes, "NOFILE": self.open_files, "CORE": 0}
        # CUDA maps huge virtual ranges; the address-space cap would break it.
        if not cuda:
            out["AS"] = self.memory_bytes
        return out


#: What a grade's own processes hold beside its worker's growth, measured on
#: the reference (resident, page cache excluded): the trusted pytest process
#: (torch, pytest, hypothesis and the oracles' tensors: 340-400 MiB at its
#: peak), a fork server (torch imported and warmed up: 150 MiB), the engine.
GRADE_BASE_BYTES = 640 << 20


def grade_memory(limits: Limits) -> int:
    """The memory a grade may need at once: its processes, a worker's promised
    growth and what its sandbox's tmpfs mounts may hold."""
    return GRADE_BASE_BYTES + limits.growth_bytes + limits.tmpfs_bytes + limits.shm_bytes


def worker_slots(memory_limit_bytes: int, trusted: int = 1) -> int:
    """How many workers of ``memory_limit_bytes`` fit in the memory this machine
    has free now, once ``trusted`` trusted pytest processes have their share.

    The kernel does not reserve what an rlimit allows, so this is the promise
    the grader keeps instead: it never starts more workers at once than this
    (the spare worker only when it fits, ``batch --jobs`` capped).
    """
    free = memory_available() - trusted * TRUSTED_SHARE_BYTES
    return max(0, int(free // max(1, memory_limit_bytes)))


def fitted_memory_limit(configured_bytes: int, workers: int = 2, trusted: int = 1) -> int:
    """The per-worker address-space limit: ``configured_bytes`` or, on a smaller
    machine, what lets ``workers`` workers (a problem's and the spare) fit in
    the free memory; never below :data:`MIN_WORKER_BYTES`."""
    free = memory_available() - trusted * TRUSTED_SHARE_BYTES
    return max(MIN_WORKER_BYTES, min(configured_bytes, int(free // max(1, workers))))


def plan_jobs(jobs: int, configured_bytes: int) -> tuple[int, int, str]:
    """(jobs, per-worker bytes, message) for ``jobs`` graders run at once, each
    a trusted process and up to two workers (a problem's and the spare), so
    that all their limits fit the free memory: the per-worker limit is lowered
    first (never below :data:`MIN_WORKER_BYTES`), then the number of jobs."""
    free = memory_available()
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

"""A small machine for the project's own checks and benchmarks: a command run
in a fresh cgroup, as a container of that size runs it (Gradescope's default
autograder container: half a CPU and 768 MB), and what the kernel counted of it.

The cgroup caps memory (swap included where the kernel counts it) and,
where asked, the CPU time per period (a CFS quota: ``cpus=0.5`` is half a CPU,
as a container's ``--cpus`` is) or the CPUs it may run on (a cpuset). It
reports the CPU seconds of every process that ran in it, alive or not
(``cpuacct``/``cpu.stat``), its peak memory as the kernel charged it (page
cache included, which a container's limit counts and the kernel reclaims
before it kills), the processes the kernel killed for memory there, and the
largest resident memory its processes held together (summed ``VmRSS``, and
``RssAnon``, the part the kernel cannot reclaim, sampled every 0.2 s).

Works where this process may make cgroups: root with cgroup v1, or a cgroup
v2 subtree with the controllers delegated. :func:`available` says whether,
and why not.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
#: The CFS period a CPU quota is a share of (microseconds).
PERIOD_US = 100_000


@dataclass(frozen=True)
class Run:
    """What a command did in its container."""

    returncode: int
    stdout: str
    stderr: str
    peak_bytes: int  # the cgroup's peak memory (page cache included, as a container's limit counts it)
    oom_kills: int  # processes the kernel killed for memory inside it
    cpu_seconds: float = 0.0  # CPU of every process that ran in it (user + system); 0 where not counted
    wall_seconds: float = 0.0
    rss_peak: int = 0  # the most resident memory its processes held at once (summed VmRSS, sampled)
    anon_peak: int = 0  # the same of RssAnon: memory the kernel cannot reclaim (no page cache)
    timed_out: bool = False  # killed after ``timeout`` seconds, as a platform stops a run


def _v2_base() -> Path | None:
    """This process's cgroup v2 folder, if memory can be delegated below it."""
    try:
        rel = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
    except (OSError, StopIteration):
        return None
    base = ROOT / rel.lstrip("/")
    try:
        if "memory" in (base / "cgroup.subtree_control").read_text().split() and os.access(base, os.W_OK):
            return base
    except OSError:
        return None
    return None


def available() -> tuple[bool, str]:
    """(whether a memory cgroup can be made here, why not)."""
    if (ROOT / "memory").is_dir() and os.access(ROOT / "memory", os.W_OK):
        return True, "cgroup v1"
    if _v2_base() is not None:
        return True, "cgroup v2"
    return False, "no memory cgroup can be made here (needs root with cgroup v1, or a delegated cgroup v2 subtree)"


def _status(pid: str) -> tuple[int, int]:
    rss = anon = 0
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
    return rss, anon


def _members(procs: Path) -> list[str]:
    """The processes of a cgroup and of every cgroup below it (the grader puts
    a measured worker in a memory cgroup of its own, below the container's)."""
    pids: list[str] = []
    for listing in [procs, *procs.parent.glob("*/cgroup.procs")]:
        with contextlib.suppress(OSError):
            pids += listing.read_text().split()
    return pids


def _oom_kills() -> int:
    """The kernel's count of processes killed for memory since boot (``/proc/vmstat``)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        return int(next(line.split()[1] for line in open("/proc/vmstat") if line.startswith("oom_kill ")))
    return 0


class _Sampler:
    """The summed resident memory of the processes in ``procs``'s cgroup (and below it), sampled."""

    def __init__(self, procs: Path) -> None:
        self.procs, self.rss, self.anon = procs, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            sums = [_status(p) for p in _members(self.procs)]
            self.rss = max(self.rss, sum(r for r, _ in sums))
            self.anon = max(self.anon, sum(a for _, a in sums))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run(argv: list[str], *, memory_bytes: int, cpus: str | None = "0", cpu_quota: float | None = None,
        cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 3600) -> Run:
    """Run ``argv`` in a new cgroup holding at most ``memory_bytes`` (swap
    included, where the kernel counts it), on the CPUs ``cpus`` (None: all)
    and, with ``cpu_quota``, that many CPUs' worth of time per period. Past
    ``timeout`` seconds the whole cgroup is killed (``timed_out``)."""
    name = f"lab-container-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []
    try:
        if (ROOT / "memory").is_dir():  # cgroup v1: one folder per controller
            mem = ROOT / "memory" / name
            mem.mkdir()
            made.append(mem)
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            groups = [mem]
            acct = ROOT / "cpuacct" / name
            if (ROOT / "cpuacct").is_dir():
                acct.mkdir()
                made.append(acct)
                groups.append(acct)
            if cpu_quota is not None and (ROOT / "cpu").is_dir():
                quota = ROOT / "cpu" / name
                quota.mkdir()
                made.append(quota)
                (quota / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (quota / "cpu.cfs_quota_us").write_text(str(int(cpu_quota * PERIOD_US)))
                groups.append(quota)
            if cpus is not None and (ROOT / "cpuset").is_dir():
                cpu = ROOT / "cpuset" / name
                cpu.mkdir()
                made.append(cpu)
                (cpu / "cpuset.cpus").write_text(cpus)
                (cpu / "cpuset.mems").write_text((ROOT / "cpuset" / "cpuset.mems").read_text().strip())
                groups.append(cpu)
            peak_file, oom_file = mem / "memory.max_usage_in_bytes", mem / "memory.oom_control"
            procs = mem / "cgroup.procs"

            def cpu_seconds() -> float:
                with contextlib.suppress(OSError, ValueError):
                    return int((acct / "cpuacct.usage").read_text()) / 1e9
                return 0.0
        else:  # cgroup v2: one folder
            base = _v2_base()
            if base is None:
                raise RuntimeError(available()[1])
            group = base / name
            group.mkdir()
            made.append(group)
            (group / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
            if cpu_quota is not None:
                with contextlib.suppress(OSError):
                    (group / "cpu.max").write_text(f"{int(cpu_quota * PERIOD_US)} {PERIOD_US}")
            if cpus is not None:
                with contextlib.suppress(OSError):
                    (group / "cpuset.cpus").write_text(cpus)
            groups = [group]
            peak_file, oom_file, procs = group / "memory.peak", group / "memory.events", group / "cgroup.procs"

            def cpu_seconds() -> float:
                with contextlib.suppress(OSError, ValueError):
                    for line in (group / "cpu.stat").read_text().splitlines():
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
                return 0.0
        enter = " ".join(f'echo $$ > "{g / "cgroup.procs"}";' for g in groups)
        sampler = _Sampler(procs)
        kills_before = _oom_kills()
        start = time.monotonic()
        proc = subprocess.Popen(["/bin/sh", "-c", f'{enter} exec "$@"', "sh", *argv], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # as a platform stops a run: everything in the container
            timed_out = True
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), 9)
            out, err = proc.communicate()
        wall = time.monotonic() - start
        sampler.stop()
        for _ in range(500):  # every process has left before the figures are read
            if not _members(procs):
                break
            time.sleep(0.01)
        oom = 0
        with contextlib.suppress(OSError, ValueError):
            for line in oom_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    oom = int(value)
        # (a kill in a cgroup below the container's is counted there, not in its own file: the
        # kernel's count, with nothing else on this machine out of memory meanwhile)
        oom = max(oom, _oom_kills() - kills_before)
        peak = 0
        with contextlib.suppress(OSError, ValueError):
            peak = int(peak_file.read_text())
        return Run(proc.returncode, out, err, peak, oom, cpu_seconds(), wall, sampler.rss, sampler.anon, timed_out)
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()

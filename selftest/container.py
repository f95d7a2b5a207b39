"""A small machine for the project's own checks: a command run in a fresh
memory cgroup (and, where it can be made, a cpuset of one CPU), as a container
of that size runs it; its peak memory as the kernel counted it.

Works where this process may make cgroups: root with cgroup v1 (memory and
cpuset hierarchies), or a cgroup v2 subtree with the memory (and cpuset)
controllers delegated. :func:`available` says whether, and why not.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Run:
    """What a command did in its container."""

    returncode: int
    stdout: str
    stderr: str
    peak_bytes: int  # the cgroup's peak memory (page cache included, as a container's limit counts it)
    oom_kills: int  # processes the kernel killed for memory inside it


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


def run(argv: list[str], *, memory_bytes: int, cpus: str | None = "0", cwd: Path | None = None,
        env: dict[str, str] | None = None, timeout: float = 3600) -> Run:
    """Run ``argv`` in a new cgroup holding at most ``memory_bytes`` (swap
    included, where the kernel counts it) on the CPUs ``cpus`` (None: all)."""
    name = f"lab-container-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []
    try:
        if (ROOT / "memory").is_dir():  # cgroup v1
            mem = ROOT / "memory" / name
            mem.mkdir()
            made.append(mem)
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            groups = [mem]
            if cpus is not None and (ROOT / "cpuset").is_dir():
                cpu = ROOT / "cpuset" / name
                cpu.mkdir()
                made.append(cpu)
                (cpu / "cpuset.cpus").write_text(cpus)
                (cpu / "cpuset.mems").write_text((ROOT / "cpuset" / "cpuset.mems").read_text().strip())
                groups.append(cpu)
            peak_file, oom_file = mem / "memory.max_usage_in_bytes", mem / "memory.oom_control"
        else:  # cgroup v2
            base = _v2_base()
            if base is None:
                raise RuntimeError(available()[1])
            group = base / name
            group.mkdir()
            made.append(group)
            (group / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
            if cpus is not None:
                with contextlib.suppress(OSError):
                    (group / "cpuset.cpus").write_text(cpus)
            groups = [group]
            peak_file, oom_file = group / "memory.peak", group / "memory.events"
        enter = " ".join(f'echo $$ > "{g / "cgroup.procs"}";' for g in groups)
        proc = subprocess.run(["/bin/sh", "-c", f'{enter} exec "$@"', "sh", *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
        oom = 0
        with contextlib.suppress(OSError, ValueError):
            for line in oom_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    oom = int(value)
        peak = 0
        with contextlib.suppress(OSError, ValueError):
            peak = int(peak_file.read_text())
        return Run(proc.returncode, proc.stdout, proc.stderr, peak, oom)
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()

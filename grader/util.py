"""Helpers the grader's modules share: one home for each, so none is written twice.

Nothing here imports torch or another grader module at import time (the
trusted pytest process, the worker's launcher and the batch driver all import
it cheaply). ``tomllib`` is the TOML parser on every supported Python
(3.10 gets tomli, the package it was made from).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject.toml installs tomli on 3.10, the parser tomllib was made from
    import tomli as tomllib  # noqa: F401

#: The repository root (the folder holding ``grader/``, ``tests/``, ``reference/``).
REPO = Path(__file__).resolve().parent.parent

#: The hypothesis profiles tests/conftest.py registers, fastest first: ``dev``
#: (students' default), ``ci``, ``grade`` (more examples, derandomized).
PROFILES = ("dev", "ci", "grade")


def write_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8, newlines untranslated) to ``path`` so that readers
    only ever see the old file or the complete new one: a temporary file in the
    same folder, flushed and fsynced, then ``os.replace``d over ``path``. The
    file gets the mode a plain ``open(path, "w")`` would give it (0o666 less the
    umask), not mkstemp's 0o600: reports go to folders a course's staff share.
    The folder is created if missing; on any error the temporary file is
    removed and the error raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name with O_EXCL, as mkstemp, but created 0o666 for the kernel to apply the umask.
    tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cores() -> int:
    """CPU cores this process may use: its affinity mask where the OS has one,
    lowered to its cgroup's CPU quota (a container given 1.5 CPUs of a 64-core
    host has 1 core here, not 64)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        n = min(n, int(quota))
    return max(1, n)


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller ("" for cgroup v2's unified one)."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


def _cgroup_file(controller: str, name: str) -> str | None:
    """A file of this process's cgroup, or of the nearest ancestor that has it
    (a limit set on a parent binds the child); None where there is none."""
    groups = _own_cgroups()
    if controller in groups:  # cgroup v1: /sys/fs/cgroup/<controller>/<path>
        base, rel = Path("/sys/fs/cgroup") / controller, groups[controller]
    elif "" in groups:  # cgroup v2
        base, rel = Path("/sys/fs/cgroup"), groups[""]
    else:
        return None
    here = base / rel.lstrip("/")
    while True:
        try:
            return (here / name).read_text().strip()
        except OSError:
            pass
        if here == base or base not in here.parents:
            return None
        here = here.parent


def _cgroup_cpu_quota() -> float | None:
    """CPUs this process's cgroup may use (quota / period), None when unlimited."""
    v2 = _cgroup_file("", "cpu.max") if "" in _own_cgroups() else None
    try:
        if v2:
            quota, period = v2.split()[:2]
            return None if quota == "max" else max(1.0, int(quota) / int(period))
        quota_us, period_us = _cgroup_file("cpu", "cpu.cfs_quota_us"), _cgroup_file("cpu", "cpu.cfs_period_us")
        if quota_us and period_us and int(quota_us) > 0:
            return max(1.0, int(quota_us) / int(period_us))
    except ValueError:
        pass
    return None


def memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes (a container's size),
    None where there is none."""
    for controller, name in (("", "memory.max"), ("memory", "memory.limit_in_bytes")):
        raw = _cgroup_file(controller, name) if controller in _own_cgroups() else None
        if raw and raw != "max":
            try:
                value = int(raw)
            except ValueError:
                continue
            if value < 1 << 60:  # cgroup v1 writes "unlimited" as a huge number
                return value
    return None


def memory_available() -> int:
    """Bytes of memory the grader may still use: what the machine has free, and
    no more than its cgroup's limit less what the cgroup holds (page cache the
    kernel would reclaim not counted)."""
    import psutil

    free = psutil.virtual_memory().available
    limit = memory_limit()
    if limit is None:
        return free
    groups = _own_cgroups()
    v2 = "" in groups and _cgroup_file("", "memory.current") is not None
    usage = _cgroup_file("", "memory.current") if v2 else _cgroup_file("memory", "memory.usage_in_bytes")
    stat = _cgroup_file("", "memory.stat") if v2 else _cgroup_file("memory", "memory.stat")
    cache = 0
    for line in (stat or "").splitlines():
        key, _, value = line.partition(" ")
        if key in ("inactive_file", "total_inactive_file"):
            cache = max(cache, int(value or 0))
    try:
        held = int(usage or 0) - cache
    except ValueError:
        held = 0
    return max(0, min(free, limit - held))


#: The torch releases the grader supports (major, minor), oldest and newest:
#: the lock's (constraints.txt, every CI run) down to what the course's GPU
#: nodes have (benchmarks/rehearse_node.py --torch 2.11.0, a "full" selftest).
SUPPORTED_TORCH = ((2, 11), (2, 13))


def torch_support_note() -> str:
    """What the operator should know of the installed torch ("" when it is a
    supported release), read from its metadata (torch is not imported)."""
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "torch is not installed"
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return f"torch {version}: a version the grader cannot read"
    release = (int(match[1]), int(match[2]))
    low, high = SUPPORTED_TORCH
    if low <= release <= high:
        return ""
    return (f"torch {version} is outside the releases the grader is tested with ({low[0]}.{low[1]} to "
            f"{high[0]}.{high[1]}): grade on a supported one, or rehearse this one first "
            "(python -m benchmarks.rehearse_node --torch VERSION)")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device; False when torch is missing or broken.

    A process that has not imported torch (the engine, the batch driver) asks a
    child process instead, so that it never holds torch's few hundred MiB
    itself; on Linux without ``/dev/nvidiactl`` and on macOS there is no CUDA
    device to find, and nothing is asked."""
    import sys

    if "torch" in sys.modules:
        try:
            return bool(sys.modules["torch"].cuda.is_available())
        except Exception:
            return False
    if sys.platform == "darwin" or (sys.platform.startswith("linux") and not Path("/dev/nvidiactl").exists()):
        return False
    import subprocess

    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=900).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# Terminal escape sequences (CSI, OSC up to BEL or ST, other ESC pairs), C0/C1
# controls but newline and tab, the bidirectional overrides that reorder what a
# reader sees, and Unicode's noncharacters (U+FDD0..U+FDEF and the last two code
# points of every plane: XML refuses U+FFFE/U+FFFF, and none is text).
_NONCHARACTERS = "\ufdd0-\ufdef" + "".join(f"{chr(p * 0x10000 + 0xFFFE)}{chr(p * 0x10000 + 0xFFFF)}"
                                           for p in range(17))
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069" + _NONCHARACTERS + "]")
# A lone surrogate (a str can hold one; UTF-8 and XML cannot encode it).
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` as any report can hold it and any terminal show it: terminal
    control sequences (what a submission's exception message could use to
    rewrite a terminal or a report), control characters and noncharacters
    dropped (``\\n`` and ``\\t`` kept), each lone surrogate replaced by U+FFFD.
    The result encodes as UTF-8 and is valid XML 1.0 character data."""
    return _CONTROL.sub("", _SURROGATE.sub("\ufffd", text.replace("\r\n", "\n")))


# A path to a module of the submission as the grader ran it (its working copy
# in a temporary folder, or /submission inside the sandbox) and the file's
# line as a traceback writes it.
_STUDENT_FRAME = re.compile(r'File "(?:[^"\n]*/)?(student/[\w./-]+\.py)", line (\d+)')
_STUDENT_PATH = re.compile(r"(?<![\w.-])/[^\s\"':]*?/(student/[\w.-]+\.py)\b")
#: The grade's own temporary folder (``tempfile.mkdtemp(prefix="grader-")``,
#: grader/engine.py), and in it a test's ``tmp_path`` (the scratch folder's
#: pytest base, grader/groups.py): a student's pytest names neither so.
_RUN_FOLDER = re.compile(r"(?<![\w.-])(?:/[\w.-]+)*?/grader-\w{8}(?![\w.-])")
_TMP_PATH = re.compile(r"<grader's folder>/(?:[\w.-]+/)*?scratch/pytest/[\w.-]+/")
#: An installed package's folder (``.../site-packages/``, Debian's
#: ``dist-packages``) and the standard library's (``.../lib/python3.12/``), on
#: whatever machine graded: where Python is installed is the grading machine's,
#: not the student's business; what follows it (``torch/nn/...``) is kept.
_PACKAGES_PATH = re.compile(r"(?<![\w.-])(?:/[^\s\"':/]+)+?/(?:site|dist)-packages/")
_STDLIB_PATH = re.compile(r"(?<![\w.-])(?:/[^\s\"':/]+)+?/lib(?:64)?/python3\.\d+/")
#: This interpreter and its installation's folders, longest first (a system
#: prefix such as ``/usr`` is left: it names no one's machine).
_INTERPRETER_PATHS = sorted({*((p, "python") for p in {sys.executable, os.path.realpath(sys.executable)} if p),
                             *((f"{p.rstrip('/')}/", "<python>/") for p in {sys.prefix, sys.base_prefix,
                                                                              sys.exec_prefix}
                               if p.rstrip("/") not in ("", "/usr", "/usr/local"))},
                            key=lambda pair: -len(pair[0]))


def student_paths(text: str) -> str:
    """``text`` with every path the grader's copies give a submission's module
    written as the student's own checkout names it: a traceback's
    ``File ".../work/student/optimizers.py", line 42`` becomes
    ``student/optimizers.py:42``, and any other absolute path to a file of
    ``student/`` its ``student/...`` part; the grader's checkout
    (``tests/``, ``grader/``) is written relative to the repository; a
    test's temporary folder in the grade's own folder is ``tmp_path/``, and
    any other path into that folder ``<grader's folder>/``; an installed
    package's folder is ``<site-packages>/`` and the standard library's
    ``<python>/`` (``File "<site-packages>/torch/nn/functional.py"``)."""
    text = _STUDENT_FRAME.sub(r"\1:\2", text)
    text = _STUDENT_PATH.sub(r"\1", text)
    text = _TMP_PATH.sub("tmp_path/", _RUN_FOLDER.sub("<grader's folder>", text))
    text = _STDLIB_PATH.sub("<python>/", _PACKAGES_PATH.sub("<site-packages>/", text))
    for path, name in _INTERPRETER_PATHS:
        text = text.replace(path, name)
    return text.replace(f"{REPO}{os.sep}", "")


def feedback_text(text: str) -> str:
    """What every string of a grading run becomes on its way to the reports
    (:func:`printable`, then :func:`student_paths`)."""
    return student_paths(printable(text))

"""The GPU node rehearsed on the CPU: benchmarks/gpu.sh --smoke as a GPU node runs it.

A GPU grading node is not a developer's machine: the grader runs there as
root, without bubblewrap (so in the uid isolation mode, on a checkout locked
with ``python -m grader.sandbox lock``), with an interpreter outside any home
folder (the system's) and the node's own torch. The first GPU run graded
nothing for want of exactly those conditions (torch 2.11 asked the worker's
uid for a user name it did not have), none of which needs a GPU. This script
makes them all here, but the GPU:

1. **an interpreter outside any home folder**: a virtual environment of the
   system's Python (``--python``, default ``/usr/bin/python3.X`` of this
   interpreter's version; one inside a folder other users cannot enter, such
   as pyenv's under ``/root``, is first copied out of it, its run path
   rewritten: :func:`outside_home`), kept in ``/var/tmp/lab-node/`` between runs, with
   the lock's packages (copied from this checkout's ``.venv`` when the
   versions match) or, with ``--torch VERSION``, that torch release (from
   PyPI: a CUDA build of several GB, run on the CPU) and the lock's other
   packages;
2. **a locked checkout**: a copy of this checkout's files (tracked and
   untracked, not ignored) in a fresh folder, locked as a node's is;
3. **no bubblewrap, as root**: gpu.sh runs in a mount namespace of its own
   where every ``bwrap`` on ``PATH`` is covered by ``/dev/null`` (not
   executable: ``shutil.which`` finds none), so ``--sandbox auto`` takes the
   uid mode, as on the node;

then runs ``benchmarks/gpu.sh --smoke`` there (the CPU standing in for the
GPU: every grade reaches a verdict, the MFU problem's whole pipeline
included) and prints its table. Exit status 0 when every row holds what it
must (no UNEXPECTED or WRONG row, the grades' sandbox the uid mode), 1 when a
row does not, 2 when the rehearsal cannot run here (not Linux, not root, no
``unshare``, no system Python), with the reason.

``--patch FILE OLD NEW`` (repeatable) edits the copy before it is locked: how
a selftest reverts a fix to show the rehearsal catches the defect it fixed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Where the node environments are kept between runs (outside any home folder).
NODE_ROOT = Path("/var/tmp/lab-node")
#: The row markers of a table that missed what it must show.
BAD_MARKS = ("UNEXPECTED", "**WRONG**")


class CannotRun(Exception):
    """The rehearsal cannot run on this machine (the reason is the message)."""


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]


def preflight() -> None:
    """Raise :class:`CannotRun` unless this machine can play a GPU node."""
    if sys.platform != "linux":
        raise CannotRun("the uid isolation mode is Linux only")
    if os.geteuid() != 0:
        raise CannotRun("a GPU node grades as root, and this user is not")
    if shutil.which("unshare") is None:
        raise CannotRun("no unshare (util-linux) to hide bubblewrap in a mount namespace")
    probe = _run(["unshare", "--mount", "--propagation", "private", "--", "true"])
    if probe.returncode != 0:
        raise CannotRun(f"cannot make a mount namespace: {probe.stderr.strip()[:200]}")


def system_python(version: str) -> Path:
    """The system's interpreter of ``version`` ("3.11"), outside any home folder."""
    for folder in ("/usr/bin", "/usr/local/bin"):
        path = Path(folder) / f"python{version}"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise CannotRun(f"no system python{version} in /usr/bin or /usr/local/bin")


def _others_can_run(python: Path) -> bool:
    """Whether an unprivileged uid can run ``python`` (every folder above it enterable)."""
    return _run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", str(python), "-I", "-c",
                 "pass"]).returncode == 0


def outside_home(python: Path) -> Path:
    """``python`` itself when any user can run it; else a copy of its
    installation in :data:`NODE_ROOT` (a standalone CPython, as pyenv builds
    them), with the run path that points back into the original (where its
    ``libpython`` lies) rewritten in place to ``$ORIGIN/../lib``."""
    if _others_can_run(python):
        return python
    real = python.resolve()
    prefix = real.parent.parent
    copy = NODE_ROOT / f"python-{_version(real)}"
    exe = copy / "bin" / real.name
    if exe.is_file() and _others_can_run(exe):
        return exe
    if copy.exists():
        shutil.rmtree(copy)
    NODE_ROOT.mkdir(parents=True, exist_ok=True)
    shutil.copytree(prefix, copy, symlinks=True)
    old, new = f"{prefix}/lib".encode(), b"$ORIGIN/../lib"
    data = exe.read_bytes()
    at = data.find(b"\0" + old + b"\0")
    if at >= 0 and len(new) <= len(old):  # RUNPATH lives in .dynstr: same length, padded with NULs
        exe.write_bytes(data[: at + 1] + new.ljust(len(old), b"\0") + data[at + 1 + len(old):])
    for path in [copy, *copy.rglob("*")]:
        if not path.is_symlink():
            path.chmod((path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0)) & ~0o022)
    if not _others_can_run(exe):
        raise CannotRun(f"{python} lies where other users cannot run it, and its copy {exe} does not run either")
    return exe


def _lock_pins(torch: str | None) -> list[str]:
    """The lock's pins, without torch, its CUDA libraries and what the lock
    holds for torch's sake (its ``# via torch`` entries: another release asks
    for other versions) when another torch is asked for."""
    pins: list[tuple[str, set[str]]] = []
    for raw in (REPO / "constraints.txt").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            pins.append((line, set()))
        elif pins and raw.strip().startswith("#"):
            pins[-1][1].update(raw.strip("# \t").removeprefix("via").split())
    if torch is None:
        return [pin for pin, _ in pins]
    stack = ("torch", "triton", "nvidia-", "cuda-")  # torch and its CUDA libraries
    return [pin for pin, via in pins if "torch" not in via and not pin.lower().startswith(stack)]


def node_environment(python: Path, torch: str | None) -> Path:
    """The node's interpreter (a venv of ``python`` in :data:`NODE_ROOT`),
    made once per interpreter, torch and lock; returns its ``bin/python``."""
    pins = _lock_pins(torch)
    key = hashlib.sha256("\n".join([str(python), torch or "lock", *pins]).encode()).hexdigest()[:12]
    venv = NODE_ROOT / f"py{_version(python)}-torch{torch or 'lock'}-{key}"
    exe, stamp = venv / "bin" / "python", venv / ".lab-node-ready"
    if stamp.is_file() and exe.is_file():
        return exe
    NODE_ROOT.mkdir(parents=True, exist_ok=True)
    NODE_ROOT.chmod(0o755)
    if venv.exists():
        shutil.rmtree(venv)
    made = _run([str(python), "-m", "venv", str(venv)])
    if made.returncode != 0:
        raise CannotRun(f"{python} could not make a virtual environment: {made.stderr.strip()[-300:]}")
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(_run([str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    if torch is None and _version(python) == f"{sys.version_info.major}.{sys.version_info.minor}" \
            and (ours / "torch").is_dir():
        # The lock's packages, as this checkout's .venv holds them (same Python minor version).
        for entry in ours.iterdir():
            if entry.name in ("pip", "setuptools") or entry.name.startswith(("pip-", "setuptools-", "_distutils")):
                continue
            if entry.name.startswith(("__editable__", "resource_accounting_lab")):
                continue  # this checkout's own install (its pytest11 entry point): a node has none
            target = theirs / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(entry, target)
    else:
        requirements = venv / "requirements.txt"
        deps = [d for d in _project_dependencies() if not d.startswith("torch")]
        requirements.write_text("\n".join([*deps, f"torch=={torch}" if torch else "torch"]) + "\n")
        constraints = venv / "constraints.txt"
        constraints.write_text("\n".join(pins) + "\n")
        env = {**os.environ, "PIP_CONSTRAINT": ""} if torch else dict(os.environ)
        got = _run([str(exe), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(constraints),
                    "-r", str(requirements)], env=env)
        if got.returncode != 0:
            raise CannotRun(f"the node's packages could not be installed: {got.stderr.strip()[-500:]}")
    check = _run([str(exe), "-I", "-c", "import torch, numpy, pytest, hypothesis; print(torch.__version__)"])
    if check.returncode != 0:
        raise CannotRun(f"the node's interpreter cannot import torch: {check.stderr.strip()[-300:]}")
    for path in [venv, *venv.rglob("*")]:  # readable by every user (the workers' uids), written by root only
        if not path.is_symlink():
            path.chmod((path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0)) & ~0o022)
    stamp.write_text(check.stdout)
    return exe


def _version(python: Path) -> str:
    out = _run([str(python), "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"])
    return out.stdout.strip()


def _project_dependencies() -> list[str]:
    import re

    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block is not None, "pyproject.toml has no [project] dependencies"
    return re.findall(r'"([^"]+)"', block.group(1))


def copy_checkout(dest: Path, patches: list[tuple[str, str, str]]) -> Path:
    """This checkout's files (tracked and untracked, not ignored) in ``dest``,
    with each patch ``(file, old, new)`` applied (``old`` must be there)."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    if listed.returncode != 0:
        raise CannotRun(f"git cannot list this checkout's files: {listed.stderr.strip()[:200]}")
    for rel in filter(None, listed.stdout.split("\0")):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):  # (an untracked file gone since the listing)
                shutil.copy2(src, dest / rel)
    for rel, old, new in patches:
        path = dest / rel
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"rehearse_node: --patch: {rel} does not hold {old!r}")
        path.write_text(text.replace(old, new))
    return dest


def rehearse(python: Path, torch: str | None, out: Path, patches: list[tuple[str, str, str]]) -> int:
    """Run gpu.sh --smoke as a GPU node would (see the module docstring);
    write its table to ``out``; return 0 when every row holds, else 1."""
    exe = node_environment(python, torch)
    folder = Path(tempfile.mkdtemp(prefix="lab-node-checkout-", dir="/var/tmp"))
    try:
        checkout = copy_checkout(folder / "checkout", patches)
        locked = _run([str(exe), "-m", "grader.sandbox", "lock"], cwd=checkout)
        if locked.returncode != 0:
            raise CannotRun(f"the copy could not be locked: {locked.stderr.strip()[-300:]}")
        hide = " && ".join(f"mount --bind /dev/null {path}" for path in _bwraps())
        script = (f"{hide + ' && ' if hide else ''}exec env PYTHON={exe} bash benchmarks/gpu.sh --smoke "
                  f"--out {out}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "GRADER_", "PYTEST_", "VIRTUAL_ENV"))}
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
                              cwd=checkout, env=env, check=False)
    finally:
        with contextlib.suppress(OSError):
            from grader.sandbox.scratch import remove_tree

            remove_tree(folder)
    if proc.returncode != 0 or not out.is_file():
        print(f"rehearse_node: gpu.sh exited with status {proc.returncode}", file=sys.stderr)
        return 1
    table = out.read_text()
    bad = [line for line in table.splitlines() if any(mark in line for mark in BAD_MARKS)]
    if "sandbox: unprivileged uid" not in table:
        bad.append("the grades did not run in the uid isolation mode (see the table's sandbox row)")
    for line in bad:
        print(f"rehearse_node: {line[:400]}", file=sys.stderr)
    return 1 if bad else 0


def _bwraps() -> list[str]:
    """Every ``bwrap`` on ``PATH`` (its real path), to be hidden."""
    seen: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(folder or ".") / "bwrap"
        if path.is_file() and os.access(path, os.X_OK) and str(path.resolve()) not in seen:
            seen.append(str(path.resolve()))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    parser.add_argument("--python", type=Path, default=None,
                        help=f"the node's interpreter (default: the system's python{here})")
    parser.add_argument("--torch", default=None, metavar="VERSION",
                        help="the node's torch release (default: the lock's, copied from .venv)")
    parser.add_argument("--out", type=Path, default=None, help="the table (default: a temporary file, printed)")
    parser.add_argument("--patch", action="append", nargs=3, default=[], metavar=("FILE", "OLD", "NEW"),
                        help="replace OLD by NEW in FILE of the copy before it is locked (repeatable)")
    args = parser.parse_args(argv)
    patches = [(rel, old, new) for rel, old, new in args.patch]
    try:
        preflight()
        python = outside_home(args.python) if args.python else system_python(here)
        out = args.out or Path(tempfile.mkdtemp(prefix="lab-node-")) / "table.md"
        status = rehearse(python, args.torch, out.resolve(), patches)
    except CannotRun as e:
        print(f"rehearse_node: cannot rehearse a GPU node here: {e}", file=sys.stderr)
        return 2
    print(out.read_text() if out.is_file() else "")
    return status


if __name__ == "__main__":
    raise SystemExit(main())

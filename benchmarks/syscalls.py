"""Which system calls the grader's workers make: the census behind the seccomp allowlist.

``python -m benchmarks.syscalls SUBMISSION [grader options...]`` grades
SUBMISSION under ``strace -ff`` (Debian's strace) and prints, for the system
calls the workers made once their seccomp filter was installed (the filter's
``prctl(PR_SET_SECCOMP)`` and everything after it, in the worker and in every
thread or process it made afterwards), how many times each was made, how many
of those the filter refused, and whether grader/worker/confine.py's allowlist
(:data:`grader.worker.confine.ALLOWED`) holds it. ``--json FILE`` keeps the
counts; several runs' files merge with ``--merge FILE...`` (the table of the
sandbox README is measured so: the reference, the correct corpus and other
styles, in bubblewrap and in uid mode, on the lock's torch and the oldest
supported). Exit status 1 when a call the workers made and the filter did not
refuse is missing from the allowlist.

The tracer slows the workers down many times over: grade with ``--call-cpu``
and ``--cpu-budget`` raised (the defaults here add ``--call-cpu 600
--cpu-budget 3000``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grader.worker.confine import ALLOWED  # noqa: E402

_CALL = re.compile(r"^([a-z_][a-z0-9_]*)\((.*)")
_RESULT = re.compile(r"= (-?\d+|0x[0-9a-f]+|\?)(?: ([A-Z0-9_]+))?")
_FILTER = "PR_SET_SECCOMP"
#: Errors the filter answers with: a refused call (grader/worker/confine.py).
_REFUSALS = ("EPERM", "ENOSYS", "EAGAIN", "EOPNOTSUPP", "EACCES")


def census(trace_dir: Path) -> tuple[Counter[str], Counter[str]]:
    """(calls, refused-looking calls) of every task that ran under a worker's
    filter, from the per-task files of ``strace -ff -o DIR/t``."""
    lines = {int(p.name.split(".")[-1]): p.read_text(errors="replace").splitlines() for p in trace_dir.glob("t.*")}
    children: dict[int, list[tuple[int, int]]] = {}  # task -> [(line index, child task)]
    for task, text in lines.items():
        for index, line in enumerate(text):
            m = _CALL.match(line)
            if m and m[1] in ("clone", "clone3", "fork", "vfork"):
                r = _RESULT.search(line.rsplit(")", 1)[-1] if ")" in line else line)
                if r and r[1].isdigit() and int(r[1]) > 0:
                    children.setdefault(task, []).append((index, int(r[1])))
    calls: Counter[str] = Counter()
    refused: Counter[str] = Counter()

    def walk(task: int, start: int) -> None:
        for line in lines.get(task, [])[start:]:
            m = _CALL.match(line)
            if not m:
                continue
            calls[m[1]] += 1
            r = _RESULT.search(line.rsplit(")", 1)[-1])
            if r and r[2] in _REFUSALS:
                refused[m[1]] += 1
        for i, child in children.get(task, []):
            if i >= start:
                walk(child, 0)

    for task, text in lines.items():
        at = next((i for i, line in enumerate(text) if _FILTER in line and line.startswith("prctl(")), None)
        if at is not None:
            walk(task, at + 1)
    return calls, refused


def table(calls: Counter[str], refused: Counter[str]) -> tuple[str, list[str]]:
    """The census as markdown, and the calls made but neither allowed nor refused."""
    rows = ["| system call | calls | refused by the filter | in the allowlist |", "|---|---|---|---|"]
    missing = []
    for name, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        allowed = name in ALLOWED
        rows.append(f"| `{name}` | {n} | {refused.get(name, 0)} | {'yes' if allowed else 'NO'} |")
        if not allowed and refused.get(name, 0) < n:
            missing.append(name)
    unused = sorted(set(ALLOWED) - set(calls))
    rows.append("")
    rows.append(f"Allowed but not seen in this census: {', '.join(f'`{n}`' for n in unused) or 'none'}.")
    return "\n".join(rows), missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", nargs="?", help="a folder or zip holding student/")
    parser.add_argument("--json", type=Path, help="write the counts as JSON")
    parser.add_argument("--merge", type=Path, nargs="+", help="merge census JSON files instead of grading")
    args, grader_args = parser.parse_known_args(argv)
    calls: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    if args.merge:
        for path in args.merge:
            data = json.loads(path.read_text())
            calls.update(data["calls"])
            refused.update(data["refused"])
    else:
        if args.submission is None:
            parser.error("give a SUBMISSION, or --merge FILES")
        if shutil.which("strace") is None:
            parser.error("strace is not installed (Debian: apt-get install strace)")
        with tempfile.TemporaryDirectory(prefix="lab-syscalls-") as tmp:
            argv_ = ["strace", "-ff", "-qq", "-o", f"{tmp}/t", sys.executable, "-m", "grader", args.submission,
                     "--call-cpu", "600", "--cpu-budget", "3000", "-q", "--no-progress", *grader_args]
            proc = subprocess.run(argv_, cwd=REPO, capture_output=True, text=True, check=False)
            print(proc.stdout[-3000:], file=sys.stderr)
            calls, refused = census(Path(tmp))
    if args.json:
        args.json.write_text(json.dumps({"calls": dict(calls), "refused": dict(refused)}, indent=1, sort_keys=True))
    text, missing = table(calls, refused)
    print(text)
    if missing:
        print(f"syscalls: made by the workers and not in the allowlist: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The uid mode's torch.optim seal from the worker's side: a process that
restricts itself as a uid-mode optimizers worker does (Landlock read rules,
the seccomp filter, not dumpable) reads only below its rules and opens no
channel to a worker beside it. The seal's other parts: test_sealed_optim.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.worker.confine import landlock_abi, seccomp_available

REPO = Path(__file__).resolve().parent.parent


#: A process restricting itself as a uid-mode optimizers worker does; prints what it could still do.
RESTRICTED = r'''
import ctypes, json, os, socket, sys
from grader.worker.confine import dumpable, forbid, restrict_files
allowed, other = sys.argv[1], sys.argv[2]
out = {"landlock": restrict_files({"read": [allowed, "/usr", "/lib"]})}
dumpable(False)  # as a uid-mode worker's config says (grader/worker/main.py)
out["seccomp"] = forbid()

def attempt(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except OSError as e:
        out[name] = type(e).__name__

attempt("read allowed", lambda: open(os.path.join(allowed, "f")).read())
attempt("read other", lambda: open(os.path.join(other, "f")).read())
attempt("write allowed", lambda: open(os.path.join(allowed, "g"), "w").close())
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("fork", os.fork)
libc = ctypes.CDLL(None, use_errno=True)
out["shmget"] = libc.shmget(0, 4096, 0o1600) == -1 and ctypes.get_errno()
out["dumpable"] = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
print(json.dumps(out))
'''


@pytest.mark.skipif(not landlock_abi() or not seccomp_available(), reason="needs Landlock and seccomp")
def test_a_restricted_worker_reads_only_its_rules_and_opens_no_channel(tmp_path):
    """What a uid-mode optimizers worker does to itself before any submission
    code runs: it reads below its rules only, writes nowhere, and gets EPERM
    for a socket or SysV shared memory (the channels a worker of the same uid
    beside it could use), and is not dumpable (that worker cannot open its
    memory); processes stay refused."""
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    for d in (allowed, other):
        d.mkdir()
        (d / "f").write_text("x")
    proc = subprocess.run([sys.executable, "-c", RESTRICTED, str(allowed), str(other)], cwd="/",
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out == {"seccomp": "on", "landlock": "on", "read allowed": "allowed", "read other": "PermissionError",
                   "write allowed": "PermissionError", "udp": "PermissionError", "fork": "BlockingIOError",
                   "shmget": 1, "dumpable": 0}, out

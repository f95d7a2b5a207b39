#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image
# (Ubuntu; the bundle is unpacked in /autograder/source). It installs Python, the
# grader's dependencies at the versions of the lock (constraints.txt: every
# package pinned; CPU wheels of torch: Gradescope has no GPU) and bubblewrap for the worker sandbox,
# locks the checkout for the uid isolation, and fails the build when the worker
# (which runs student code) could be isolated neither way.
# A full grade of a correct submission costs about 80-100 CPU s (measured: 200 s
# of wall-clock time and 718 MiB at Gradescope's default half CPU and 768 MB,
# 400 s beside busy neighbours); pick 1 CPU, 1.5 GB and 20 minutes so that slow
# or hostile submissions fit too (docs/instructors.md, "Gradescope"). A bigger
# machine grades faster, never differently.
set -euo pipefail
SOURCE="${AUTOGRADER_ROOT:-/autograder}/source"
cd "$SOURCE"
export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
    # Without bubblewrap the worker runs as an unprivileged uid instead (checked below): keep going.
    apt-get install -y -qq bubblewrap >/dev/null \
        || echo "setup.sh: could not install bubblewrap; the worker will run as an unprivileged uid" >&2
fi
python3 -m venv "$SOURCE/.venv"
"$SOURCE/.venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$SOURCE/.venv/bin/python" -m pip install -q --disable-pip-version-check \
    --extra-index-url https://download.pytorch.org/whl/cpu \
    -c constraints.txt -r requirements.txt
# Smoke test at build time rather than on the first student's submission.
"$SOURCE/.venv/bin/python" -c "import torch, hypothesis, pytest; print('setup.sh: torch', torch.__version__)"
"$SOURCE/.venv/bin/python" - <<'PYEOF'
import sys
sys.path.insert(0, ".")
from grader.rubric import load
from grader.sandbox.limits import Limits, grade_memory
from grader.util import memory_limit, memory_available
limit = memory_limit()
have = limit if limit is not None else memory_available()
need = grade_memory(Limits(growth_bytes=int(load().settings.worker_memory_mib * (1 << 20))))
if have < need:
    print(f"setup.sh: note: this machine has {have >> 20} MiB of memory; correct submissions fit, but a grade may "
          f"need {need >> 20} MiB: a submission that takes all the memory a worker is promised can make a grader "
          "error here (docs/instructors.md, Gradescope)", file=sys.stderr)
PYEOF
# Isolation of the worker that runs student code: bubblewrap where the container
# gives user namespaces, else the worker as an unprivileged uid of its own, which
# must find the reference, hidden checks and grader unreadable and nothing of them
# writable (the lock; the virtual environment stays usable). Checked now, as that
# uid; neither working fails the build: grading would hand every submission the
# reference and hidden checks.
"$SOURCE/.venv/bin/python" -m grader.sandbox lock
if ! "$SOURCE/.venv/bin/python" -m grader.sandbox check; then
    echo "setup.sh: no isolation for the worker here (see above); not building an autograder that would expose" \
         "the reference and hidden checks" >&2
    exit 1
fi

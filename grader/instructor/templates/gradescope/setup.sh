#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image
# (Ubuntu; the bundle is unpacked in /autograder/source). It installs Python, the
# grader's dependencies at the versions the course tested (constraints.txt; CPU
# wheels of torch: Gradescope has no GPU) and bubblewrap for the worker sandbox.
# The grader needs at least 1 CPU and 1 GiB of memory (the reference is measured
# to get full marks in 768 MiB); a bigger machine grades faster, never differently.
set -euo pipefail
SOURCE="${AUTOGRADER_ROOT:-/autograder}/source"
cd "$SOURCE"
export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
    # Without bubblewrap the sandbox falls back to rlimits only: keep going.
    apt-get install -y -qq bubblewrap >/dev/null \
        || echo "setup.sh: could not install bubblewrap; the sandbox falls back to rlimits only" >&2
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
from grader.util import memory_limit, memory_available
limit = memory_limit()
have = limit if limit is not None else memory_available()
if have < 1 << 30:
    print(f"setup.sh: warning: this machine has {have / (1 << 30):.2f} GiB of memory; the grader needs 1 GiB "
          "(a smaller one makes some problems grader errors)", file=sys.stderr)
PYEOF

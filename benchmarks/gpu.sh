#!/usr/bin/env bash
# The GPU benchmarks in one go (under 5 minutes on one GPU): matmul rate, the
# reference loop's MFU, a slow loop for contrast, the optimizer's bandwidth.
# Writes a markdown table under benchmarks/results/ and prints it.
# Without CUDA it runs tiny sizes on the CPU as a smoke test (NOT GPU figures).
# Usage: benchmarks/gpu.sh [--tiny] [--device cuda:0] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
if command -v timeout >/dev/null; then
  exec timeout 290 "$py" -m benchmarks.gpu_bench "$@"
fi
exec "$py" -m benchmarks.gpu_bench "$@"

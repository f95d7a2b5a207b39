#!/usr/bin/env bash
# Every GPU figure in one go, at most 9 minutes on one GPU (the steps' limits):
#   1. benchmarks/gpu_bench.py: the matmul ceiling, the reference loop's MFU
#      against the dense bf16 peak, contrast loops, the MFU check's measured
#      rounding noise and tolerance, and the update errors of correct and
#      partial-work loops;
#   2. the GPU tests: the public gpu-marked tests on the reference;
#   3. a full grade of the reference (dev profile) and MFU-only grades of
#      grader/corpus/mfu/slow_loop and grader/corpus/cheat/gpu_hog;
#   4. one markdown table of all of it: benchmarks/results/<date>-<device>.md
#      (--out FILE to choose), printed too.
# Each step has its own time limit; a step that runs out is reported as such.
# The grades need the grader's isolation: bubblewrap, or, as root without it
# (a rented GPU machine, say), a checkout locked first with
# `python -m grader.sandbox lock`; a grade that could not run says why.
# Without CUDA, or with --smoke: tiny sizes on the CPU, no GPU tests, no full
# grade (the two MFU-only grades say "not run on a GPU"): NOT GPU figures,
# only proof that the script works (selftest/test_gpu_bench.py runs it).
# Usage: benchmarks/gpu.sh [--smoke] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
smoke=0
out=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --out) out=(--out "$2"); shift ;;
    *) echo "usage: benchmarks/gpu.sh [--smoke] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu.sh: no CUDA device: smoke run on the CPU (NOT GPU figures)" >&2
  smoke=1
fi
limit() { if command -v timeout >/dev/null; then timeout "$@"; else shift; "$@"; fi; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== 1/4 benchmarks" >&2
bench=(--out "$work/bench.md")
if [[ $smoke == 1 ]]; then bench+=(--tiny --device cpu); fi
limit 180 "$py" -m benchmarks.gpu_bench "${bench[@]}" >/dev/null || echo "gpu.sh: benchmarks failed ($?)" >&2

grade() {  # grade NAME SECONDS FOLDER [grader options...]
  local name=$1 seconds=$2 folder=$3
  shift 3
  echo "== grade $name" >&2
  set +e
  limit "$seconds" "$py" -m grader "$folder" --json "$work/$name.json" --reveal-hidden -q "$@" >"$work/$name.log" 2>&1
  echo $? >"$work/$name.rc"
  set -e
}
if [[ $smoke == 0 ]]; then
  echo "== 2/4 GPU tests" >&2
  set +e
  limit 40 "$py" -m pytest tests/test_data.py tests/test_training*.py -m gpu --impl reference -q -p no:randomly \
    >"$work/tests.log" 2>&1
  echo $? >"$work/tests.rc"
  set -e
  echo "== 3/4 grades" >&2
  mkdir -p "$work/reference"
  cp -r reference "$work/reference/student"
  grade reference 170 "$work/reference" --profile dev
else
  echo "== 2/4 and the full grade: skipped (smoke run)" >&2
fi
grade slow_loop 65 grader/corpus/mfu/slow_loop --problems mfu --profile dev
grade gpu_hog 65 grader/corpus/cheat/gpu_hog --problems mfu --profile dev

echo "== 4/4 the table" >&2
"$py" -m benchmarks.gpu_report --bench "$work/bench.md" --work "$work" "${out[@]}"

#!/usr/bin/env bash
# Every GPU figure in one go, within one 8-minute call (the steps' limits add
# up to 465 s), with the machine's own Python and torch: it installs nothing.
#   1. benchmarks/gpu_bench.py: the matmul ceiling, the reference loop's MFU
#      against the dense bf16 peak and where its step's time goes, contrast
#      loops, the MFU check's rounding noise (bf16 against fp32) at the
#      graded learning rate, and the update errors of correct and
#      partial-work loops;
#   2. the GPU tests: the public gpu-marked tests on the reference;
#   3. grades: the reference, every problem (dev profile); then MFU-only
#      grades of grader/corpus/mfu/slow_loop, grader/corpus/cheat/gpu_hog and
#      the partial loops grader/corpus/mfu/half_steps and half_batch;
#   4. one markdown table of all of it, each grade row with the verdict it
#      must get: benchmarks/results/<date>-<device>.md (--out FILE to
#      choose), printed too.
# Each step has its own time limit; a step that runs out is reported as such.
# The grades need the grader's isolation: bubblewrap, or, as root without it
# (a rented GPU machine, say), a checkout locked first with
# `python -m grader.sandbox lock`; a grade that could not run says why.
# Without CUDA, or with --smoke: every step on the CPU, the CPU standing in
# for the GPU (the grades' --cpu-stand-in: the MFU problem's whole pipeline,
# on its small [mfu.stand_in] workload), tiny benchmark sizes: NOT GPU
# figures, only a rehearsal of the run (benchmarks/rehearse_node.sh runs it
# as a GPU node would).
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
  echo "gpu.sh: no CUDA device: the CPU stands in for it (NOT GPU figures)" >&2
  smoke=1
fi
limit() { if command -v timeout >/dev/null; then timeout "$@"; else shift; "$@"; fi; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== 1/4 benchmarks" >&2
bench=(--out "$work/bench.md" --json "$work/bench.json")
if [[ $smoke == 1 ]]; then bench+=(--tiny --device cpu); fi
limit 105 "$py" -m benchmarks.gpu_bench "${bench[@]}" >/dev/null || echo "gpu.sh: benchmarks failed ($?)" >&2

stand_in=()
if [[ $smoke == 1 ]]; then stand_in=(--cpu-stand-in); fi
grade() {  # grade NAME SECONDS FOLDER [grader options...]
  local name=$1 seconds=$2 folder=$3
  shift 3
  echo "== grade $name" >&2
  set +e
  limit "$seconds" "$py" -m grader "$folder" --json "$work/$name.json" --reveal-hidden -q --no-progress \
    ${stand_in[@]+"${stand_in[@]}"} "$@" >"$work/$name.log" 2>&1
  echo $? >"$work/$name.rc"
  set -e
}
echo "== 2/4 GPU tests" >&2
set +e
limit 30 "$py" -m pytest tests/test_data.py tests/test_training*.py -m gpu --impl reference -q -p no:randomly \
  -p no:cacheprovider >"$work/tests.log" 2>&1
echo $? >"$work/tests.rc"
set -e
echo "== 3/4 grades" >&2
mkdir -p "$work/reference"
cp -r reference "$work/reference/student"
grade reference 150 "$work/reference" --profile dev
for entry in mfu/slow_loop cheat/gpu_hog mfu/half_steps mfu/half_batch; do
  grade "${entry#*/}" 45 "grader/corpus/$entry" --problems mfu --profile dev
done

echo "== 4/4 the table" >&2
report=(--bench "$work/bench.md" --work "$work")
if [[ $smoke == 1 ]]; then report+=(--stand-in); fi
"$py" -m benchmarks.gpu_report "${report[@]}" ${out[@]+"${out[@]}"}

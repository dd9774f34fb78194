#!/usr/bin/env bash
# The one-call GPU check: environment report, every GPU test, GPU benchmarks (peers side by
# side), all in one command of under 8 minutes, everything written to one results folder.
#
#   benchmarks/gpu_check.sh [--dry-run] [RESULTS_DIR]   (default: $OUT when set, else ./gpu_check_results)
#
# --dry-run (for machines without a GPU): run every step anyway, so the plumbing is seen to work
# (GPU tests skip, benchmarks refuse), and still exit 2.
#
# Needs only what a GPU machine with CuPy has: python3 with numpy, cupy and pytest (torch is
# optional: the PyTorch CUDA comparison and DLPack tests skip without it). gputape runs from
# this checkout (PYTHONPATH), nothing is installed. If a folder .whl/ of wheels is present
# (see /work/.library/device/README.md), they are installed to /tmp/site first, offline.
#
# Writes RESULTS_DIR/gpu_check.txt (the whole log), gpu_probe.json, gpu_bench.json, pytest_gpu_core.xml and
# pytest_gpu_rest.xml.
# GPU_CHECK_PROBE=0 skips the capture probe; GPU_BENCH_ARGS passes options to gpu_bench.py
# (e.g. --no-bandwidth).
# Time: at most 30 + 30 + 30 + (170 + 80) + 120 = 460 s of commands (the timeouts), so under 8 minutes.
# The GPU tests run in two parts, each with its own timeout and JUnit file, printing each test
# as it ends: the kernels and core (tests/test_gpu.py) first, then every other gpu-marked test,
# so a part cut short by its timeout still leaves the results of the other and its own so far.
# Exit status: 0 when every GPU test passed and the benchmarks ran; 2 when no GPU answers
# (it says why, and runs nothing that could pass for a GPU result); 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
DIR=${1:-${OUT:-$ROOT/gpu_check_results}}
mkdir -p "$DIR"
LOG="$DIR/gpu_check.txt"
: >"$LOG"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
START=$(date +%s)

say() { echo "$@" | tee -a "$LOG"; }
run() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
fail() { say "gpu_check: FAILED: $*"; exit "${2:-1}"; }

say "== gputape GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  say "== installing carried wheels from .whl/ into /tmp/site (offline)"
  run "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || fail "could not install the wheels in .whl/"
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
command -v nvidia-smi >/dev/null && run nvidia-smi -L

say "== environment: python -m gputape info"
run timeout 30 "$PY" -m gputape info || say "(python -m gputape info failed: see above)"

WHY=$("$PY" -c 'from gputape.devices import backend; print(backend.cuda_unavailable_reason(0) or "")' 2>&1) \
  || fail "gputape does not import: $WHY"
if [ -n "$WHY" ]; then
  say "gpu_check: FAILED: no usable GPU: $WHY"
  say "gpu_check: nothing was measured; run this on a machine with an NVIDIA GPU, a driver and cupy."
  [ $DRY -eq 1 ] || exit 2
  say "gpu_check: --dry-run: running the remaining steps anyway (they must skip or refuse)"
fi
"$PY" -c 'import pytest' 2>/dev/null || fail "pytest is not importable here (carry it as a wheel in .whl/)"

if [ "${GPU_CHECK_PROBE:-1}" = 1 ]; then
  say ""
  say "== what CuPy allows under graph capture: python benchmarks/gpu_probe.py"
  run timeout 30 "$PY" benchmarks/gpu_probe.py --json "$DIR/gpu_probe.json" || say "(gpu_probe failed: see above)"
fi

say ""
say "== direct cuBLAS for CUDA graphs: python benchmarks/gpu_cublas_smoke.py"
if ! run timeout 30 "$PY" benchmarks/gpu_cublas_smoke.py; then
  export GPUTAPE_CAPTURE_GEMM=0
  say "gpu_check: direct cuBLAS failed: the rest runs with GPUTAPE_CAPTURE_GEMM=0 (matrix products outside the graphs)"
fi

say ""
TIMEOUT_OPT=()
"$PY" -c 'import pytest_timeout' 2>/dev/null && TIMEOUT_OPT=(--timeout=60)
# -o addopts="": the project's addopts name pytest-benchmark options; the GPU tests need no plugin.
# -v: one line per test as it ends, so a part its timeout stops still shows how far it got.
gpu_tests() {  # gpu_tests SECONDS JUNIT_NAME PYTEST_ARGS...
  local secs=$1 junit=$2
  shift 2
  run timeout "$secs" "$PY" -m pytest -m gpu "$@" -v -p no:cacheprovider -o addopts="" \
    --continue-on-collection-errors --tb=short -rfEs --durations=10 "${TIMEOUT_OPT[@]}" --junitxml="$DIR/$junit"
  local rc=$?
  [ $rc -eq 124 ] && say "gpu_check: this part ran past its ${secs} s and was stopped: see the last test above"
  return $rc
}
say "== GPU tests, part 1 (kernels and core): python -m pytest -m gpu tests/test_gpu.py"
gpu_tests 170 pytest_gpu_core.xml tests/test_gpu.py
TESTS1=$?
say "gpu_check: GPU tests part 1 exit status $TESTS1 ($([ $TESTS1 -eq 0 ] && echo passed || echo FAILED))"
say ""
say "== GPU tests, part 2 (everything else): python -m pytest -m gpu tests --ignore=tests/test_gpu.py"
gpu_tests 80 pytest_gpu_rest.xml tests --ignore=tests/test_gpu.py
TESTS2=$?
say "gpu_check: GPU tests part 2 exit status $TESTS2 ($([ $TESTS2 -eq 0 ] && echo passed || echo FAILED))"
TESTS=$((TESTS1 != 0 || TESTS2 != 0))

say ""
say "== GPU benchmarks: python benchmarks/gpu_bench.py"
run timeout 120 "$PY" benchmarks/gpu_bench.py --json "$DIR/gpu_bench.json" ${GPU_BENCH_ARGS:-}
BENCH=$?
say "gpu_check: benchmarks exit status $BENCH ($([ $BENCH -eq 0 ] && echo ran || echo FAILED))"

say ""
say "== summary: tests $([ $TESTS -eq 0 ] && echo passed || echo FAILED), benchmarks $([ $BENCH -eq 0 ] && echo ran || echo FAILED), $(($(date +%s) - START)) s; results in $DIR"
if [ -n "$WHY" ]; then
  say "gpu_check: FAILED: dry run without a GPU ($WHY)"
  exit 2
fi
[ $TESTS -eq 0 ] && [ $BENCH -eq 0 ]

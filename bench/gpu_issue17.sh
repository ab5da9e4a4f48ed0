#!/usr/bin/env bash
# Issue 17 on the GPU host in one run (typically 4-6 minutes; each step has a timeout, 9.5
# minutes in all): the device test suites, the kernel benchmark (every decode kernel
# against a device-to-device copy) and bench/verify_gpu.sh (ckpt-gpu verify against `cat IN OUT > /dev/null`, warm, with peak
# RSS). Run from the repository root, after `tools/gpu_bundle.sh build gpu-run`:
#   bash bench/gpu_issue17.sh [BUNDLE_DIR (gpu-run)] [DATA_DIR (/tmp/ckpt-bench-data)]
# Prints PASS/FAIL counts of the tests, one ratio per kernel (goal >= 0.8) and one
# cat/verify ratio per input (goal >= 0.8); the logs go to $OUT (default /tmp/gpu-issue17).
set -uo pipefail
B=$(readlink -f "${1:-gpu-run}")
DATA=${2:-/tmp/ckpt-bench-data}
OUT=${OUT:-/tmp/gpu-issue17}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" "$DATA"
export CKPT_TEST_FIXTURES=${CKPT_TEST_FIXTURES:-$ROOT/tests/fixtures} CKPT_TEST_BIN_DIR=$B
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "$(nproc) cores; bundle $B"

echo "== 1. device tests: Kernels/*:Backends/* (every kernel against the CPU reference, NaN scales included)"
timeout 150 "$B/ckpt_tests" --gtest_filter='Kernels/*:Backends/*' > "$OUT/gpu-tests.log" 2>&1
echo "exit $?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|Failure|GPU backend unavailable" "$OUT/gpu-tests.log" | head -40

echo "== 2. ckpt-gpu bench (ratio to a device-to-device copy; goal >= 0.8)"
timeout 60 "$B/ckpt-gpu" bench --bytes 268435456 --iterations 20 > "$OUT/bench.jsonl" 2>&1
echo "exit $?"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        print(l.rstrip()); continue
    r = json.loads(l)
    if "ratio_to_copy" in r:
        flag = "" if r["kernel"] == "d2d_copy" or r["ratio_to_copy"] >= 0.8 else "  (below 0.8)"
        print("%-28s %8.1f GB/s  ratio to copy %.3f%s" % (r["kernel"], r["gbps"], r["ratio_to_copy"], flag))
    elif "tops" in r:
        print("%-28s %8.1f TOPS" % (r["kernel"], r["tops"]))
    else:
        print(l.rstrip())
PY

echo "== 3. bench/verify_gpu.sh: verify vs cat (warm), peak RSS (budget 1G)"
timeout 360 bash "$ROOT/bench/verify_gpu.sh" "$B" "$DATA" 2>&1 | tee "$OUT/verify_gpu.log"
echo "exit ${PIPESTATUS[0]}"

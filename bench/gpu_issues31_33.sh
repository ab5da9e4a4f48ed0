#!/usr/bin/env bash
# Issues 31, 32 and 33 on the GPU host, in four device calls of at most 10 minutes each (the
# session's device budget is 30 minutes). Run from the repository root, after
#   tools/gpu_bundle.sh build gpu-run/b && cp build/ckpt_bench_dequant gpu-run/b/ &&
#   cp OLD/ckpt gpu-run/b/ckpt-base     # a ckpt from before issue 33 (page-cache writes)
#   (cd gpu-run && tar cJf b.tar.xz b && rm -rf b)   # the tree + bundle must stay < 64 MiB
# then `bash bench/gpu_issues31_33.sh a`, `... b`, `... c` and `... d` (carry gpu-run).
#   a: the device suites and verifies (tools/gpu_check.sh), issue 31's real client
#      (tools/relayout_cases.sh + tools/relayout_client.py: transformers loads IN and OUT with
#      FineGrainedFP8Config(dequantize=True), every parameter compared) on the Qwen3-MoE,
#      DeepSeek-V3 and promoted-module cases, ckpt-gpu verify OUT --reference IN on each, and
#      bench/relayout.sh (a >= 4 GiB Qwen3-235B-layout shard: relayout --tp 8 against cp, peak RSS).
#   b: issue 33's bench/write_direct.sh at BENCH_WRITE_GIB (default 4), BENCH_REPS runs a job
#      (default 3, each right after its own dd: the disk's speed drifts by up to 25 % within
#      minutes; the row gives medians and the range) with the base binary's rows: convert V4
#      keep / int8-shift / bf16 and V3; and the CPU-side dequant throughput
#      (ckpt_bench_dequant --convert, output to /dev/null).
#   d: the same for repack-experts (default, and --source-sha256 against openssl dgst) and
#      relayout --tp 8, then bench/read_direct.sh (b and d each fit one 10-minute call).
#   e: b's and d's write rows in one bench run (one dd series, one table; ~6 minutes on the
#      16-core host with the data made in the same call).
#   c: issue 32's bench/convert_integrity.sh (integrity in the same read: the disk's bytes
#      read against the input's, from a page cache bounded below the model's size).
# Logs go to $OUT (the device run's return folder; default /tmp/gpu-issues31-33).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/gpu-run/b
OUT=${OUT:-/tmp/gpu-issues31-33}
mkdir -p "$OUT"
[ -x "$B/ckpt" ] || { mkdir -p "$B" && tar xJf gpu-run/b.tar.xz -C "$B" --strip-components=1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "$(nproc) cores; $(df -h . | tail -1)"
W=$(mktemp -d -p "$ROOT")
trap 'rm -rf "$W"' EXIT

case "${1:-}" in
a)
  if [ "${SKIP_GPU_CHECK:-0}" = 1 ]; then
    echo "=== gpu_check.sh skipped (SKIP_GPU_CHECK=1: the device suites are not what this run measures)"
  else
    echo "=== gpu_check.sh (CKPT_REQUIRE_GPU=1)"
    CKPT_TEST_FIXTURES=$ROOT/tests/fixtures OUT=$OUT/gpu-check timeout 300 bash "$B/gpu_check.sh" > "$OUT/gpu-check.log" 2>&1
    echo "gpu_check exit $?"; tail -20 "$OUT/gpu-check.log"
  fi
  echo "=== issue 31: relayout cases, transformers client, ckpt-gpu verify"
  timeout 120 bash tools/relayout_cases.sh "$W/cases" "$B/ckpt" > "$OUT/relayout-cases.log" 2>&1
  echo "cases exit $?"; tail -4 "$OUT/relayout-cases.log"
  for c in qwen3moe dsv3 promoted; do
    echo "--- $c"
    PYTHONUNBUFFERED=1 timeout 120 python3 tools/relayout_client.py "$W/cases/$c/in" "$W/cases/$c/out" > "$OUT/client-$c.log" 2>&1
    echo "transformers client exit $?"; tail -8 "$OUT/client-$c.log"
    CKPT_REQUIRE_GPU=1 timeout 60 "$B/ckpt-gpu" verify "$W/cases/$c/out" --reference "$W/cases/$c/in" --json "$OUT/verify-$c.json" 2>&1 | tail -3
    echo "ckpt-gpu verify exit ${PIPESTATUS[0]}"
  done
  echo "=== issue 31: relayout throughput (bench/relayout.sh)"
  timeout 240 bash bench/relayout.sh "$B/ckpt" "$W/bench" 2>&1 | tail -8
  ;;
b)
  echo "=== issue 33: CPU side (output to /dev/null)"
  timeout 60 "$B/ckpt_bench_dequant" --convert 4 2>&1 | tail -8
  echo "=== issue 33: convert's output path vs dd oflag=direct (with the base binary)"
  BENCH_JOBS="v4 v3" BENCH_REPS=${BENCH_REPS:-3} BENCH_WRITE_GIB=${BENCH_WRITE_GIB:-4} BENCH_BASE_CKPT=$B/ckpt-base \
    timeout 480 bash bench/write_direct.sh "$B/ckpt" "$W" 2>&1 | tail -14
  ;;
d)
  echo "=== issue 33: repack-experts and relayout vs dd oflag=direct (with the base binary)"
  BENCH_JOBS="gguf relayout" BENCH_REPS=${BENCH_REPS:-3} BENCH_WRITE_GIB=${BENCH_WRITE_GIB:-4} BENCH_BASE_CKPT=$B/ckpt-base \
    timeout 420 bash bench/write_direct.sh "$B/ckpt" "$W" 2>&1 | grep -v uring | tail -12
  echo "=== issue 33: reads, buffered against O_DIRECT (input dropped from the cache)"
  timeout 60 bash bench/read_direct.sh "$(ls "$W"/write-direct/qwen235b-*/*.safetensors | head -1)" 2>&1 | tail -8
  ;;
e)
  echo "=== issue 33: the whole table in one bench run (convert V4 x3, V3, repack x2, relayout; base binary rows)"
  timeout 40 "$B/ckpt_bench_dequant" --convert 4 2>&1 | tail -4
  BENCH_JOBS="v4 v3 gguf relayout" BENCH_REPS=${BENCH_REPS:-3} BENCH_WRITE_GIB=${BENCH_WRITE_GIB:-4} BENCH_BASE_CKPT=$B/ckpt-base \
    timeout 520 bash bench/write_direct.sh "$B/ckpt" "$W" 2>&1 | grep -v uring | tail -20
  ;;
c)
  echo "=== issue 32: integrity in the same read (8 x 600 MB, page cache bounded to 2 GiB)"
  timeout 400 bash bench/convert_integrity.sh "$B/ckpt" 8 600 "$W" 2048 2>&1 | tail -8
  ;;
*) echo "usage: bench/gpu_issues31_33.sh a|b|c|d|e" >&2; exit 2 ;;
esac

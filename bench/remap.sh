#!/usr/bin/env bash
# INT8-shift remap and CPU decode throughput on ONE core, scalar reference vs the dispatched
# path (AVX2 where the CPU has it), same run, same bytes: ckpt_bench_remap
# (bench/remap_bench.cpp, built beside ckpt) pinned to one core. Never a test.
# Usage: bash bench/remap.sh BUILD_DIR [REPEATS] [SPAN]   (defaults 7, 3)
#   BENCH_REMAP_CORE=C the core pinned (default 0).
set -euo pipefail
BUILD=$(readlink -f "$1")
CORE=${BENCH_REMAP_CORE:-0}
PIN=()
if command -v taskset > /dev/null; then PIN=(taskset -c "$CORE"); fi
echo "== per core (${PIN[*]:-unpinned}): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
"${PIN[@]}" "$BUILD/ckpt_bench_remap" "${2:-7}" "${3:-3}"

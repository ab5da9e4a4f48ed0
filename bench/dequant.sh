#!/usr/bin/env bash
# Dequantization throughput per ggml type on ONE core, in MB/s of quantized input: the
# scalar reference and the dispatched path (AVX2 where the CPU has it) in the same run, on
# the same bytes, printed side by side with the speedup.
#  1. ckpt_bench_dequant (bench/dequant_bench.cpp, built beside ckpt) pinned to one core:
#     the library call itself, best of N, random blocks with realistic scales; then verify's
#     CPU digest per type: (a) dequantize only into a 64K piece, (b) dequantize + digest per
#     piece (before ggml_dequant_digest), (c) the fused ggml_dequant_digest, and (c)/(b)
#     (best thread CPU time, the three interleaved).
#  2. End to end: `ckpt dump --as f32` of every tensor of a synthetic GGUF with one tensor
#     per type (bench/make_dequant_gguf.py), with CKPT_DEQUANT_ISA=scalar and without, next
#     to `--as raw` of the same tensors (process start, parse and read, no decode).
#  3. convert's CPU side (issue 33): FP8 E4M3 (E8M0 blocks) -> BF16 and MXFP4 -> BF16 in
#     GB/s of BF16 output written to /dev/null, on one core and on every core (unpinned).
#     BENCH_DQ_CONVERT_GB sets the output per run (default 4).
# Usage: bash bench/dequant.sh path/to/ckpt [MB_PER_TYPE]   (default 8)
#   BENCH_DQ_REPEAT=N timed runs (default 5); BENCH_DQ_CORE=C the core pinned (default 0).
set -euo pipefail
CKPT=$(readlink -f "$1")
MB=${2:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH=$(dirname "$CKPT")/ckpt_bench_dequant
REPEAT=${BENCH_DQ_REPEAT:-5}
CORE=${BENCH_DQ_CORE:-0}
PIN=()
if command -v taskset > /dev/null; then PIN=(taskset -c "$CORE"); fi

echo "== per core (${PIN[*]:-unpinned}): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"${PIN[@]}" "$BENCH" "$MB" "$REPEAT"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
GGUF=$WORK/types.gguf
python3 "$HERE/make_dequant_gguf.py" "$GGUF" "$MB"
cat "$GGUF" > /dev/null  # page cache warm
names=$(python3 -c "import sys; sys.path.insert(0, '$HERE'); import make_dequant_gguf as m; print(' '.join('t.' + n for n in m.TYPES))")

# Every tensor dumped once as $1 (f32 or raw), with CKPT_DEQUANT_ISA=$2 (scalar or auto).
dump_all() {
  for name in $names; do
    CKPT_DEQUANT_ISA=$2 "${PIN[@]}" "$CKPT" dump "$GGUF" "$name" --as "$1" > /dev/null
  done
}
t_raw=$(best_of_3 dump_all raw auto)
t_scalar=$(best_of_3 dump_all f32 scalar)
t_fast=$(best_of_3 dump_all f32 auto)
total=$(stat -c %s "$GGUF")
echo "== end to end: ckpt dump --as f32 of all 23 tensors ($(python3 -c "print(f'{$total/1e6:.0f}')") MB), one core"
python3 - "$total" "$t_raw" "$t_scalar" "$t_fast" <<'PY'
import sys
b, raw, scalar, fast = int(sys.argv[1]), *(float(x) for x in sys.argv[2:5])
print(f"--as raw (no decode)   {raw:7.2f} s")
print(f"--as f32, scalar       {scalar:7.2f} s   decode {b / 1e6 / (scalar - raw):6.0f} MB/s")
print(f"--as f32, dispatch     {fast:7.2f} s   decode {b / 1e6 / max(fast - raw, 1e-9):6.0f} MB/s   ({(scalar - raw) / max(fast - raw, 1e-9):.1f}x)")
PY

"$BENCH" --convert "${BENCH_DQ_CONVERT_GB:-4}"

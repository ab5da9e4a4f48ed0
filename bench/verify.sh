#!/usr/bin/env bash
# `ckpt-gpu verify --backend emulate` against `ckpt validate --deep --reference`, which
# recomputes the same reference (copies, FP8 dequantization, the INT8-shift remap, the BF16
# experts), for the three conversions of one synthetic shard, in the same run, page cache
# warm, best of BENCH_VERIFY_RUNS (default 2) each, never a timed test. Usage:
#   bench/verify.sh BUILD_DIR [SHARD_MB] [DATA_DIR]       (SHARD_MB default 400)
# BUILD_DIR holds ckpt and ckpt-gpu. Goal: verify/validate <= 2.5 for keep, int8-shift, bf16.
set -euo pipefail
BUILD=$(readlink -f "$1")
SHARD_MB=${2:-400}
DATA=${3:-bench-data}
RUNS=${BENCH_VERIFY_RUNS:-2}
CKPT=$BUILD/ckpt
GPU=$BUILD/ckpt-gpu
IN="$DATA/verify-in-$SHARD_MB"
mkdir -p "$DATA"
# bench/make_data.py's shard, with the dense FP8 scales kept in 2^-27 .. 2^13 so that every
# FP8 x scale product is a finite BF16 (convert refuses to write inf).
make_shard() {
  python3 - "$(dirname "$0")" "$1" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import make_data
make_data.E8M0_OK = bytes(100 + b % 41 for b in range(256))
sys.argv = ["make_data.py", sys.argv[2], "1", sys.argv[3]]
make_data.main()
PY
}
if [ ! -f "$IN/model.safetensors.index.json" ]; then
  rm -rf "$IN"
  make_shard "$IN" "$SHARD_MB" > /dev/null
fi
best() {  # best wall time of RUNS runs of "$@" (exit 0 or 1 accepted only when BENCH_ALLOW_FAILURE=1)
  local b=""
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s.%N)
    b=$(python3 -c "t=$t1-$t0; b='$b'; print(min(t, float(b)) if b else t)")
  done
  echo "$b"
}
in_bytes=$(cat "$IN"/*.safetensors | wc -c)
echo "== verify --backend emulate vs validate --deep --reference: $(python3 -c "print(f'{$in_bytes/1e6:.0f}')") MB shard, $(nproc) cores"
for mode in keep int8-shift bf16; do
  OUT="$DATA/verify-out-$SHARD_MB-$mode"
  if [ ! -f "$OUT/model.safetensors.index.json" ]; then
    rm -rf "$OUT"
    "$CKPT" convert -q --experts "$mode" "$IN" "$OUT" > /dev/null
  fi
  cat "$IN"/*.safetensors "$OUT"/*.safetensors > /dev/null
  out_bytes=$(cat "$OUT"/*.safetensors | wc -c)
  t_val=$(best "$CKPT" validate -q --deep --reference "$IN" "$OUT")
  t_ver=$(best "$GPU" verify -q --backend emulate --reference "$IN" "$OUT")
  stats=$("$GPU" verify -q --stats --backend emulate --reference "$IN" "$OUT" 2>&1 >/dev/null | sed 's/^ckpt-gpu stats: //')
  printf '%-11s validate --deep --reference %6.2f s   verify --backend emulate %6.2f s   ratio verify/validate %5.2f (goal <= 2.5)\n' \
    "$mode" "$t_val" "$t_ver" "$(python3 -c "print($t_ver/$t_val)")"
  echo "            output $(python3 -c "print(f'{$out_bytes/1e6:.0f}')") MB; verify: $stats"
done

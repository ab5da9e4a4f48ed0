#!/usr/bin/env bash
# ckpt relayout throughput on a Qwen3-235B-A22B-FP8 layout: hidden 4096, 64 heads, 4 KV heads of
# 128, 128 experts of moe_intermediate_size 1536, BF16 block scales on a 128 x 128 grid, with
# BENCH_RELAYOUT_LAYERS (default 2) layers and a 8192-token vocabulary: one shard of about 5 GB
# (>= 4 GiB) written by tools/make_qwen3_moe_fp8.py (random FP8 codes; BENCH_SPARSE=1 writes
# the FP8 weights as holes instead). `ckpt relayout --tp 8` (192 rows a rank: re-blocked to
# 64x64, FP8 bytes copied) against `cp` + `sync` of the same number of output bytes to the same
# disk in the same run; prints the ratio and the peak RSS (from the --json report).
# Usage: bench/relayout.sh CKPT [DATA_DIR]
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
HERE=$(cd "$(dirname "$0")/.." && pwd)
LAYERS=${BENCH_RELAYOUT_LAYERS:-2}
IN="$DATA/qwen235b-layout-fp8"
mkdir -p "$DATA"
if [ ! -f "$IN/config.json" ]; then
  bash "$HERE/bench/make_qwen235b_layout.sh" "$IN" "$LAYERS" ${BENCH_SPARSE:+--zero-fp8}
fi
"$CKPT" validate -q "$IN"
cat "$IN"/*.safetensors > /dev/null   # input in the page cache for both runs
in_bytes=$(cat "$IN"/*.safetensors | wc -c)

rm -rf "$DATA/relayout-out" "$DATA/cp.out"; sync
t0=$(date +%s.%N)
"$CKPT" relayout -q --tp 8 --memory-budget 1G --json "$DATA/relayout.json" "$IN" "$DATA/relayout-out" > /dev/null
t1=$(date +%s.%N)
out_bytes=$(cat "$DATA"/relayout-out/*.safetensors | wc -c)
rss=$(python3 -c "import json; print(json.load(open('$DATA/relayout.json'))['peak_rss_bytes'])")
block=$(python3 -c "import json; print(json.load(open('$DATA/relayout.json'))['block'])")
"$CKPT" preflight -q --tp 8 "$DATA/relayout-out" > /dev/null
rm -rf "$DATA/relayout-out"; sync

head -c "$out_bytes" /dev/zero > "$DATA/cp.src"
cat "$DATA/cp.src" > /dev/null
t2=$(date +%s.%N)
cp "$DATA/cp.src" "$DATA/cp.out" && sync "$DATA/cp.out"
t3=$(date +%s.%N)
rm -f "$DATA/cp.src" "$DATA/cp.out"

python3 - "$t0" "$t1" "$t2" "$t3" "$in_bytes" "$out_bytes" "$rss" "$block" <<'PY'
import sys
t0, t1, t2, t3, nin, n, rss = map(float, sys.argv[1:8])
rel, cp = t1 - t0, t3 - t2
print(f"input / output bytes:   {int(nin):,} -> {int(n):,} (block 128x128 -> {sys.argv[8]}; preflight --tp 8 passes)")
print(f"cp + sync:              {cp:.2f} s  ({n / cp / 1e9:.2f} GB/s written)")
print(f"ckpt relayout --tp 8:   {rel:.2f} s  ({n / rel / 1e9:.2f} GB/s written)")
print(f"ratio relayout/cp:      {cp / rel:.2f}   goal >= 0.9")
print(f"peak RSS:               {rss / 2**20:.0f} MiB   goal <= 1024 MiB (--memory-budget 1G)")
PY

#!/usr/bin/env bash
# `convert --experts bf16` benchmark: one synthetic shard (I8 experts + F8_E4M3/E8M0 linears)
# of BENCH_BF16_SHARD_MB (default 1024) MB, whose output is about 3.5x larger (the experts
# grow 4x), converted with a 1 GiB memory budget, against `cp` + `sync` writing the same
# number of output bytes to the same disk in the same run. Usage: bench/convert_bf16.sh CKPT [DATA_DIR]
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARD_MB=${BENCH_BF16_SHARD_MB:-1024}
mkdir -p "$DATA"
if [ ! -f "$DATA/bf16-in/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DATA/bf16-in" 1 "$SHARD_MB"
fi
"$CKPT" validate -q "$DATA/bf16-in"
cat "$DATA"/bf16-in/*.safetensors > /dev/null   # input in the page cache for both runs
in_bytes=$(cat "$DATA"/bf16-in/*.safetensors | wc -c)

rm -rf "$DATA/bf16-out" "$DATA/cp.out"; sync
t0=$(date +%s.%N)
"$CKPT" convert -q --experts bf16 --memory-budget 1G --json "$DATA/convert-bf16.json" "$DATA/bf16-in" "$DATA/bf16-out" > /dev/null
t1=$(date +%s.%N)
out_bytes=$(cat "$DATA"/bf16-out/*.safetensors | wc -c)
read -r rss ein eout < <(python3 -c "import json; r=json.load(open('$DATA/convert-bf16.json')); t=r['totals']; print(r['result']['peak_rss_bytes'], t['expert_bytes_in'], t['expert_bytes_out'])")
rm -rf "$DATA/bf16-out"; sync

# Baseline: cp of a file with exactly the output's byte count, then sync it (convert fsyncs).
head -c "$out_bytes" /dev/zero > "$DATA/cp.src"
cat "$DATA/cp.src" > /dev/null
t2=$(date +%s.%N)
cp "$DATA/cp.src" "$DATA/cp.out" && sync "$DATA/cp.out"
t3=$(date +%s.%N)
rm -f "$DATA/cp.src" "$DATA/cp.out"

python3 - "$t0" "$t1" "$t2" "$t3" "$in_bytes" "$out_bytes" "$rss" "$ein" "$eout" <<'PY'
import sys
t0, t1, t2, t3, nin, n, rss, ein, eout = map(float, sys.argv[1:])
conv, cp = t1 - t0, t3 - t2
print(f"input / output bytes:     {int(nin):,} -> {int(n):,} ({n / nin:.2f}x; experts {ein / 1e9:.2f} -> {eout / 1e9:.2f} GB, {eout / ein:.2f}x)")
print(f"cp + sync:                {cp:.2f} s  ({n / cp / 1e9:.2f} GB/s written)")
print(f"ckpt convert --experts bf16: {conv:.2f} s  ({n / conv / 1e9:.2f} GB/s written)")
print(f"ratio convert/cp:         {cp / conv:.2f}   goal >= 0.8")
print(f"peak RSS:                 {rss / 2**20:.0f} MiB   goal <= 1024 MiB (--memory-budget 1G)")
PY

#!/usr/bin/env bash
# Converter benchmark: one synthetic shard of at least 4 GiB (I8 experts + F8_E4M3/E8M0
# linears), converted with a 1 GiB memory budget, against `cp` + `sync` writing the same
# number of output bytes to the same disk in the same run. Usage: bench/convert.sh CKPT [DATA_DIR]
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARD_MB=${BENCH_CONVERT_SHARD_MB:-4300}
mkdir -p "$DATA"
if [ ! -f "$DATA/big/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DATA/big" 1 "$SHARD_MB"
fi
"$CKPT" validate -q "$DATA/big"
cat "$DATA"/big/*.safetensors > /dev/null   # input in the page cache for every run

rm -rf "$DATA/big.out" "$DATA/cp.out"
t0=$(date +%s.%N)
"$CKPT" convert -q --memory-budget 1G --json "$DATA/convert.json" "$DATA/big" "$DATA/big.out" > /dev/null
t1=$(date +%s.%N)
out_bytes=$(cat "$DATA"/big.out/*.safetensors | wc -c)
rss=$(python3 -c "import json; print(json.load(open('$DATA/convert.json'))['result']['peak_rss_bytes'])")

# Baseline: cp of a file with exactly the output's byte count, then sync it (convert fsyncs).
head -c "$out_bytes" /dev/zero > "$DATA/cp.src"
cat "$DATA/cp.src" > /dev/null
t2=$(date +%s.%N)
cp "$DATA/cp.src" "$DATA/cp.out" && sync "$DATA/cp.out"
t3=$(date +%s.%N)

python3 - "$t0" "$t1" "$t2" "$t3" "$out_bytes" "$rss" <<'PY'
import sys
t0, t1, t2, t3, n, rss = map(float, sys.argv[1:])
conv, cp = t1 - t0, t3 - t2
print(f"output bytes:             {int(n):,} (one shard)")
print(f"cp + sync:                {cp:.2f} s  ({n / cp / 1e9:.2f} GB/s)")
print(f"ckpt convert:             {conv:.2f} s  ({n / conv / 1e9:.2f} GB/s)")
print(f"ratio convert/cp:         {cp / conv:.2f}   goal >= 0.8")
print(f"peak RSS:                 {rss / 2**20:.0f} MiB   goal <= 1024 MiB (--memory-budget 1G)")
PY
rm -f "$DATA/cp.src" "$DATA/cp.out"
rm -rf "$DATA/big.out"

# --experts int8-shift against --experts keep, same input, same run (goal <= 1.2): best of
# two runs each, alternating, every run starting with no dirty pages left from the last.
best_keep=""; best_int8=""
for _ in 1 2; do
  for mode in keep int8-shift; do
    rm -rf "$DATA/big.$mode"; sync
    t0=$(date +%s.%N)
    "$CKPT" convert -q --experts "$mode" "$DATA/big" "$DATA/big.$mode" > /dev/null
    t1=$(date +%s.%N)
    t=$(python3 -c "print($t1 - $t0)")
    if [ "$mode" = keep ]; then
      best_keep=$(python3 -c "b='$best_keep'; print(min($t, float(b)) if b else $t)")
    else
      best_int8=$(python3 -c "b='$best_int8'; print(min($t, float(b)) if b else $t)")
    fi
    rm -rf "$DATA/big.$mode"
  done
done
python3 - "$best_keep" "$best_int8" <<'PY'
import sys
keep, int8 = map(float, sys.argv[1:])
print(f"convert --experts keep:       {keep:.2f} s (best of 2)")
print(f"convert --experts int8-shift: {int8:.2f} s (best of 2)")
print(f"ratio int8-shift/keep:        {int8 / keep:.2f}   goal <= 1.2")
PY

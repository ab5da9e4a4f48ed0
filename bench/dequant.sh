#!/usr/bin/env bash
# Dequantization throughput per ggml type, in MB/s of quantized input, measured through
# `ckpt dump --as f32 -o /dev/null` on every tensor of the qwen3next fixture.
# Usage: bash bench/dequant.sh path/to/ckpt [GGUF]   (BENCH_DQ_REPEAT=N, default 30)
# Each dump is a separate process that also opens and parses the file, so the script also
# times `--as raw` of the same tensors and reports the difference as the dequant-only rate.
set -euo pipefail
CKPT=$(readlink -f "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
GGUF=${2:-$HERE/../tests/fixtures/ggml/qwen3next-tiny.gguf}
REPEAT=${BENCH_DQ_REPEAT:-30}

# "TYPE NAME BYTES" for each tensor, from the GGUF header (read with the standard library only).
list_tensors() {
  python3 - "$1" <<'PY'
import struct, sys
f = open(sys.argv[1], "rb")
def rd(fmt): return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
def rstr(): return f.read(rd("Q")).decode()
SIZES = {0: "I", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def skip(t):
    if t == 8: rstr()
    elif t == 9:
        et, n = rd("I"), rd("Q")
        for _ in range(n): skip(et)
    else: rd(SIZES[t])
NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
         11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
         20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 30: "BF16", 39: "MXFP4"}
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         9: (32, 36), 20: (32, 18), 39: (32, 17), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 21: (256, 110),
         22: (256, 82), 23: (256, 136)}
assert f.read(4) == b"GGUF"
rd("I"); nt, nkv = rd("Q"), rd("Q")
for _ in range(nkv):
    rstr(); skip(rd("I"))
for _ in range(nt):
    name = rstr(); nd = rd("I"); ne = [rd("Q") for _ in range(nd)]; t = rd("I"); rd("Q")
    if t not in NAMES: continue
    n = 1
    for d in ne: n *= d
    blk, size = BLOCK[t]
    print(NAMES[t], name, n // blk * size)
PY
}

now() { date +%s.%N; }

# Seconds to dump every tensor in "$@" REPEAT times with --as "$AS".
time_dumps() {
  local t0 t1
  t0=$(now)
  for _ in $(seq "$REPEAT"); do
    for name in "$@"; do "$CKPT" dump "$GGUF" "$name" --as "$AS" -o /dev/null; done
  done
  t1=$(now)
  python3 -c "print($t1 - $t0)"
}

listing=$(list_tensors "$GGUF")
printf "%-8s %8s %8s %14s %14s\n" type tensors "MB in" "f32 MB/s" "dequant MB/s"
for type in $(echo "$listing" | awk '{print $1}' | sort -u); do
  names=$(echo "$listing" | awk -v t="$type" '$1 == t {print $2}')
  bytes=$(echo "$listing" | awk -v t="$type" '$1 == t {s += $3} END {print s}')
  # shellcheck disable=SC2086
  t_f32=$(AS=f32 time_dumps $names)
  # shellcheck disable=SC2086
  t_raw=$(AS=raw time_dumps $names)
  python3 - "$type" "$(echo "$names" | wc -l)" "$bytes" "$REPEAT" "$t_f32" "$t_raw" <<'PY'
import sys
t, n, b, r, f32, raw = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
mb = b * r / 1e6
dq = f"{mb / (f32 - raw):14.0f}" if f32 > raw else f"{'n/a':>14}"
print(f"{t:<8} {n:8d} {b / 1e6:8.2f} {mb / f32:14.0f} {dq}")
PY
done

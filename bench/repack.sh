#!/usr/bin/env bash
# Benchmark for `ckpt repack-experts` against `cp` of the same input to the same disk,
# in the same run (never a timed test). Usage: bench/repack.sh path/to/ckpt [DATA_DIR]
# The input is a synthetic qwen3next-like GGUF (bench/make_gguf.py, ~1.5 GB; set
# BENCH_LAYERS / BENCH_EXPERTS to change it). Both sides run with the page cache warm,
# best of 3. The repacker fsyncs its outputs, so the fair baseline is cp followed by an
# fsync of the copy (`sync FILE`); plain cp is printed too. Goal: cp+sync / repack >= 0.8.
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
LAYERS=${BENCH_LAYERS:-16}
EXPERTS=${BENCH_EXPERTS:-64}
DIR="$DATA/repack"
IN="$DIR/moe-${LAYERS}x${EXPERTS}.gguf"
mkdir -p "$DIR"

source "$(dirname "$0")/lib.sh"

[ -f "$IN" ] || python3 "$(dirname "$0")/make_gguf.py" "$IN" "$LAYERS" "$EXPERTS"
bytes=$(stat -c %s "$IN")
cat "$IN" > /dev/null  # warm the page cache for both sides

copy_plain() { rm -f "$DIR/copy.gguf"; cp "$IN" "$DIR/copy.gguf"; }
copy_synced() { rm -f "$DIR/copy.gguf"; cp "$IN" "$DIR/copy.gguf"; sync "$DIR/copy.gguf"; }
repack() { rm -rf "$DIR/pack"; "$CKPT" repack-experts --quiet "$IN" "$DIR/pack"; }

echo "== repack-experts vs cp on $IN ($(python3 -c "print(f'{$bytes/1e9:.2f}')") GB)"
t_cp=$(best_of_3 copy_plain)
t_cp_sync=$(best_of_3 copy_synced)
rm -f "$DIR/copy.gguf"
t_repack=$(best_of_3 repack)
gbs() { python3 -c "print(f'{$bytes/$1/1e9:.2f}')"; }
echo "cp:                ${t_cp} s ($(gbs "$t_cp") GB/s)"
echo "cp + sync:         ${t_cp_sync} s ($(gbs "$t_cp_sync") GB/s)"
echo "ckpt repack:       ${t_repack} s ($(gbs "$t_repack") GB/s; includes SHA-256 of the input, xxh3 of every part, fsync)"
echo "ratio cp+sync/repack: $(ratio "$t_cp_sync" "$t_repack")   goal >= 0.8"
echo "ratio cp/repack:      $(ratio "$t_cp" "$t_repack")"
"$CKPT" validate -q "$DIR/pack"
rm -rf "$DIR/pack"

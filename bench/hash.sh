#!/usr/bin/env bash
# Benchmark for `ckpt hash` against coreutils in the same run, on the same files, page
# cache warm for both sides, best of 3 (never a timed test). Usage:
#   bench/hash.sh path/to/ckpt [DATA_DIR]
# Data: DATA_DIR/real from bench/make_data.py (BENCH_SHARDS x BENCH_SHARD_MB, made if missing).
#   hash --algo xxh3   vs cat FILES > /dev/null   goal: cat/hash >= 0.8
#   hash --algo sha256 vs sha256sum FILES          goal: sha256sum/hash >= 5
# `hash --algo sha256` computes SHA-256 twice over every payload byte (once per tensor,
# once per file, both from one read), so it is also reported against that amount of work.
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARDS=${BENCH_SHARDS:-8}
SHARD_MB=${BENCH_SHARD_MB:-256}
mkdir -p "$DATA"

source "$(dirname "$0")/lib.sh"

if [ ! -f "$DATA/real/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DATA/real" "$SHARDS" "$SHARD_MB"
fi
files=("$DATA"/real/*.safetensors)
bytes=$(cat "${files[@]}" | wc -c)
gbs() { python3 -c "print(f'{$bytes/$1/1e9:.2f}')"; }
cat "${files[@]}" > /dev/null  # warm the page cache for both sides

echo "== ckpt hash on ${#files[@]} shards, $(python3 -c "print(f'{$bytes/1e9:.2f}')") GB, $(nproc) cores"
t_cat=$(best_of_3 sh -c 'cat "$@" > /dev/null' sh "${files[@]}")
t_xxh=$(best_of_3 "$CKPT" hash -q --algo xxh3 "$DATA/real" -o /dev/null)
echo "cat FILES > /dev/null:     ${t_cat} s ($(gbs "$t_cat") GB/s)"
echo "ckpt hash --algo xxh3:     ${t_xxh} s ($(gbs "$t_xxh") GB/s)"
echo "ratio cat/hash-xxh3:       $(ratio "$t_cat" "$t_xxh")   goal >= 0.8"

t_sum=$(best_of_3 sha256sum "${files[@]}")
t_sha=$(best_of_3 "$CKPT" hash -q --algo sha256 "$DATA/real" -o /dev/null)
echo "sha256sum FILES:           ${t_sum} s ($(gbs "$t_sum") GB/s)"
echo "ckpt hash --algo sha256:   ${t_sha} s ($(gbs "$t_sha") GB/s of input; SHA-256 over every byte twice: per tensor and per file)"
echo "ratio sha256sum/hash:      $(ratio "$t_sum" "$t_sha")   goal >= 5"

# The check reads and hashes the same way; the manifest is tiny.
"$CKPT" hash -q --algo sha256 "$DATA/real" -o "$DATA/hash-manifest.json"
t_check=$(best_of_3 "$CKPT" hash -q --check "$DATA/hash-manifest.json" "$DATA/real")
echo "ckpt hash --check (sha256): ${t_check} s ($(gbs "$t_check") GB/s)"
rm -f "$DATA/hash-manifest.json"

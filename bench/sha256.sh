#!/usr/bin/env bash
# SHA-256 of ONE file against OpenSSL's single-core speed, in the same run, on the same
# file, page cache warm, best of 3 (never a timed test). Usage:
#   bench/sha256.sh path/to/ckpt [SIZE_MB] [DATA_DIR]        (SIZE_MB default 4096: 4 GiB)
# Data: DATA_DIR/sha-SIZE_MB, one safetensors shard from bench/make_data.py (made if missing).
#   openssl dgst -sha256 FILE                       the baseline (one core, SHA-NI where present)
#   ckpt hash --algo sha256 FILE                    goal: openssl/hash >= 0.9
#   ckpt validate --sha256 FILE                     goal: openssl/validate >= 0.9
#   ckpt validate --deep --sha256 FILE              (reported; --deep also scans every value)
# `hash --algo sha256` hashes every payload byte twice (per tensor and per file): the file
# hash runs on a thread of its own fed by a read-ahead thread, the tensors on the cores.
set -euo pipefail
CKPT=$(readlink -f "$1")
SIZE_MB=${2:-4096}
DATA=${3:-bench-data}
DIR="$DATA/sha-$SIZE_MB"
mkdir -p "$DATA"
source "$(dirname "$0")/lib.sh"

if [ ! -f "$DIR/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DIR" 1 "$SIZE_MB" > /dev/null
fi
FILE=$(ls "$DIR"/*.safetensors | head -n1)
bytes=$(stat -c %s "$FILE")
gbs() { python3 -c "print(f'{$bytes/$1/1e9:.2f}')"; }
cat "$FILE" > /dev/null  # warm the page cache for every side

echo "== SHA-256 of one file: $(python3 -c "print(f'{$bytes/2**20:.0f}')") MiB, $(nproc) cores"
t_ssl=$(best_of_3 openssl dgst -sha256 "$FILE")
t_hash=$(best_of_3 "$CKPT" hash -q --algo sha256 "$FILE" -o /dev/null)
t_val=$(BENCH_ALLOW_FAILURE=1 best_of_3 "$CKPT" validate -q --sha256 "$FILE")
t_deep=$(BENCH_ALLOW_FAILURE=1 best_of_3 "$CKPT" validate -q --deep --sha256 "$FILE")
echo "openssl dgst -sha256:          ${t_ssl} s ($(gbs "$t_ssl") GB/s)"
echo "ckpt hash --algo sha256:       ${t_hash} s ($(gbs "$t_hash") GB/s)"
echo "ckpt validate --sha256:        ${t_val} s ($(gbs "$t_val") GB/s)"
echo "ckpt validate --deep --sha256: ${t_deep} s ($(gbs "$t_deep") GB/s)"
echo "ratio openssl/hash:            $(ratio "$t_ssl" "$t_hash")   goal >= 0.9"
echo "ratio openssl/validate:        $(ratio "$t_ssl" "$t_val")   goal >= 0.9"
echo "ratio openssl/validate-deep:   $(ratio "$t_ssl" "$t_deep")"

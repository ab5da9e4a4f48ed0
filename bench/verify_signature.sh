#!/usr/bin/env bash
# `ckpt verify-signature` (OMS bundle: every file's SHA-256, files hashed in parallel on all
# cores) against `sha256sum` of the same files (one core, one file after another), in the
# same run, page cache warm, best of 3 (never a timed test). Usage:
#   bench/verify_signature.sh path/to/ckpt [SHARDS] [SHARD_MB] [DATA_DIR]   (default 8 x 600 MB: >= 4 GiB)
# Data: DATA_DIR/oms-SHARDSxSHARD_MB, a safetensors checkpoint from bench/make_data.py (made if
# missing), signed once with a fresh P-384 key. Goal: sha256sum / verify-signature >= 1.0 with
# more than one shard (shards hash in parallel; one shard is one core either way).
set -euo pipefail
CKPT=$(readlink -f "$1")
SHARDS=${2:-8}
SHARD_MB=${3:-600}
DATA=${4:-bench-data}
DIR="$DATA/oms-${SHARDS}x${SHARD_MB}"
mkdir -p "$DATA"
source "$(dirname "$0")/lib.sh"

if [ ! -f "$DIR/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DIR" "$SHARDS" "$SHARD_MB" > /dev/null
fi
KEY="$DATA/oms-bench-key.pem"
[ -f "$KEY" ] || openssl ecparam -name secp384r1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$KEY"
openssl pkey -in "$KEY" -pubout -out "$KEY.pub" 2>/dev/null
BUNDLE="$DATA/oms-${SHARDS}x${SHARD_MB}.sig"
"$CKPT" sign -q --private-key "$KEY" -o "$BUNDLE" "$DIR"

files=("$DIR"/*)
bytes=$(cat "${files[@]}" | wc -c)  # also warms the page cache for every side
gbs() { python3 -c "print(f'{$bytes/$1/1e9:.2f}')"; }
echo "== OMS verify-signature vs sha256sum: ${#files[@]} files, $(python3 -c "print(f'{$bytes/2**30:.2f}')") GiB, $(nproc) cores"
t_sum=$(best_of_3 sha256sum "${files[@]}")
t_oms=$(best_of_3 "$CKPT" verify-signature -q --public-key "$KEY.pub" --bundle "$BUNDLE" "$DIR")
printf 'sha256sum          %7.2f s  %s GB/s\n' "$t_sum" "$(gbs "$t_sum")"
printf 'verify-signature   %7.2f s  %s GB/s\n' "$t_oms" "$(gbs "$t_oms")"
echo "ratio sha256sum/verify-signature $(ratio "$t_sum" "$t_oms") (goal >= 1.0 with more than one shard)"

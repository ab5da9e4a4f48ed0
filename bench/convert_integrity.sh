#!/usr/bin/env bash
# Integrity in the same read (issue 32): `convert --hub-sha256` / `--expect-signature` hash
# the input beside the conversion (io/lockstep_hasher.h). What the disk read, against the
# input's size, from a cold page cache that is smaller than the model (bench/disk_reads.py:
# a memory cgroup of CACHE_MB, as a 700 GB checkpoint is larger than any host's cache), for
#   plain            convert alone: the floor, one read
#   sha256sum+conv   the input hashed first, then converted (two commands)
#   hub-sha256       convert --hub-sha256 LIST
#   expect-signature convert --expect-signature BUNDLE --public-key PUB
#   sign-key         convert --sign-key KEY (the provenance records IN's digests)
# and, with BASE (an older ckpt whose checks read IN on threads of their own), the same
# checks by it. Wall times are ratios to `plain` in the same run. Goal: every integrity run
# reads the disk once (read/input about 1.0, as `plain`).
# Usage: bench/convert_integrity.sh CKPT [SHARDS] [SHARD_MB] [DATA_DIR] [CACHE_MB] [BASE]
#   (default 8 x 128 MB, cache 384 MB; on the H200 host: 8 600 bench-data 2048)
set -euo pipefail
CKPT=$(readlink -f "$1")
SHARDS=${2:-8}
SHARD_MB=${3:-128}
DATA=${4:-bench-data}
CACHE_MB=${5:-384}
BASE=${6:+$(readlink -f "$6")}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR="$DATA/integrity-${SHARDS}x${SHARD_MB}"
OUT="$DATA/integrity-out"
mkdir -p "$DATA"
if [ ! -f "$DIR/model.safetensors.index.json" ]; then
  BENCH_LAYOUT=v3 python3 "$HERE/make_data.py" "$DIR" "$SHARDS" "$SHARD_MB" > /dev/null
fi
KEY="$DATA/integrity-key.pem"
[ -f "$KEY" ] || openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$KEY"
openssl pkey -in "$KEY" -pubout -out "$KEY.pub" 2>/dev/null
BUNDLE="$DATA/integrity.sig"
"$CKPT" sign -q --private-key "$KEY" -o "$BUNDLE" "$DIR"
LIST="$DATA/integrity.SHA256SUMS"
(cd "$DIR" && sha256sum ./*.safetensors) > "$LIST"

files=("$DIR"/*)
drops=()
for f in "${files[@]}"; do drops+=(--drop "$f"); done
bytes=$(cat "${files[@]}" | wc -c)
echo "== convert with its input's integrity checks: ${#files[@]} files, $(python3 -c "print(f'{$bytes/2**30:.2f}')") GiB," \
     "page cache bounded to $CACHE_MB MiB, $(nproc) cores"
printf '%-26s %8s %10s %10s\n' run seconds read/input time/plain
plain_s=""
run() {  # label, command...
  local label=$1 line s read
  shift
  rm -rf "$OUT"
  line=$(python3 "$HERE/disk_reads.py" --cache-mb "$CACHE_MB" "${drops[@]}" -- "$@" | tail -1)
  s=${line%% *}
  read=$(echo "$line" | cut -d' ' -f2)
  [ -n "$plain_s" ] || plain_s=$s
  printf '%-26s %8.2f %10s %10s\n' "$label" "$s" "$(python3 -c "print(f'{$read/$bytes:.2f}')")" \
         "$(python3 -c "print(f'{$s/$plain_s:.2f}')")"
}
checks() {  # prefix, ckpt
  run "$1hub-sha256" "$2" convert -q --hub-sha256 "$LIST" "$DIR" "$OUT"
  run "$1expect-signature" "$2" convert -q --expect-signature "$BUNDLE" --public-key "$KEY.pub" "$DIR" "$OUT"
  run "$1sign-key" "$2" convert -q --sign-key "$KEY" "$DIR" "$OUT"
}
run plain "$CKPT" convert -q "$DIR" "$OUT"
run sha256sum+convert bash -c "sha256sum \"\$@\" > /dev/null && \"$CKPT\" convert -q \"$DIR\" \"$OUT\"" _ "$DIR"/*.safetensors
checks "" "$CKPT"
[ -z "$BASE" ] || checks "base " "$BASE"
rm -rf "$OUT"

#!/usr/bin/env bash
# GPU host: `ckpt-gpu verify` against `cat IN OUT > /dev/null` (page cache warm) on the same
# files in the same run (never a timed test). Usage:
#   bench/verify_gpu.sh BIN_DIR [DATA_DIR]        BIN_DIR holds ckpt and ckpt-gpu
# Data (made if missing): a synthetic DeepSeek-V4-layout shard of BENCH_VERIFY_SHARD_MB
# (default 4400 MB, > 4 GiB; bench/make_data.py) converted with --experts keep, int8-shift
# and bf16; a qwen3next-like GGUF of BENCH_VERIFY_GGUF_LAYERS (default 48, ~4.6 GB;
# bench/make_gguf.py) and its expert pack (repack-experts). Prints, for each, the time of
# both, the ratio cat/verify (goal >= 0.8) and verify's peak RSS (--stats, getrusage).
# BENCH_VERIFY_BIN_BEFORE=DIR also times DIR/ckpt-gpu on the same files (before/after).
set -euo pipefail
BIN=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARD_MB=${BENCH_VERIFY_SHARD_MB:-4400}
LAYERS=${BENCH_VERIFY_GGUF_LAYERS:-48}
BEFORE=${BENCH_VERIFY_BIN_BEFORE:-}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DATA"
IN="$DATA/vg-in"
# bench/make_data.py's shard, with the dense FP8 scales kept in 2^-27 .. 2^13 so that every
# FP8 x scale product is a finite BF16 (convert refuses to write inf).
if [ ! -f "$IN/model.safetensors.index.json" ]; then
  rm -rf "$IN"
  python3 - "$HERE" "$IN" "$SHARD_MB" > /dev/null <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import make_data
make_data.E8M0_OK = bytes(100 + b % 41 for b in range(256))
sys.argv = ["make_data.py", sys.argv[2], "1", sys.argv[3]]
make_data.main()
PY
fi
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2-$1:.3f}')"; }

# measure NAME "CAT FILES..." -- VERIFY ARGS...
measure() {
  local name=$1; shift
  local files=()
  while [ "$1" != "--" ]; do files+=("$1"); shift; done
  shift
  local bytes; bytes=$(cat "${files[@]}" | wc -c)
  cat "${files[@]}" > /dev/null; cat "${files[@]}" > /dev/null   # warm
  local t0 t1 t2 t3 stats rc
  t0=$(now); cat "${files[@]}" > /dev/null; t1=$(now)
  t2=$(now); set +e; stats=$("$BIN/ckpt-gpu" verify -q --stats "$@" 2>&1 >/dev/null); rc=$?; set -e; t3=$(now)
  local tc tv; tc=$(secs "$t0" "$t1"); tv=$(secs "$t2" "$t3")
  printf '%-16s %6.2f GB  cat %6.2f s (%5.2f GB/s)  verify %7.2f s (%5.2f GB/s, exit %d)  ratio cat/verify %5.2f (goal >= 0.8)\n' \
    "$name" "$(python3 -c "print($bytes/1e9)")" "$tc" "$(python3 -c "print($bytes/1e9/$tc)")" "$tv" \
    "$(python3 -c "print($bytes/1e9/$tv)")" "$rc" "$(python3 -c "print($tc/$tv)")"
  echo "                 ${stats#*ckpt-gpu stats: }"
  if [ -n "$BEFORE" ]; then
    t2=$(now); set +e; "$BEFORE/ckpt-gpu" verify -q "$@" > /dev/null 2>&1; rc=$?; set -e; t3=$(now)
    tv=$(secs "$t2" "$t3")
    printf '                 before: verify %7.2f s (exit %d)  ratio cat/verify %5.2f\n' "$tv" "$rc" "$(python3 -c "print($tc/$tv)")"
  fi
}

echo "== ckpt-gpu verify vs cat (warm), $(nproc) cores"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true
for mode in keep int8-shift bf16; do
  OUT="$DATA/vg-$mode"
  rm -rf "$OUT"
  "$BIN/ckpt" convert -q --experts "$mode" "$IN" "$OUT" > /dev/null
  measure "$mode" "$IN"/*.safetensors "$OUT"/*.safetensors -- --reference "$IN" "$OUT"
  rm -rf "$OUT"
done
# Random blocks with finite f16 scales, as in real files (BENCH_GGUF_FINITE=1).
GGUF="$DATA/vgf.gguf"
[ -f "$GGUF" ] || BENCH_GGUF_FINITE=1 python3 "$HERE/make_gguf.py" "$GGUF" "$LAYERS" 64 > /dev/null
measure gguf "$GGUF" -- "$GGUF"
# The same without the device digest: every f32 back to the host and compared (the old way).
measure gguf-full "$GGUF" -- --full-compare "$GGUF"
rm -rf "$DATA/vg-pack"
"$BIN/ckpt" repack-experts --quiet "$GGUF" "$DATA/vg-pack" > /dev/null
measure expert-pack "$GGUF" $(find "$DATA/vg-pack" -type f) -- --reference "$GGUF" "$DATA/vg-pack"
measure pack-full "$GGUF" $(find "$DATA/vg-pack" -type f) -- --full-compare --reference "$GGUF" "$DATA/vg-pack"

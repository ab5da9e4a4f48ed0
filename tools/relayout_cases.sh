#!/usr/bin/env bash
# The three ckpt relayout cases for the real-client check on a GPU host (tools/relayout_client.py):
#   OUTDIR/qwen3moe/{in,out}   Qwen3-MoE (transformers 5 config of tests/fixtures/families/qwen3moe-fp8
#                              with moe_intermediate_size 192: 96 rows a rank at TP 2), relayout --tp 2
#                              (re-blocked to 32x32, experts stay FP8)
#   OUTDIR/dsv3/{in,out}       DeepSeek-V3 (tests/fixtures/families/dsv3-fp8/in), relayout --tp 2 (64x64)
#   OUTDIR/promoted/{in,out}   the Qwen3-MoE input with --min-block 64x64: the routed experts promoted to
#                              BF16 (modules_to_not_convert), attention re-blocked to 64x64 (vLLM needs a square block)
# Each OUT is checked here with ckpt preflight --tp 2 and ckpt validate --deep --reference.
# Usage: tools/relayout_cases.sh OUTDIR [CKPT]   (CKPT default: build/ckpt)
set -euo pipefail
OUT=${1:?usage: relayout_cases.sh OUTDIR [CKPT]}
HERE=$(cd "$(dirname "$0")/.." && pwd)
CKPT=${2:-$HERE/build/ckpt}
FIX=$HERE/tests/fixtures/families
mkdir -p "$OUT"
rm -rf "$OUT/qwen3moe" "$OUT/dsv3" "$OUT/promoted"

python3 - "$FIX/qwen3moe-fp8/in/config.json" "$OUT/qwen3moe-config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["moe_intermediate_size"] = 192
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
python3 "$HERE/tools/make_qwen3_moe_fp8.py" "$OUT/qwen3moe-config.json" "$OUT/qwen3moe/in"
cp "$FIX/qwen3moe-fp8/in/generation_config.json" "$OUT/qwen3moe/in/"
mkdir -p "$OUT/dsv3" && cp -r "$FIX/dsv3-fp8/in" "$OUT/dsv3/in"
mkdir -p "$OUT/promoted" && cp -r "$OUT/qwen3moe/in" "$OUT/promoted/in"

run() {  # case, relayout options...
  local c=$1; shift
  echo "== $c: ckpt relayout $*"
  "$CKPT" preflight -q --tp 2 "$OUT/$c/in" > /dev/null 2>&1 && { echo "$c: the input already loads at tp 2" >&2; exit 1; }
  "$CKPT" relayout "$@" "$OUT/$c/in" "$OUT/$c/out"
  "$CKPT" preflight -q --tp 2 "$OUT/$c/out"
  "$CKPT" validate -q --deep --reference "$OUT/$c/in" "$OUT/$c/out"
}
run qwen3moe --tp 2
run dsv3 --tp 2
run promoted --tp 2 --min-block 64x64
echo "cases in $OUT: compare each with  python3 tools/relayout_client.py $OUT/CASE/in $OUT/CASE/out"

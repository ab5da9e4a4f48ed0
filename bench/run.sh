#!/usr/bin/env bash
# Benchmarks for `ckpt validate`, each against a baseline run in the same session
# on the same files (never a timed test). Usage: bench/run.sh path/to/ckpt [DATA_DIR]
# Prints seconds for each run (best of 3, page cache warm for both sides) and ratios.
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARDS=${BENCH_SHARDS:-8}
SHARD_MB=${BENCH_SHARD_MB:-256}
mkdir -p "$DATA"

BENCH_ALLOW_FAILURE=1  # validate exits 1 when it finds something; the time still counts
source "$(dirname "$0")/lib.sh"

echo "== structural validation of the sparse DeepSeek-V4-Flash-0731 checkpoint (72,317 tensors, 48 shards)"
rm -rf "$DATA/0731-sparse"
"$CKPT" synth deepseek-v4-flash-0731 "$DATA/0731-sparse" --sparse >/dev/null
"$CKPT" validate -q "$DATA/0731-sparse"
t_struct=$(best_of_3 "$CKPT" validate -q "$DATA/0731-sparse")
echo "ckpt validate (structural): ${t_struct} s   goal < 1 s"

echo "== payload benchmarks on $SHARDS x ${SHARD_MB} MB of real random data"
if [ ! -f "$DATA/real/model.safetensors.index.json" ]; then
  python3 "$(dirname "$0")/make_data.py" "$DATA/real" "$SHARDS" "$SHARD_MB"
fi
files=("$DATA"/real/*.safetensors)
bytes=$(cat "${files[@]}" | wc -c)
cat "${files[@]}" > /dev/null  # warm the page cache for both sides
"$CKPT" validate -q --deep "$DATA/real"

t_cat=$(best_of_3 sh -c 'cat "$@" > /dev/null' sh "${files[@]}")
t_deep=$(best_of_3 "$CKPT" validate -q --deep "$DATA/real")
echo "cat FILES > /dev/null:     ${t_cat} s  ($(python3 -c "print(f'{$bytes/$t_cat/1e9:.2f}')") GB/s)"
echo "ckpt validate --deep:      ${t_deep} s  ($(python3 -c "print(f'{$bytes/$t_deep/1e9:.2f}')") GB/s)"
echo "ratio deep/cat throughput: $(ratio "$t_cat" "$t_deep")   goal >= 0.8"

t_sum=$(best_of_3 sha256sum "${files[@]}")
t_sha=$(best_of_3 "$CKPT" validate -q --sha256 "$DATA/real")
echo "sha256sum FILES:           ${t_sum} s"
echo "ckpt validate --sha256:    ${t_sha} s"
echo "ratio sha256 throughput:   $(ratio "$t_sum" "$t_sha")   goal >= 5"

echo "== hash manifests"
bash "$(dirname "$0")/hash.sh" "$CKPT" "$DATA"

echo "== converter"
bash "$(dirname "$0")/convert.sh" "$CKPT" "$DATA"
bash "$(dirname "$0")/convert_bf16.sh" "$CKPT" "$DATA"

echo "== repack-experts"
bash "$(dirname "$0")/repack.sh" "$CKPT" "$DATA"

echo "== dequantization (MB/s of input per ggml type)"
bash "$(dirname "$0")/dequant.sh" "$CKPT"

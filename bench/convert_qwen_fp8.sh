#!/usr/bin/env bash
# Qwen3 *-FP8 layout benchmark: one synthetic shard of BENCH_QWEN_SHARD_MB (default 4096) MB of
# per-expert F8_E4M3 weights model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight [1536, 4096]
# with BF16 weight_scale_inv [12, 32] (128 x 128 blocks), converted to BF16 with a 1 GiB memory
# budget, against `cp` + `sync` writing the same number of output bytes (2x the FP8 bytes) to
# the same disk in the same run. Prints the ratio and the peak RSS.
# Usage: bench/convert_qwen_fp8.sh CKPT [DATA_DIR]
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
SHARD_MB=${BENCH_QWEN_SHARD_MB:-4096}
IN="$DATA/qwen-fp8-in"
mkdir -p "$DATA"
if [ ! -f "$IN/model.safetensors" ]; then
  python3 - "$IN" "$SHARD_MB" <<'PY'
import json, os, struct, sys
out, mb = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
rows, cols = 1536, 4096
wbytes, sbytes = rows * cols, (rows // 128) * (cols // 128) * 2
count = max(1, mb * 2**20 // (wbytes + sbytes))
header, offset, names = {}, 0, []
for i in range(count):
    layer, rest = divmod(i, 3 * 64)
    expert, part = divmod(rest, 3)
    base = f"model.layers.{layer}.mlp.experts.{expert}.{('gate_proj', 'up_proj', 'down_proj')[part]}"
    header[base + ".weight"] = {"dtype": "F8_E4M3", "shape": [rows, cols], "data_offsets": [offset, offset + wbytes]}
    offset += wbytes
    header[base + ".weight_scale_inv"] = {"dtype": "BF16", "shape": [rows // 128, cols // 128],
                                          "data_offsets": [offset, offset + sbytes]}
    offset += sbytes
    names.append(base)
text = json.dumps(header, separators=(",", ":"))
text += " " * ((8 - len(text) % 8) % 8)
nan_free = bytes(range(256)).replace(b"\x7f", b"\x7e").replace(b"\xff", b"\xfe")
scale = struct.pack("<H", 0x3B80) * (sbytes // 2)  # BF16 2^-8
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text.encode())
    for _ in names:
        f.write(os.urandom(wbytes).translate(nan_free))
        f.write(scale)
cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "torch_dtype": "bfloat16",
       "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
PY
fi
"$CKPT" validate -q "$IN"
cat "$IN"/*.safetensors > /dev/null   # input in the page cache for both runs
in_bytes=$(stat -c %s "$IN/model.safetensors")

rm -rf "$DATA/qwen-fp8-out" "$DATA/cp.out"; sync
t0=$(date +%s.%N)
"$CKPT" convert -q --memory-budget 1G --json "$DATA/convert-qwen.json" "$IN" "$DATA/qwen-fp8-out" > /dev/null
t1=$(date +%s.%N)
out_bytes=$(stat -c %s "$DATA/qwen-fp8-out/model.safetensors")
rss=$(python3 -c "import json; print(json.load(open('$DATA/convert-qwen.json'))['result']['peak_rss_bytes'])")
rm -rf "$DATA/qwen-fp8-out"; sync

head -c "$out_bytes" /dev/zero > "$DATA/cp.src"
cat "$DATA/cp.src" > /dev/null
t2=$(date +%s.%N)
cp "$DATA/cp.src" "$DATA/cp.out" && sync "$DATA/cp.out"
t3=$(date +%s.%N)
rm -f "$DATA/cp.src" "$DATA/cp.out"

python3 - "$t0" "$t1" "$t2" "$t3" "$in_bytes" "$out_bytes" "$rss" <<'PY'
import sys
t0, t1, t2, t3, nin, n, rss = map(float, sys.argv[1:])
conv, cp = t1 - t0, t3 - t2
print(f"input / output bytes:  {int(nin):,} -> {int(n):,} ({n / nin:.2f}x)")
print(f"cp + sync:             {cp:.2f} s  ({n / cp / 1e9:.2f} GB/s written)")
print(f"ckpt convert (Qwen FP8, BF16 scales): {conv:.2f} s  ({n / conv / 1e9:.2f} GB/s written)")
print(f"ratio convert/cp:      {cp / conv:.2f}   goal >= 0.9")
print(f"peak RSS:              {rss / 2**20:.0f} MiB   goal <= 1024 MiB (--memory-budget 1G)")
PY

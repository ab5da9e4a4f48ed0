#!/usr/bin/env python3
"""Writes a safetensors checkpoint of real (random, valid) data for benchmarks:
SHARDS shards of about SHARD_MB MB each, mixing the dtypes of a DeepSeek-V4 shard
(I8 experts, F8_E4M3 + F8_E8M0 pairs, BF16, F32), with an index. Values are valid:
no NaN/Inf, no E4M3 0x7F/0xFF, no E8M0 0xFF. Usage: make_data.py OUT [SHARDS] [SHARD_MB]
BENCH_LAYOUT=v3 writes the DeepSeek-V3 layout instead: F8_E4M3 experts and linears with
F32 `weight_scale_inv` block scales (128 x 128), BF16 norms."""
import json
import os
import struct
import sys

E4M3_OK = bytes(b if (b & 0x7F) != 0x7F else b - 1 for b in range(256))
# Dense block scales 2^-27 .. 2^12: convert refuses a scale that takes 448 (the largest
# E4M3 value) beyond BF16 (numerics/scale_rule.h), as a random byte up to 2^127 would.
E8M0_OK = bytes(100 + b % 40 for b in range(256))
# Expert block scales as in real MXFP4 experts: a row's block exponents sit within a few
# steps of its maximum (real DeepSeek-V4 rows: span p50 2, p90 3, p99 4.2, worst 5; the
# INT8-shift spec, section 8). BENCH_EXPERT_SPAN sets the largest span written: 3 (default)
# keeps every block on the lossless path, 5 folds about a third of them.
SPAN = int(os.environ.get("BENCH_EXPERT_SPAN", "3"))
E8M0_EXPERT = bytes(121 + min(SPAN, (b * (SPAN + 1)) // 256) for b in range(256))
BF16_HI_OK = bytes(b & 0xBF for b in range(256))  # clears an exponent bit: finite
F32_HI_OK = BF16_HI_OK


def payload(dtype, n, name=""):
    raw = bytearray(os.urandom(n))
    if dtype == "F8_E4M3":
        return bytes(raw).translate(E4M3_OK)
    if dtype == "F8_E8M0":
        return bytes(raw).translate(E8M0_EXPERT if ".experts." in name else E8M0_OK)
    if dtype == "BF16":
        raw[1::2] = bytes(raw[1::2]).translate(BF16_HI_OK)
    if dtype == "F32":
        raw[3::4] = bytes(raw[3::4]).translate(F32_HI_OK)
    return bytes(raw)


def write_shard(path, tensors):
    header, offset = {}, 0
    for name, dtype, shape, nbytes in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode())
        for name, dtype, shape, nbytes in tensors:
            left = nbytes
            while left:
                step = min(left, 64 << 20)
                f.write(payload(dtype, step, name))
                left -= step
    return offset


def v3_scales(n):
    # Finite F32 multipliers near real V3 ones (1e-4 .. 1e-2): no product overflows BF16.
    vals = os.urandom(n)
    return b"".join(struct.pack("<f", 1e-4 * (1 + b / 2.6)) for b in vals)


def v3_tensors(s, shard_mb):
    tensors = []
    experts = max(1, shard_mb // 12)  # each expert triple is 12 MiB of F8_E4M3
    for e in range(experts):
        for w in ("gate_proj", "up_proj", "down_proj"):
            base = f"model.layers.{s}.mlp.experts.{e}.{w}"
            tensors.append((base + ".weight", "F8_E4M3", [2048, 2048], 2048 * 2048))
            tensors.append((base + ".weight_scale_inv", "F32", [16, 16], 16 * 16 * 4))
    tensors.append((f"model.layers.{s}.input_layernorm.weight", "BF16", [7168], 7168 * 2))
    return tensors


def main_v3(out, shards, shard_mb):
    os.makedirs(out, exist_ok=True)
    weight_map, total = {}, 0
    for s in range(1, shards + 1):
        name = f"model-{s:05d}-of-{shards:05d}.safetensors"
        tensors = v3_tensors(s, shard_mb)
        header, offset = {}, 0
        for tname, dtype, shape, nbytes in tensors:
            header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        text = json.dumps(header, separators=(",", ":"))
        text += " " * (-len(text) % 8)
        with open(os.path.join(out, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text.encode())
            for tname, dtype, shape, nbytes in tensors:
                f.write(v3_scales(nbytes // 4) if dtype == "F32" else payload(dtype, nbytes, tname))
        total += offset
        for t in tensors:
            weight_map[t[0]] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "bench", "torch_dtype": "bfloat16",
                   "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                           "weight_block_size": [128, 128]}}, f, indent=2)
    print(f"wrote {shards} shards (DeepSeek-V3 layout), {total} payload bytes to {out}")


def main():
    out = sys.argv[1]
    if os.environ.get("BENCH_LAYOUT") == "v3":
        main_v3(out, int(sys.argv[2]) if len(sys.argv) > 2 else 8, int(sys.argv[3]) if len(sys.argv) > 3 else 256)
        return
    shards = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    shard_mb = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    os.makedirs(out, exist_ok=True)
    weight_map, total = {}, 0
    experts = max(1, shard_mb // 7)  # each expert triple is ~6.4 MB
    for s in range(1, shards + 1):
        name = f"model-{s:05d}-of-{shards:05d}.safetensors"
        tensors = []
        for e in range(experts):
            for w, shape in (("w1", [2048, 1024]), ("w3", [2048, 1024]), ("w2", [2048, 1024])):
                base = f"layers.{s}.ffn.experts.{e}.{w}"
                tensors.append((base + ".weight", "I8", shape, shape[0] * shape[1]))
                tensors.append((base + ".scale", "F8_E8M0", [shape[0], 64], shape[0] * 64))
        # Dense FP8 linears with E8M0 block scales, about 5% of the bytes as in a 0731 shard.
        for k in range(max(1, shard_mb // 320)):
            base = f"layers.{s}.attn.wq_{k}"
            tensors.append((base + ".weight", "F8_E4M3", [4096, 4096], 4096 * 4096))
            tensors.append((base + ".scale", "F8_E8M0", [32, 32], 32 * 32))
        tensors.append((f"layers.{s}.attn.compressor.wkv.weight", "BF16", [1024, 4096], 1024 * 4096 * 2))
        tensors.append((f"layers.{s}.hc_attn_fn", "F32", [24, 16384], 24 * 16384 * 4))
        total += write_shard(os.path.join(out, name), tensors)
        for t in tensors:
            weight_map[t[0]] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "bench", "torch_dtype": "bfloat16",
                   "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                           "weight_block_size": [128, 128]}}, f, indent=2)
    print(f"wrote {shards} shards, {total} payload bytes to {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a Qwen3-MoE block-FP8 checkpoint (the released layout: per-expert F8_E4M3
gate/up/down_proj.weight with BF16 weight_scale_inv on a 128x128 grid, FP8 attention, BF16
embeddings, norms and router) from a config.json: every tensor that config implies, random
data (FP8 codes without NaN, positive BF16 scales), one shard per layer group.

Usage: make_qwen3_moe_fp8.py CONFIG OUT [--seed N] [--shard-gib G] [--zero-fp8]
  --zero-fp8 writes FP8 weights as holes (sparse: all-zero codes take no disk), for size runs.
Used by tools/relayout_cases.sh and bench/relayout.sh; no dependency beyond the standard library."""
import argparse
import json
import math
import os
import random
import struct

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--shard-gib", type=float, default=4.0)
ap.add_argument("--zero-fp8", action="store_true")
a = ap.parse_args()
cfg = json.load(open(a.config))
rng = random.Random(a.seed)
H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
hd = cfg.get("head_dim") or H // nh
E = cfg.get("num_experts") or cfg.get("num_local_experts")
I = cfg["moe_intermediate_size"]
bn, bk = cfg["quantization_config"]["weight_block_size"]

tensors = []  # (name, dtype, shape)
def plain(name, shape): tensors.append((name, "BF16", shape))
def linear(module, rows, cols):
    tensors.append((module + ".weight", "F8_E4M3", [rows, cols]))
    tensors.append((module + ".weight_scale_inv", "BF16", [math.ceil(rows / bn), math.ceil(cols / bk)]))
plain("model.embed_tokens.weight", [V, H])
for l in range(L):
    p = f"model.layers.{l}."
    plain(p + "input_layernorm.weight", [H])
    plain(p + "post_attention_layernorm.weight", [H])
    linear(p + "self_attn.q_proj", nh * hd, H)
    linear(p + "self_attn.k_proj", nkv * hd, H)
    linear(p + "self_attn.v_proj", nkv * hd, H)
    linear(p + "self_attn.o_proj", H, nh * hd)
    plain(p + "self_attn.q_norm.weight", [hd])
    plain(p + "self_attn.k_norm.weight", [hd])
    for e in range(E):
        linear(p + f"mlp.experts.{e}.gate_proj", I, H)
        linear(p + f"mlp.experts.{e}.up_proj", I, H)
        linear(p + f"mlp.experts.{e}.down_proj", H, I)
    plain(p + "mlp.gate.weight", [E, H])
plain("model.norm.weight", [H])
if not cfg.get("tie_word_embeddings", False):
    plain("lm_head.weight", [V, H])

SIZE = {"BF16": 2, "F8_E4M3": 1}
nan_free = bytes(range(256)).replace(b"\x7f", b"\x7e").replace(b"\xff", b"\xfe")
# BF16 values made a buffer at a time (a per-value loop took minutes for a 4 GiB layout).
# A little-endian BF16 is (low, high) = (exponent bit 0 << 7 | 7 mantissa bits,
# sign << 7 | exponent bits 7..1): the low byte is any byte, the high byte picks the
# sign and the exponent's upper bits from a table.
def table(highs):
    return bytes(highs[i % len(highs)] for i in range(256))
weight_high = table([s << 7 | h for s in (0, 1) for h in (60, 61, 62)])  # exponents 120 .. 125, either sign
scale_high = table([57, 58, 59, 60])                                      # exponents 114 .. 121, positive
def bf16(n, high):
    out = bytearray(n)
    out[0::2] = rng.randbytes(n // 2)
    out[1::2] = rng.randbytes(n // 2).translate(high)
    return bytes(out)
def data(name, dtype, n):
    if dtype == "F8_E4M3":
        return None if a.zero_fp8 else rng.randbytes(n).translate(nan_free)
    if name.endswith("_scale_inv"):  # positive BF16 multipliers 2^-13 .. 2^-6 (times 1 .. 2)
        return bf16(n, scale_high)
    return bf16(n, weight_high)

os.makedirs(a.out, exist_ok=True)
limit = int(a.shard_gib * 2**30)
shards, cur, size = [], [], 0
for t in tensors:
    n = SIZE[t[1]] * math.prod(t[2])
    if cur and size + n > limit:
        shards.append(cur); cur, size = [], 0
    cur.append(t); size += n
shards.append(cur)
weight_map, total = {}, 0
for i, group in enumerate(shards):
    fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    header, off = {}, 0
    for name, dtype, shape in group:
        n = SIZE[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
        weight_map[name] = fname
    total += off
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(a.out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode())
        for name, dtype, shape in group:
            n = SIZE[dtype] * math.prod(shape)
            d = data(name, dtype, n)
            if d is None:
                f.seek(n, os.SEEK_CUR)
            else:
                f.write(d)
        f.truncate()
json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
          open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=1)
print(f"wrote {a.out}: {len(tensors)} tensors, {total} bytes in {len(shards)} shards")

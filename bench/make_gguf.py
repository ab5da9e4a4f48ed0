#!/usr/bin/env python3
"""Writes a synthetic qwen3next-like GGUF v3 for bench/repack.sh (standard library only).

Usage: make_gguf.py OUT.gguf [LAYERS] [EXPERTS]
Per layer: ffn_gate_exps / ffn_up_exps IQ3_S ne {2048, 512, E} (880 B rows, 450,560 B per
expert: not a multiple of 4096), ffn_down_exps Q4_K ne {512, 2048, E} (589,824 B per expert),
F32 norms, a router, and blk.N.ssm_a (F32, -exp(A_log), all < 0) on recurrent layers; plus a
Q8_0 token_embd. Payload bytes are random: the repacker copies them without decoding
(BENCH_GGUF_FINITE=1: with every f16 scale finite, as in real files).
Defaults (16 layers x 64 experts) give about 1.5 GB. Layout rules: gguf.md §1-§2.
"""
import math
import os
import random
import struct
import sys

ALIGN = 32
N_EMBD, N_FF, N_VOCAB = 2048, 512, 32768
GGML = {"F32": (0, 1, 4), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "IQ3_S": (21, 256, 110)}
GGUF_STRING, GGUF_UINT32 = 8, 4
# BENCH_GGUF_FINITE=1: every f16 scale finite (byte offsets of the scales in each block).
FINITE_SCALES = os.environ.get("BENCH_GGUF_FINITE") == "1"
SCALE_FIELDS = {"Q8_0": [0], "Q4_K": [0, 2], "IQ3_S": [0]}


def gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_string(key: str, value: str) -> bytes:
    return gguf_string(key) + struct.pack("<i", GGUF_STRING) + gguf_string(value)


def kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<iI", GGUF_UINT32, value)


def nbytes(type_name: str, ne) -> int:
    _, block, size = GGML[type_name]
    assert ne[0] % block == 0
    return ne[0] // block * size * math.prod(ne[1:])


def pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def tensor_list(layers: int, experts: int):
    tensors = [("token_embd.weight", "Q8_0", [N_EMBD, N_VOCAB])]
    for il in range(layers):
        b = f"blk.{il}"
        tensors.append((f"{b}.attn_norm.weight", "F32", [N_EMBD]))
        if (il + 1) % 4 != 0:
            tensors.append((f"{b}.ssm_a", "F32", [32]))
        tensors.append((f"{b}.ffn_gate_inp.weight", "F32", [N_EMBD, experts]))
        tensors.append((f"{b}.ffn_gate_exps.weight", "IQ3_S", [N_EMBD, N_FF, experts]))
        tensors.append((f"{b}.ffn_up_exps.weight", "IQ3_S", [N_EMBD, N_FF, experts]))
        tensors.append((f"{b}.ffn_down_exps.weight", "Q4_K", [N_FF, N_EMBD, experts]))
    tensors.append(("output_norm.weight", "F32", [N_EMBD]))
    return tensors


def header(tensors, layers: int, experts: int) -> bytes:
    kvs = [kv_string("general.architecture", "qwen3next"), kv_string("general.name", "repack-bench"),
           kv_u32("general.alignment", ALIGN), kv_u32("qwen3next.block_count", layers),
           kv_u32("qwen3next.expert_count", experts), kv_u32("qwen3next.expert_used_count", 8),
           kv_u32("qwen3next.full_attention_interval", 4)]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset = 0
    for name, type_name, ne in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}q", *ne)
        out += struct.pack("<iQ", GGML[type_name][0], offset)
        offset += pad(nbytes(type_name, ne))
    return out + b"\0" * (pad(len(out)) - len(out))


def payload(name: str, type_name: str, size: int, rng: random.Random):
    """Yields the tensor's bytes in chunks: valid F32 for F32 tensors, random bytes otherwise."""
    if name.endswith(".ssm_a"):
        yield struct.pack(f"<{size // 4}f", *(-math.exp(rng.uniform(-3, 2)) for _ in range(size // 4)))
    elif type_name == "F32":
        yield struct.pack(f"<{size // 4}f", *(rng.uniform(-1, 1) for _ in range(size // 4)))
    elif FINITE_SCALES:
        # Random blocks whose f16 scales are finite, as in real files (exponent < 31).
        _, block, bsize = GGML[type_name]
        per = (16 << 20) // bsize
        for start in range(0, size, per * bsize):
            n = min(per * bsize, size - start)
            b = bytearray(os.urandom(n))
            for off in SCALE_FIELDS[type_name]:
                hi = off + 1
                b[hi::bsize] = bytes(x & 0xBB for x in b[hi::bsize])
            yield bytes(b)
    else:
        chunk = 16 << 20
        for start in range(0, size, chunk):
            yield os.urandom(min(chunk, size - start))


def main() -> int:
    out = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    experts = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    rng = random.Random(1)
    tensors = tensor_list(layers, experts)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header(tensors, layers, experts))
        for name, type_name, ne in tensors:
            size = nbytes(type_name, ne)
            for piece in payload(name, type_name, size, rng):
                f.write(piece)
            f.write(b"\0" * (pad(size) - size))
    os.replace(tmp, out)
    print(f"wrote {out}: {os.path.getsize(out) / 1e9:.2f} GB, {layers} layers x {experts} experts")
    return 0


if __name__ == "__main__":
    sys.exit(main())

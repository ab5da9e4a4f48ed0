#!/usr/bin/env python3
"""Writes a GGUF v3 with one tensor per dequantizable ggml type, for bench/dequant.sh
(standard library only).

Usage: make_dequant_gguf.py OUT.gguf [MB_PER_TENSOR]   (default 8)
Tensor `t.TYPE` holds about MB_PER_TENSOR MB of random blocks whose scale fields are
realistic: f16 scales are normal numbers of magnitude 2^-10..2^-5 with random signs (no
NaN/Inf/denormal, so no slow path is timed), Q8_K's f32 scale likewise, MXFP4's E8M0 byte
in 118..133, and F32/F16/BF16 elements are normal numbers. Layout rules: gguf.md §1-§2.
"""
import os
import struct
import sys

ALIGN = 32
ROW = 4096  # elements per row: a multiple of every block size
# name: (id, elements per block, bytes per block, offsets of f16 scale fields)
TYPES = {
    "F32": (0, 1, 4, []), "F16": (1, 1, 2, []), "BF16": (30, 1, 2, []),
    "Q4_0": (2, 32, 18, [0]), "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]), "Q5_1": (7, 32, 24, [0, 2]),
    "Q8_0": (8, 32, 34, [0]), "Q8_1": (9, 32, 36, [0, 2]), "Q2_K": (10, 256, 84, [80, 82]),
    "Q3_K": (11, 256, 110, [108]), "Q4_K": (12, 256, 144, [0, 2]), "Q5_K": (13, 256, 176, [0, 2]),
    "Q6_K": (14, 256, 210, [208]), "Q8_K": (15, 256, 292, []), "IQ2_XXS": (16, 256, 66, [0]),
    "IQ2_XS": (17, 256, 74, [0]), "IQ3_XXS": (18, 256, 98, [0]), "IQ4_NL": (20, 32, 18, [0]),
    "IQ3_S": (21, 256, 110, [0]), "IQ2_S": (22, 256, 82, [0]), "IQ4_XS": (23, 256, 136, [0]),
    "MXFP4": (39, 32, 17, []),
}


def gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# Byte maps applied with bytes.translate to random bytes: high bytes of f16 / bf16 / f32
# values with exponents in a normal range and a random sign.
def high_byte_map(lo: int, hi: int) -> bytes:
    allowed = [s | e for s in (0x00, 0x80) for e in range(lo, hi + 1)]
    return bytes(allowed[b % len(allowed)] for b in range(256))


F16_SCALE_HIGH = high_byte_map(0x14, 0x17)  # f16 exponent 5..10: 2^-10..2^-5
F16_VALUE_HIGH = high_byte_map(0x30, 0x3B)  # 2^-3..2^3
BF16_VALUE_HIGH = high_byte_map(0x3C, 0x40)  # also the top byte of F32 elements
E8M0_MAP = bytes(118 + b % 16 for b in range(256))


def payload(name: str, nbytes: int) -> bytes:
    _, block, size, f16_fields = TYPES[name]
    data = bytearray(os.urandom(nbytes))
    if name == "F16":
        data[1::2] = data[1::2].translate(F16_VALUE_HIGH)
    elif name in ("BF16", "F32"):
        step = 2 if name == "BF16" else 4
        data[step - 1::step] = data[step - 1::step].translate(BF16_VALUE_HIGH)
    elif name == "Q8_K":
        data[3::size] = data[3::size].translate(BF16_VALUE_HIGH)
    elif name == "MXFP4":
        data[0::size] = data[0::size].translate(E8M0_MAP)
    for off in f16_fields:
        data[off + 1::size] = data[off + 1::size].translate(F16_SCALE_HIGH)
    return bytes(data)


def main() -> None:
    out = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    tensors = []
    for name, (tid, block, size, _) in TYPES.items():
        row_bytes = ROW // block * size
        rows = max(1, int(mb * 1e6) // row_bytes)
        tensors.append((f"t.{name}", tid, rows, row_bytes * rows, name))
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    header += gguf_string("general.architecture") + struct.pack("<i", 8) + gguf_string("bench")
    offset = 0
    for tname, tid, rows, nbytes, _ in tensors:
        header += gguf_string(tname) + struct.pack("<IQQIQ", 2, ROW, rows, tid, offset)
        offset = pad(offset + nbytes)
    with open(out, "wb") as f:
        f.write(header + b"\0" * (pad(len(header)) - len(header)))
        for _, _, _, nbytes, name in tensors:
            body = payload(name, nbytes)
            f.write(body + b"\0" * (pad(nbytes) - nbytes))


if __name__ == "__main__":
    main()

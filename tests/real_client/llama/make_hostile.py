#!/usr/bin/env python3
"""Writes the hostile GGUF corpus of the llama.cpp differential test (check_llama.py).

Usage: make_hostile.py OUT_DIR   writes OUT_DIR/<case>.gguf, one file per case, and prints the
names. Deterministic (no randomness, no clock): the same bytes on every run, so a listed
disagreement always names the same file. Each case is one mutation of a small valid file
(gguf.md §11's minimum corpus: truncations, overflows, misalignments, duplicate names and keys,
bad types, oversized counts, bad scales) or a valid edge that both readers must accept.
"""
import math
import os
import struct
import sys

# GGUF KV value types (gguf.h)
U8, I8, U16, I16, U32, I32, F32T, BOOL, STR, ARR, U64, I64, F64 = range(13)
# ggml types used here: (id, block elements, block bytes)
GT = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
      "BF16": (30, 1, 2), "MXFP4": (39, 32, 17)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, vtype, value):
    out = gstr(key) + struct.pack("<i", vtype)
    if vtype == ARR:
        etype, items = value
        out += struct.pack("<iQ", etype, len(items))
        for it in items:
            out += scalar_bytes(etype, it)
        return out
    return out + scalar_bytes(vtype, value)


def scalar_bytes(vtype, v):
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32T: "<f", BOOL: "<B", U64: "<Q",
           I64: "<q", F64: "<d"}
    return gstr(v) if vtype == STR else struct.pack(fmt[vtype], v)


def pad(n, a):
    return (n + a - 1) // a * a


class Gguf:
    """A small valid file, built field by field so that a case can change any one of them."""

    def __init__(self):
        self.version = 3
        self.alignment = 32
        self.kvs = [("general.architecture", STR, "llama"), ("general.name", STR, "ckptkit hostile corpus"),
                    ("llama.block_count", U32, 1)]
        # (name, ne, type name, data bytes); data sized by nbytes
        self.tensors = [("a.weight", [8, 2], "F32", f32s([0.5 * i for i in range(16)])),
                        ("b.weight", [32, 2], "Q8_0", q8_0_blocks(2)),
                        ("c.weight", [256, 1], "Q4_K", q4_k_blocks(1))]
        self.n_tensors = None  # header counts; None = the real counts
        self.n_kv = None
        self.offsets = None  # explicit offsets; None = the packing rule
        self.pad_last = True
        self.trailing = b""
        self.padding_byte = 0
        self.raw_dims = {}  # tensor index -> exact dims bytes (n_dims + ne)
        self.raw_types = {}  # tensor index -> ggml type id

    def header(self):
        n_t = len(self.tensors) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kvs) if self.n_kv is None else self.n_kv
        out = b"GGUF" + struct.pack("<IQQ", self.version, n_t, n_kv)
        for kv in self.kvs:
            out += kv if isinstance(kv, bytes) else kv_bytes(*kv)
        offs = self.offsets or self.packed_offsets()
        for i, (name, ne, tname, _) in enumerate(self.tensors):
            out += gstr(name)
            out += self.raw_dims.get(i, struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne))
            out += struct.pack("<i", self.raw_types.get(i, GT[tname][0]))
            out += struct.pack("<Q", offs[i])
        return out

    def packed_offsets(self):
        offs, at = [], 0
        for _, _, _, data in self.tensors:
            offs.append(at)
            at += pad(len(data), self.alignment)
        return offs

    def bytes(self):
        h = self.header()
        out = bytearray(h + bytes([self.padding_byte]) * (pad(len(h), self.alignment) - len(h)))
        offs = self.offsets or self.packed_offsets()
        start = len(out)
        for i, (_, _, _, data) in enumerate(self.tensors):
            at = start + offs[i]
            if len(out) < at:
                out += bytes([self.padding_byte]) * (at - len(out))
            out[at:at + len(data)] = data
            last = i == len(self.tensors) - 1
            if not last or self.pad_last:
                end = at + pad(len(data), self.alignment)
                if len(out) < end:
                    out += bytes([self.padding_byte]) * (end - len(out))
        return bytes(out) + self.trailing


def f32s(vals):
    return b"".join(struct.pack("<f", v) for v in vals)


def f16(v):
    return struct.pack("<e", v)


def q8_0_blocks(n, d=0x3C00):
    return b"".join(struct.pack("<H", d) + bytes((i * 7 + k) % 256 for i in range(32)) for k in range(n))


def q4_k_blocks(n, d=0x3800, dmin=0x3400):
    return b"".join(struct.pack("<HH", d, dmin) + bytes((i * 13 + k) % 256 for i in range(140)) for k in range(n))


def dims(*ne, n_dims=None):
    return struct.pack("<I", len(ne) if n_dims is None else n_dims) + b"".join(struct.pack("<q", d) for d in ne)


def cases():
    """(name, bytes) for every case; the names say what was done."""
    out = []

    def add(name, g_or_bytes):
        out.append((name, g_or_bytes if isinstance(g_or_bytes, bytes) else g_or_bytes.bytes()))

    base = Gguf().bytes()
    hdr_len = len(Gguf().header())
    # --- truncations
    add("trunc_in_magic", base[:3])
    add("trunc_after_version", base[:8])
    add("trunc_in_counts", base[:20])
    add("trunc_in_first_kv", base[:40])
    add("trunc_in_tensor_infos", base[:hdr_len - 10])
    add("trunc_in_first_tensor_data", base[:pad(hdr_len, 32) + 20])
    add("trunc_in_last_tensor_data", base[:len(base) - 100])
    # --- magic and version
    add("bad_magic", b"GGUX" + base[4:])
    add("big_endian_magic", b"FUGG" + base[4:])
    for v in (0, 1, 4, 0x03000000):
        g = Gguf()
        g.version = v
        add(f"version_{v:#x}", g)
    # --- counts
    for name, nt, nkv in (("n_tensors_2p63", 1 << 63, None), ("n_tensors_max", (1 << 64) - 1, None),
                          ("n_kv_2p63", None, 1 << 63), ("n_kv_one_too_many", None, 4),
                          ("n_tensors_one_too_many", 4, None)):
        g = Gguf()
        g.n_tensors, g.n_kv = nt, nkv
        add(name, g)
    # --- keys and values
    g = Gguf(); g.kvs.append(("", U32, 1)); add("key_empty", g)
    g = Gguf(); g.kvs.append(("general.name", STR, "again")); add("key_duplicate", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iI", 13, 0)); add("kv_type_13", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iI", -1, 0)); add("kv_type_minus_1", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iiQ", ARR, ARR, 0)); add("kv_array_of_array", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iQ", STR, (1 << 64) - 1)); add("string_len_max", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iQ", STR, (1 << 30) + 1)); add("string_len_2p30_plus_1", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iiQ", ARR, U32, (1 << 30) + 1)); add("array_n_2p30_plus_1", g)
    g = Gguf(); g.kvs.append(gstr("general.x") + struct.pack("<iiQ", ARR, U64, 1 << 20)); add("array_past_eof", g)
    g = Gguf(); g.kvs.append(("general.flag", BOOL, 2)); add("bool_value_2", g)
    g = Gguf(); g.kvs.append((b"general.\xff\xfe", U8, 1)); add("key_not_utf8", g)
    g = Gguf(); g.kvs.append(("General.Name", U8, 1)); add("key_bad_syntax", g)
    # --- alignment
    for name, kv in (("alignment_0", ("general.alignment", U32, 0)), ("alignment_3", ("general.alignment", U32, 3)),
                     ("alignment_as_int32", ("general.alignment", I32, 32)),
                     ("alignment_2p31", ("general.alignment", U32, 1 << 31))):
        g = Gguf(); g.kvs.append(kv); add(name, g)
    g = Gguf(); g.kvs.append(("general.alignment", U32, 64)); g.alignment = 64; add("alignment_64_valid", g)
    # 2 MiB: above ckptkit's 1 MiB bound; with no tensors the file need not reach the boundary.
    g = Gguf(); g.kvs.append(("general.alignment", U32, 1 << 21)); g.tensors = []; add("alignment_2mib_no_tensors", g)
    # --- tensor infos
    g = Gguf(); g.tensors[0] = ("x" * 64,) + g.tensors[0][1:]; add("tensor_name_64_bytes", g)
    g = Gguf(); g.tensors[0] = ("x" * 63,) + g.tensors[0][1:]; add("tensor_name_63_bytes_valid", g)
    g = Gguf(); g.tensors[1] = ("a.weight",) + g.tensors[1][1:]; add("tensor_name_duplicate", g)
    g = Gguf(); g.raw_dims[0] = dims(8, 2, 1, 1, 1); add("n_dims_5", g)
    g = Gguf(); g.raw_dims[0] = dims(n_dims=0xFFFFFFFF); add("n_dims_max", g)
    g = Gguf(); g.raw_dims[0] = dims(8, -1); add("ne_minus_1", g)
    g = Gguf(); g.raw_dims[0] = dims(1 << 40, (1 << 30) + 1); add("elements_overflow_int64", g)
    # ne0·ne1 = 2^64 wraps to 0 in int64: gguf.cpp's overflow check is skipped (nelements == 0)
    # and the tensor gets 0 bytes, so it is given none here (the offsets follow ggml's sizes).
    g = Gguf(); g.raw_dims[0] = dims(1 << 32, 1 << 32); g.tensors[0] = g.tensors[0][:3] + (b"",)
    add("elements_wrap_to_zero", g)
    g = Gguf(); g.raw_dims[0] = dims(1 << 40, 1 << 30); g.tensors[0] = g.tensors[0][:3] + (b"",)
    add("elements_wrap_to_zero_2p40_by_2p30", g)
    for tid in (4, 31, 36, 43, -1):
        g = Gguf(); g.raw_types[0] = tid; add(f"ggml_type_{tid}".replace("-", "minus_"), g)
    g = Gguf(); g.raw_dims[2] = dims(100, 1); add("q4_k_ne0_not_block_multiple", g)
    g = Gguf(); g.raw_dims[2] = dims(1 << 62, 1); add("q4_k_nbytes_past_file", g)
    # 4·(2^62 − 1) = 2^64 − 4 bytes: GGML_PAD wraps to 0, so the next offsets follow from 0 bytes.
    g = Gguf(); g.raw_dims[0] = dims((1 << 62) - 1); g.tensors[0] = g.tensors[0][:3] + (b"",); add("f32_pad_overflow", g)
    g = Gguf(); g.raw_dims[0] = dims(8, (1 << 42) + 1); add("token_embd_dim_2p42_plus_1", g)
    g = Gguf(); g.raw_dims[2] = dims(256, 1 << 20); add("dims_exceed_data", g)
    g = Gguf(); g.raw_dims[0] = dims(0, 2); g.tensors[0] = g.tensors[0][:3] + (b"",); add("zero_elements_valid", g)
    g = Gguf(); g.raw_dims[0] = dims(); g.tensors[0] = g.tensors[0][:3] + (f32s([1.0]),); add("scalar_n_dims_0_valid", g)
    # --- offsets and layout
    g = Gguf(); g.offsets = [32, 96, 192]; add("first_offset_not_0", g)
    g = Gguf(); g.offsets = [0, 96, 224]; add("offset_gap", g)
    g = Gguf(); g.offsets = [0, 32, 128]; add("offset_overlap", g)
    g = Gguf(); g.offsets = [0, 224, 64]; add("offsets_swapped", g)
    g = Gguf(); g.offsets = [0, 64, 129]; add("offset_unaligned", g)
    g = Gguf(); g.padding_byte = 0x55; add("nonzero_padding", g)
    g = Gguf(); g.trailing = b"\x00" * 100; add("trailing_bytes", g)
    g = Gguf(); g.tensors[2] = ("c.weight", [8], "F32", f32s([1.0] * 8)); g.tensors[0] = ("a.weight", [3], "F32", f32s([1, 2, 3]))
    g.tensors = [g.tensors[2], g.tensors[0]]; g.pad_last = False; add("last_tensor_unpadded", g)
    g = Gguf(); g.tensors = []; add("no_tensors_valid", g)
    # --- content (ggml_validate_row_data)
    g = Gguf(); g.tensors[1] = ("b.weight", [32, 2], "Q8_0", q8_0_blocks(1) + q8_0_blocks(1, d=0x7E00)); add("q8_0_scale_nan", g)
    g = Gguf(); g.tensors[2] = ("c.weight", [256, 1], "Q4_K", q4_k_blocks(1, dmin=0x7C00)); add("q4_k_dmin_inf", g)
    g = Gguf(); g.tensors[2] = ("c.weight", [256, 1], "Q4_K", q4_k_blocks(1, d=0x0001)); add("q4_k_scale_subnormal_valid", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [8, 2], "F32", f32s([1.0] * 15 + [math.nan])); add("f32_nan", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [8, 2], "F32", f32s([1.0] * 15 + [math.inf])); add("f32_inf", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [16], "F16", b"".join(f16(1.0) for _ in range(15)) + struct.pack("<H", 0x7C01)); add("f16_nan", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [16], "BF16", struct.pack("<H", 0x7F80) * 16); add("bf16_inf", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [32], "MXFP4", b"\xff" + bytes(range(16))); add("mxfp4_e8m0_ff", g)
    g = Gguf(); g.tensors[0] = ("a.weight", [32], "MXFP4", b"\xfe" + bytes(range(16))); add("mxfp4_e8m0_fe_valid", g)
    # --- vocabulary arrays (llama-vocab casts them)
    g = Gguf(); g.kvs += [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b"])),
                          ("tokenizer.ggml.scores", ARR, (I8, [0, 1]))]; add("vocab_scores_int8", g)
    g = Gguf(); g.kvs += [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b"])),
                          ("tokenizer.ggml.scores", ARR, (F32T, [0.0]))]; add("vocab_scores_count_short", g)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    names = set()
    for name, data in cases():
        assert name not in names, name
        names.add(name)
        with open(os.path.join(sys.argv[1], name + ".gguf"), "wb") as f:
            f.write(data)
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

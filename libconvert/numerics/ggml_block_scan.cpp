#include "numerics/ggml_block_scan.h"

#include <algorithm>
#include <cstring>

#include "core/ggml_types.h"

namespace ckpt {

namespace {

constexpr size_t kChunkElements = 4096;  // counting pass length; the first bad index is searched per chunk

void note_first_bad(BlockScanResult& r, uint64_t at) {
  if (!r.first_bad_byte) r.first_bad_byte = at;
}

// IEEE-style element check: |x| == exponent mask is Inf, above it NaN. The counting loop
// has no branches so it vectorizes; the first bad index is only searched in a chunk that
// has one.
template <class U, U kExpMask, U kAbsMask>
void scan_float_elements(std::span<const uint8_t> bytes, uint64_t base, BlockScanResult& r) {
  const size_t n = bytes.size() / sizeof(U);
  const uint8_t* p = bytes.data();
  auto load = [p](size_t i) { U u; std::memcpy(&u, p + i * sizeof(U), sizeof(U)); return U(u & kAbsMask); };
  for (size_t start = 0; start < n; start += kChunkElements) {
    const size_t end = std::min(n, start + kChunkElements);
    uint64_t nan = 0, inf = 0;
    for (size_t i = start; i < end; ++i) {
      const U a = load(i);
      nan += a > kExpMask;
      inf += a == kExpMask;
    }
    if (nan + inf != 0 && !r.first_bad_byte) {
      for (size_t i = start; i < end; ++i) {
        if (load(i) >= kExpMask) { note_first_bad(r, base + i * sizeof(U)); break; }
      }
    }
    r.nan += nan;
    r.inf += inf;
  }
}

uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
bool fp16_not_finite(uint16_t h) { return (h & 0x7C00) == 0x7C00; }

// Byte positions of the fp16 scale fields inside one block (ggml-common.h layouts).
struct Fp16Scales {
  uint32_t offsets[2];
  uint32_t count;
};

std::optional<Fp16Scales> fp16_scale_fields(int32_t type) {
  switch (type) {
    case kGgmlQ4_0: case kGgmlQ5_0: case kGgmlQ8_0:               // {d; ...}
    case kGgmlIQ2_XXS: case kGgmlIQ2_XS: case kGgmlIQ3_XXS: case kGgmlIQ1_S:
    case kGgmlIQ4_NL: case kGgmlIQ3_S: case kGgmlIQ2_S: case kGgmlIQ4_XS:
    case kGgmlQ1_0: case kGgmlQ2_0:
      return Fp16Scales{{0, 0}, 1};
    case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ8_1:               // {d; m (or s); ...}
    case kGgmlQ4_K: case kGgmlQ5_K:                                // {d; dmin; ...}
      return Fp16Scales{{0, 2}, 2};
    case kGgmlQ2_K: return Fp16Scales{{80, 82}, 2};  // scales[16], qs[64], d, dmin
    case kGgmlQ3_K: return Fp16Scales{{108, 0}, 1};  // hmask[32], qs[64], scales[12], d
    case kGgmlQ6_K: return Fp16Scales{{208, 0}, 1};  // ql[128], qh[64], scales[16], d
    case kGgmlTQ1_0: return Fp16Scales{{52, 0}, 1};  // qs[48], qh[4], d
    case kGgmlTQ2_0: return Fp16Scales{{64, 0}, 1};  // qs[64], d
    default: return std::nullopt;
  }
}

void scan_fp16_scales(std::span<const uint8_t> bytes, uint32_t block_bytes, Fp16Scales fields, uint64_t base,
                      BlockScanResult& r) {
  const size_t n_blocks = bytes.size() / block_bytes;
  const uint8_t* p = bytes.data();
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = p + b * block_bytes;
    for (uint32_t k = 0; k < fields.count; ++k) {
      const bool bad = fp16_not_finite(load_u16(block + fields.offsets[k]));
      r.bad_scales += bad;
      if (bad) note_first_bad(r, base + b * block_bytes + fields.offsets[k]);
    }
  }
}

// Q8_K (an activation type, legal in files) keeps a float d at offset 0.
void scan_q8_k(std::span<const uint8_t> bytes, uint32_t block_bytes, uint64_t base, BlockScanResult& r) {
  const size_t n_blocks = bytes.size() / block_bytes;
  for (size_t b = 0; b < n_blocks; ++b) {
    uint32_t d;
    std::memcpy(&d, bytes.data() + b * block_bytes, 4);
    const bool bad = (d & 0x7F800000u) == 0x7F800000u;
    r.bad_scales += bad;
    if (bad) note_first_bad(r, base + b * block_bytes);
  }
}

// IQ1_M has no d field: its fp16 scale is the top nibbles of the four u16 words of
// scales[8] (block offset 48, after qs[32] and qh[16]), reassembled as in ggml.
void scan_iq1_m(std::span<const uint8_t> bytes, uint32_t block_bytes, uint64_t base, BlockScanResult& r) {
  constexpr uint32_t kScalesAt = 48;
  const size_t n_blocks = bytes.size() / block_bytes;
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* sc = bytes.data() + b * block_bytes + kScalesAt;
    const uint16_t h = static_cast<uint16_t>((load_u16(sc) >> 12) | ((load_u16(sc + 2) >> 8) & 0x00F0) |
                                             ((load_u16(sc + 4) >> 4) & 0x0F00) | (load_u16(sc + 6) & 0xF000));
    const bool bad = fp16_not_finite(h);
    r.bad_scales += bad;
    if (bad) note_first_bad(r, base + b * block_bytes + kScalesAt);
  }
}

// MXFP4 {u8 e; u8 qs[16]}: E8M0 0xFF is NaN in OCP MX; ggml's validate_e_e8m0 rejects it.
void scan_mxfp4(std::span<const uint8_t> bytes, uint32_t block_bytes, uint64_t base, BlockScanResult& r) {
  const size_t n_blocks = bytes.size() / block_bytes;
  uint64_t bad = 0;
  for (size_t b = 0; b < n_blocks; ++b) bad += bytes[b * block_bytes] == 0xFF;
  if (bad != 0 && !r.first_bad_byte) {
    for (size_t b = 0; b < n_blocks; ++b) {
      if (bytes[b * block_bytes] == 0xFF) { note_first_bad(r, base + b * block_bytes); break; }
    }
  }
  r.bad_e8m0 += bad;
}

}  // namespace

void scan_ggml_blocks(int32_t type, std::span<const uint8_t> whole_blocks, uint64_t base_offset, BlockScanResult& r) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (info == nullptr || info->removed) return;
  switch (type) {
    case kGgmlF32:
      return scan_float_elements<uint32_t, 0x7F800000u, 0x7FFFFFFFu>(whole_blocks, base_offset, r);
    case kGgmlF16:
      return scan_float_elements<uint16_t, 0x7C00, 0x7FFF>(whole_blocks, base_offset, r);
    case kGgmlBF16:
      return scan_float_elements<uint16_t, 0x7F80, 0x7FFF>(whole_blocks, base_offset, r);
    case kGgmlF64:
      return scan_float_elements<uint64_t, 0x7FF0000000000000ull, 0x7FFFFFFFFFFFFFFFull>(whole_blocks, base_offset, r);
    case kGgmlQ8_K: return scan_q8_k(whole_blocks, info->type_size, base_offset, r);
    case kGgmlIQ1_M: return scan_iq1_m(whole_blocks, info->type_size, base_offset, r);
    case kGgmlMXFP4: return scan_mxfp4(whole_blocks, info->type_size, base_offset, r);
    default: break;
  }
  if (auto fields = fp16_scale_fields(type)) scan_fp16_scales(whole_blocks, info->type_size, *fields, base_offset, r);
}

}  // namespace ckpt

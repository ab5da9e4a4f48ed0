// The field readers of ggml blocks (gguf.md §5) shared by the scalar reference
// (ggml_dequant.cpp) and the AVX2 and AVX-512 block loops: one definition of each, so that
// the loops differ from the reference only in how they compute, never in what they read.
// (kernels/decode.h has the device's own on purpose: verify compares two implementations.)
// Internal to numerics.
#pragma once

#include <cstdint>

#include "numerics/ggml_dequant.h"

namespace ckpt::ggml_fields {

inline uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
// Byte-wise little-endian loads: blocks are unaligned (17-, 82-, 110-byte strides) and the
// compilers turn these into single loads.
inline uint32_t ld32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
inline float f16_at(const uint8_t* p) { return ggml_fp16_to_f32(ld16(p)); }

// get_scale_min_k4: 8 six-bit (scale, min) pairs packed into 12 bytes (Q4_K, Q5_K).
inline void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K and Q5_K: the scales and minimums of 64-element chunk c (0..3), as the formats apply
// them: the chunk's first 32 elements take d1 and m1, the next 32 d2 and m2 (products of
// the block's f16 d / dmin and the six-bit fields, exact in binary32).
struct KChunkScales {
  float d1, m1, d2, m2;
};
inline KChunkScales k_chunk_scales(const uint8_t* b, float d, float dmin, int c) {
  int sc1, m1, sc2, m2;
  scale_min_k4(2 * c, b + 4, sc1, m1);
  scale_min_k4(2 * c + 1, b + 4, sc2, m2);
  return {d * static_cast<float>(sc1), dmin * static_cast<float>(m1), d * static_cast<float>(sc2),
          dmin * static_cast<float>(m2)};
}

}  // namespace ckpt::ggml_fields

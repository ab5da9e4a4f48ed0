// The AVX2 block loops of ggml_dequantize and ggml_dequant_digest (ggml_dequant_avx2.cpp);
// internal to ggml_dequant.cpp, which picks them at run time and keeps the scalar loops as
// the reference they are tested against.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckpt::dequant_avx2 {

// True when this CPU (and its OS) runs AVX2 and F16C.
bool cpu_supported();
// True when `type` has an AVX2 loop.
bool has_loop(int32_t type);
// Dequantizes `blocks` whole blocks of `type` from `in` into `out` (blocks × block size
// floats). Precondition: cpu_supported() and has_loop(type); the tables are verified.
void dequantize(int32_t type, const uint8_t* in, size_t blocks, float* out);
// The digest's inner sums (f32_digest.h) of the same values, decoded and summed in registers
// (never stored): a = sum_k bits(y_k) * wa[k], b likewise (mod 2^64), k over the
// blocks × block size elements. The caller keeps them within one digest span (wa, wb
// point into its inner weights) and applies the outer weight. Same precondition.
void digest_inner(int32_t type, const uint8_t* in, size_t blocks, const uint32_t* wa, const uint32_t* wb, uint64_t& a,
                  uint64_t& b);

}  // namespace ckpt::dequant_avx2

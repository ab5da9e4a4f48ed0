// The AVX-512 block loops of ggml_dequantize and ggml_dequant_digest (ggml_dequant_avx512.cpp)
// for the types large GGUFs are mostly made of, on the hosts that have AVX-512; every other
// type runs its AVX2 loop there. Internal to ggml_dequant.cpp, which picks them at run
// time (DequantIsa::avx512) and tests them against the scalar reference like the AVX2 loops.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckpt::dequant_avx512 {

// True when this CPU (and its OS, which must save the ZMM state) runs AVX-512F.
bool cpu_supported();
// True when `type` has an AVX-512 loop.
bool has_loop(int32_t type);
// As dequant_avx2::dequantize and dequant_avx2::digest_inner (ggml_dequant_avx2.h), the same
// preconditions plus cpu_supported() and has_loop(type).
void dequantize(int32_t type, const uint8_t* in, size_t blocks, float* out);
void digest_inner(int32_t type, const uint8_t* in, size_t blocks, const uint32_t* wa, const uint32_t* wb, uint64_t& a,
                  uint64_t& b);

}  // namespace ckpt::dequant_avx512

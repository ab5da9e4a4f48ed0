// The AVX2 step of the digest's inner sums (f32_digest.h), in one place for its two users:
// f32_digest.cpp's loop over stored floats and the fused dequantize-and-digest block loops
// (ggml_dequant_avx2.cpp), which feed each decoded 8-float vector straight in instead of
// storing it. Eight elements' bits times their eight inner weights: the even and the odd
// 32-bit lanes multiplied apart (vpmuludq, 32 x 32 -> 64, exact) into 64-bit sums mod 2^64.
// Internal to numerics; x86-64 only. Every function carries the AVX2 target attribute, so
// the header is baseline code in the files that include it and runs only after a CPU check.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace ckpt::digest_avx2 {

// The running inner sums of one span: four 64-bit lanes each, the even and the odd elements'
// products added into the same lanes. Two vectors only, so that a Sums local to a loop is
// kept in registers by the compilers (gcc leaves a larger aggregate in memory).
struct Sums {
  __m256i a, b;
};

__attribute__((target("avx2"))) inline void clear(Sums& s) { s.a = s.b = _mm256_setzero_si256(); }

// Elements with bits v (8 lanes) and inner weights wa[0..7], wb[0..7]. vpmuludq reads the
// low half of each 64-bit lane: the even elements from v, ia, ib as they are; the odd ones
// from v shifted and from the weights loaded one element on (wa[1..8]: the low halves are
// wa[1], wa[3], wa[5], wa[7]; wa[8] is read but unused, kDigestInnerStored's pad at a
// span's end). Loads instead of two shifts: the multiplies and shifts share two ports.
__attribute__((target("avx2"))) inline void add8(Sums& s, __m256i v, const uint32_t* wa, const uint32_t* wb) {
  const __m256i ia = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa));
  const __m256i ib = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb));
  const __m256i ia_odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa + 1));
  const __m256i ib_odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 1));
  const __m256i v_odd = _mm256_srli_epi64(v, 32);
  s.a = _mm256_add_epi64(_mm256_add_epi64(s.a, _mm256_mul_epu32(v, ia)), _mm256_mul_epu32(v_odd, ia_odd));
  s.b = _mm256_add_epi64(_mm256_add_epi64(s.b, _mm256_mul_epu32(v, ib)), _mm256_mul_epu32(v_odd, ib_odd));
}

// One element (a tail), in the first lane.
__attribute__((target("avx2"))) inline void add1(Sums& s, uint32_t bits, uint32_t wa, uint32_t wb) {
  const __m256i v = _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(bits)));
  s.a = _mm256_add_epi64(s.a, _mm256_mul_epu32(v, _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(wa)))));
  s.b = _mm256_add_epi64(s.b, _mm256_mul_epu32(v, _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(wb)))));
}

__attribute__((target("avx2"))) inline uint64_t hsum(__m256i v) {
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) + static_cast<uint64_t>(_mm_extract_epi64(s, 1));
}

// The inner sums: sum_j bits(x_j) * inner_a[j] and likewise b (mod 2^64).
__attribute__((target("avx2"))) inline void finish(const Sums& s, uint64_t& a, uint64_t& b) {
  a = hsum(s.a);
  b = hsum(s.b);
}

}  // namespace ckpt::digest_avx2

#endif

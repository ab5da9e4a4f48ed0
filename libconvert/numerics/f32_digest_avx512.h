// The AVX-512 step of the digest's inner sums (f32_digest.h): f32_digest_avx2.h's step on
// 16 elements, for the AVX-512 block loops (ggml_dequant_avx512.cpp). One vpmuludq multiplies
// eight 32-bit pairs into 64-bit products, twice the AVX2 step's four, and the multiplies are
// what bound the fused loops on the Intel hosts. Same terms, same sums mod 2^64: a digest
// from these loops equals the scalar definition's bit for bit. Internal to numerics; x86-64
// only, every function behind the AVX-512F target attribute and a CPU check.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace ckpt::digest_avx512 {

#define CKPT_AVX512_DIGEST __attribute__((target("avx512f")))

// The running inner sums of one span: eight 64-bit lanes each (two vectors, kept in
// registers by a loop that holds them as a local, as in the AVX2 step).
struct Sums {
  __m512i a, b;
};

CKPT_AVX512_DIGEST inline void clear(Sums& s) { s.a = s.b = _mm512_setzero_si512(); }

// Elements with bits v (16 lanes) and inner weights wa[0..15], wb[0..15]. The even elements
// from the low halves of v's and the weights' 64-bit lanes; the odd ones from v shifted and
// the weights loaded one element on (wa[16] is read but unused: kDigestInnerStored's pad at
// a span's end, as the AVX2 step reads wa[8]).
CKPT_AVX512_DIGEST inline void add16(Sums& s, __m512i v, const uint32_t* wa, const uint32_t* wb) {
  const __m512i ia = _mm512_loadu_si512(wa), ib = _mm512_loadu_si512(wb);
  const __m512i ia_odd = _mm512_loadu_si512(wa + 1), ib_odd = _mm512_loadu_si512(wb + 1);
  const __m512i v_odd = _mm512_srli_epi64(v, 32);
  s.a = _mm512_add_epi64(_mm512_add_epi64(s.a, _mm512_mul_epu32(v, ia)), _mm512_mul_epu32(v_odd, ia_odd));
  s.b = _mm512_add_epi64(_mm512_add_epi64(s.b, _mm512_mul_epu32(v, ib)), _mm512_mul_epu32(v_odd, ib_odd));
}

// The inner sums: sum_j bits(x_j) * inner_a[j] and likewise b (mod 2^64).
CKPT_AVX512_DIGEST inline void finish(const Sums& s, uint64_t& a, uint64_t& b) {
  a = static_cast<uint64_t>(_mm512_reduce_add_epi64(s.a));
  b = static_cast<uint64_t>(_mm512_reduce_add_epi64(s.b));
}

#undef CKPT_AVX512_DIGEST

}  // namespace ckpt::digest_avx512

#endif

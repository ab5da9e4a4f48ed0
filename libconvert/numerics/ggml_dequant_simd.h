// Byte-level unpacking shared by the AVX2 and AVX-512 block loops (ggml_dequant_avx2.cpp,
// ggml_dequant_avx512.cpp): the integer codes of a block built the same way for both, so
// that the two differ only in how wide they convert and multiply. Internal to numerics;
// x86-64 only, each function behind the AVX2 target attribute (callable from both files'
// targets, which include AVX2) and run only after a CPU check.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

// The out-of-line block loops of both files (blocks_loop, and the plain-float loops) are
// `noipa` under GCC: their callers must not use what GCC infers about their bodies. GCC 12
// at -O3 can address a load inside such a loop as MEM[0B + index] (ivopts writes the
// pointer as an index over a null base); local-pure-const takes that for a null
// dereference, ignores the rest of its basic block, stores included, and declares the
// loop pure, and the caller's dead-code elimination then deletes the call: the AVX2 Q2_K
// loop into memory "returned zeros" (GgmlDequantIsa.*/Q2_K at -O3). Minimal reproducer
// and analysis: docs/notes/gcc12-pure-const.md. The loops were out-of-line calls already
// (one per run of blocks).
#if defined(__GNUC__) && !defined(__clang__)
#define CKPT_LOOP_ENTRY __attribute__((noipa))
#else
#define CKPT_LOOP_ENTRY
#endif

namespace ckpt::dequant_simd {

// Each byte's low and high nibble, as bytes 0..15.
__attribute__((target("avx2"))) inline __m128i low_nibbles(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(0x0F)); }
__attribute__((target("avx2"))) inline __m128i high_nibbles(__m128i v) {
  return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
}
__attribute__((target("avx2"))) inline __m256i low_nibbles(__m256i v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
__attribute__((target("avx2"))) inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}

// Q6_K, one 128-element half of a block: its four vectors of 32 signed codes (q − 32),
// byte l of vector k being element 32k + l of the half (ql's low nibbles, then the high
// ones, each with two bits of qh above them).
__attribute__((target("avx2"))) inline void q6_k_codes(const uint8_t* b, int half, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
  const uint8_t* ql = b + 64 * half;
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
  const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4);
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
  q[2] = _mm256_or_si256(hi0, _mm256_and_si256(qh, m30));
  q[3] = _mm256_or_si256(hi1, _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
  for (int k = 0; k < 4; ++k) q[k] = _mm256_sub_epi8(q[k], bias);
}

}  // namespace ckpt::dequant_simd

#endif

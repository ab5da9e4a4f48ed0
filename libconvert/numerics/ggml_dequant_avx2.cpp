// AVX2 block loops for ggml_dequantize: the same formulas as the scalar reference in
// ggml_dequant.cpp, eight lanes at a time. Compiled for the baseline ISA with the AVX2
// functions marked by a target attribute (not -mavx2 for the whole file: inline functions
// from headers must stay baseline code), and run only after a CPU check.
//
// Bit-identical to the scalar loops, NaN payloads included, because:
// - every product is exact (gguf.md §5) and the one rounding of the formats with a minimum
//   is the same IEEE subtraction/addition of the same operands (an addition of two NaNs
//   takes the product's, ggml_add_minimum, whatever order the compiler gives the operands);
// - no FMA: the target has none ("avx2,f16c"), and the file is built with -ffp-contract=off;
// - at most one operand of a multiply can be NaN (the block scale; codes are integers), and
//   x86 returns that operand quieted whatever the order; the i-quant sign is a negation of
//   db · g (a sign-bit flip), as in the reference;
// - f16 scales go through the same inline ggml_fp16_to_f32; F16 tensors through F16C with
//   its one difference (a signalling NaN comes back quieted) undone.
#include "numerics/ggml_dequant_avx2.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "core/ggml_types.h"
#include "numerics/ggml_block_fields.h"
#include "numerics/ggml_dequant.h"
#include "numerics/ggml_tables.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#include "numerics/f32_digest_avx2.h"
#include "numerics/ggml_dequant_simd.h"

#define CKPT_AVX2 __attribute__((target("avx2,f16c")))

namespace ckpt::dequant_avx2 {
namespace {

using ggml_fields::f16_at;
using ggml_fields::ld16;
using ggml_fields::ld32;


// ---- outputs ----------------------------------------------------------------------------
// Every loop below writes its 8-float vectors through put(y + offset, v) (and its scalar tails
// through put1), generic over where they go, so each type has ONE decode for both uses:
// - Store: into memory (ggml_dequantize);
// - Digest: straight into the digest's inner sums (f32_digest_avx2.h), the element at
//   offset k taking inner weights wa[k], wb[k]: nothing stored, nothing read back.

struct Store {
  float* p;
  Store operator+(size_t n) const { return {p + n}; }
  Store& operator+=(size_t n) {
    p += n;
    return *this;
  }
};
CKPT_AVX2 inline void put(Store y, __m256 v) { _mm256_storeu_ps(y.p, v); }
inline void put1(Store y, float v) { *y.p = v; }

struct Digest {
  digest_avx2::Sums* s;
  const uint32_t *wa, *wb;
  Digest operator+(size_t n) const { return {s, wa + n, wb + n}; }
  Digest& operator+=(size_t n) {
    wa += n;
    wb += n;
    return *this;
  }
};
CKPT_AVX2 inline void put(Digest y, __m256 v) { digest_avx2::add8(*y.s, _mm256_castps_si256(v), y.wa, y.wb); }
inline void put1(Digest y, float v) { digest_avx2::add1(*y.s, std::bit_cast<uint32_t>(v), *y.wa, *y.wb); }

// One loop per block function and output so the block function inlines into it. A Digest's
// sums are a local of the loop, held in registers across it (through the pointer they would
// be loaded and stored at every vector). CKPT_LOOP_ENTRY: a GCC 12 -O3 bug deleted calls of
// the Q2_K loop (ggml_dequant_simd.h).
template <auto kFn, class Y>
CKPT_LOOP_ENTRY CKPT_AVX2 void blocks_loop(const uint8_t* in, size_t blocks, size_t type_size, size_t block_size, Y y) {
  if constexpr (std::is_same_v<Y, Digest>) {
    digest_avx2::Sums s = *y.s;
    for (size_t i = 0; i < blocks; ++i) kFn(in + i * type_size, Digest{&s, y.wa, y.wb} + i * block_size);
    *y.s = s;
  } else {
    for (size_t i = 0; i < blocks; ++i) kFn(in + i * type_size, y + i * block_size);
  }
}

// ---- lanes ------------------------------------------------------------------------------

CKPT_AVX2 inline __m256 i8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
CKPT_AVX2 inline __m256 u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// y[0..15] = m · q for 16 signed bytes q.
template <class Y>
CKPT_AVX2 inline void mul16_i8(Y y, __m256 m, __m128i q) {
  put(y, _mm256_mul_ps(m, i8x8(q)));
  put(y + 8, _mm256_mul_ps(m, i8x8(_mm_srli_si128(q, 8))));
}
// y[0..15] = d · q − m (the formats with a minimum; the one rounding is the subtraction).
template <class Y>
CKPT_AVX2 inline void mul_sub16_u8(Y y, __m256 d, __m128i q, __m256 m) {
  put(y, _mm256_sub_ps(_mm256_mul_ps(d, u8x8(q)), m));
  put(y + 8, _mm256_sub_ps(_mm256_mul_ps(d, u8x8(_mm_srli_si128(q, 8))), m));
}
// p + m with the product's NaN where p is NaN (ggml_add_minimum, lane by lane).
CKPT_AVX2 inline __m256 add_minimum(__m256 p, __m256 m) {
  return _mm256_blendv_ps(_mm256_add_ps(p, m), p, _mm256_cmp_ps(p, p, _CMP_UNORD_Q));
}
// y[0..15] = q · d + m (Q4_1, Q5_1).
template <class Y>
CKPT_AVX2 inline void mul_add16_u8(Y y, __m256 d, __m128i q, __m256 m) {
  put(y, add_minimum(_mm256_mul_ps(u8x8(q), d), m));
  put(y + 8, add_minimum(_mm256_mul_ps(u8x8(_mm_srli_si128(q, 8)), d), m));
}

using dequant_simd::high_nibbles;
using dequant_simd::low_nibbles;
CKPT_AVX2 inline __m128i lo128(__m256i v) { return _mm256_castsi256_si128(v); }
CKPT_AVX2 inline __m128i hi128(__m256i v) { return _mm256_extracti128_si256(v, 1); }

// Byte j (0..15) = 0x10 when bit j of `bits` is set: the fifth bit of Q5_0 / Q5_1.
CKPT_AVX2 inline __m128i bit16_to_0x10(uint32_t bits) {
  const __m128i spread = _mm_shuffle_epi8(_mm_set1_epi32(static_cast<int>(bits)),
                                          _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i mask = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, mask), mask), _mm_set1_epi8(0x10));
}

// Eight grid magnitudes (one per byte of `grid`) times db, negated where `signs` has a 1.
template <class Y>
CKPT_AVX2 inline void put8(Y y, __m256 db, uint64_t grid, uint32_t signs) {
  const __m256 g = u8x8(_mm_cvtsi64_si128(static_cast<long long>(grid)));
  const __m256i sign = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(signs)),
                                                          _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24)),
                                        _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  put(y, _mm256_xor_ps(_mm256_mul_ps(db, g), _mm256_castsi256_ps(sign)));
}
uint64_t pair(uint32_t g1, uint32_t g2) { return g1 | static_cast<uint64_t>(g2) << 32; }

// ---- plain floats -----------------------------------------------------------------------

// Eight binary16 → binary32 through F16C, exact for every non-NaN; NaN lanes rebuilt as the
// reference does (payload shifted, quieted as ggml's conversion does).
CKPT_AVX2 inline __m256 f16x8(__m128i h) {
  const __m256 f = _mm256_cvtph_ps(h);
  const __m256i w = _mm256_cvtepu16_epi32(h);
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi32(0x7FFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7C00));
  const __m256i nan = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                                      _mm256_or_si256(_mm256_slli_epi32(mag, 13), _mm256_set1_epi32(0x70400000)));
  return _mm256_blendv_ps(f, _mm256_castsi256_ps(nan), _mm256_castsi256_ps(is_nan));
}

// Eight elements at a time through blocks_loop, then the tail.
template <class Y>
CKPT_AVX2 void f32_oct(const uint8_t* in, Y y) {
  put(y, _mm256_loadu_ps(reinterpret_cast<const float*>(in)));
}
template <class Y>
CKPT_AVX2 void f16_oct(const uint8_t* in, Y y) {
  put(y, f16x8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
}
template <class Y>
CKPT_AVX2 void bf16_oct(const uint8_t* in, Y y) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  put(y, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
}

template <class Y>
CKPT_LOOP_ENTRY CKPT_AVX2 void f32(const uint8_t* in, size_t n, Y y) {
  blocks_loop<f32_oct<Y>>(in, n / 8, 32, 8, y);
  for (size_t i = n / 8 * 8; i < n; ++i) put1(y + i, std::bit_cast<float>(ld32(in + 4 * i)));
}
template <class Y>
CKPT_LOOP_ENTRY CKPT_AVX2 void f16(const uint8_t* in, size_t n, Y y) {
  blocks_loop<f16_oct<Y>>(in, n / 8, 16, 8, y);
  for (size_t i = n / 8 * 8; i < n; ++i) put1(y + i, ggml_fp16_to_f32(ld16(in + 2 * i)));
}
template <class Y>
CKPT_LOOP_ENTRY CKPT_AVX2 void bf16(const uint8_t* in, size_t n, Y y) {
  blocks_loop<bf16_oct<Y>>(in, n / 8, 16, 8, y);
  for (size_t i = n / 8 * 8; i < n; ++i) put1(y + i, ggml_bf16_to_f32(ld16(in + 2 * i)));
}

// ---- 32-element blocks ------------------------------------------------------------------

template <class Y>
CKPT_AVX2 void q4_0(const uint8_t* b, Y y) {
  const __m256 d = _mm256_set1_ps(f16_at(b));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), eight = _mm_set1_epi8(8);
  mul16_i8(y, d, _mm_sub_epi8(low_nibbles(v), eight));
  mul16_i8(y + 16, d, _mm_sub_epi8(high_nibbles(v), eight));
}

template <class Y>
CKPT_AVX2 void q4_1(const uint8_t* b, Y y) {
  const float ds = f16_at(b);
  const __m256 d = _mm256_set1_ps(ds), m = _mm256_set1_ps(f16_at(b + 2));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  mul_add16_u8(y, d, low_nibbles(v), m);
  mul_add16_u8(y + 16, d, high_nibbles(v), m);
}

template <class Y>
CKPT_AVX2 void q5_0(const uint8_t* b, Y y) {
  const __m256 d = _mm256_set1_ps(f16_at(b));
  const uint32_t qh = ld32(b + 2);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6)), sixteen = _mm_set1_epi8(16);
  mul16_i8(y, d, _mm_sub_epi8(_mm_or_si128(low_nibbles(v), bit16_to_0x10(qh & 0xFFFF)), sixteen));
  mul16_i8(y + 16, d, _mm_sub_epi8(_mm_or_si128(high_nibbles(v), bit16_to_0x10(qh >> 16)), sixteen));
}

template <class Y>
CKPT_AVX2 void q5_1(const uint8_t* b, Y y) {
  const float ds = f16_at(b);
  const __m256 d = _mm256_set1_ps(ds), m = _mm256_set1_ps(f16_at(b + 2));
  const uint32_t qh = ld32(b + 4);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8));
  mul_add16_u8(y, d, _mm_or_si128(low_nibbles(v), bit16_to_0x10(qh & 0xFFFF)), m);
  mul_add16_u8(y + 16, d, _mm_or_si128(high_nibbles(v), bit16_to_0x10(qh >> 16)), m);
}

// 32 int8 at q, times d (Q8_0 at offset 2, Q8_1 at offset 4).
template <class Y>
CKPT_AVX2 inline void i8x32_times(const uint8_t* q, __m256 d, Y y) {
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * k));
    put(y + 8 * k, _mm256_mul_ps(i8x8(v), d));
  }
}
template <class Y>
CKPT_AVX2 void q8_0(const uint8_t* b, Y y) { i8x32_times(b + 2, _mm256_set1_ps(f16_at(b)), y); }
template <class Y>
CKPT_AVX2 void q8_1(const uint8_t* b, Y y) { i8x32_times(b + 4, _mm256_set1_ps(f16_at(b)), y); }

// 16 bytes of nibbles through a 16-entry int8 table, times d (IQ4_NL, MXFP4, IQ4_XS).
template <class Y>
CKPT_AVX2 inline void nibble_table32(const uint8_t* qs, const int8_t* table, __m256 d, Y y) {
  const __m128i kv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  mul16_i8(y, d, _mm_shuffle_epi8(kv, low_nibbles(v)));
  mul16_i8(y + 16, d, _mm_shuffle_epi8(kv, high_nibbles(v)));
}
template <class Y>
CKPT_AVX2 void iq4_nl(const uint8_t* b, Y y) {
  nibble_table32(b + 2, kvalues_iq4nl.data(), _mm256_set1_ps(f16_at(b)), y);
}
template <class Y>
CKPT_AVX2 void mxfp4(const uint8_t* b, Y y) {
  nibble_table32(b + 1, kvalues_fp4.data(), _mm256_set1_ps(ggml_e8m0_to_f32_half(b[0])), y);
}

// ---- k-quants ---------------------------------------------------------------------------


template <class Y>
CKPT_AVX2 void q2_k(const uint8_t* b, Y y) {
  const uint8_t* sc = b;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  const __m256i three = _mm256_set1_epi8(3);
  for (int half = 0; half < 2; ++half) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * half));
    for (int shift = 0; shift < 8; shift += 2, y += 32, sc += 2) {
      const __m256i v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(shift)), three);
      for (int part = 0; part < 2; ++part) {
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc[part] & 0xF));
        const __m256 ml = _mm256_set1_ps(dmin * static_cast<float>(sc[part] >> 4));
        mul_sub16_u8(y + 16 * part, dl, part ? hi128(v) : lo128(v), ml);
      }
    }
  }
}

template <class Y>
CKPT_AVX2 void q3_k(const uint8_t* b, Y y) {
  const float d = f16_at(b + 108);
  int scales[16];
  const uint8_t* s = b + 96;
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
    const int high = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    scales[i] = (low | (high << 4)) - 32;
  }
  const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  int is = 0;
  for (int half = 0; half < 2; ++half) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 + 32 * half));
    for (int shift = 0; shift < 8; shift += 2, y += 32) {
      const __m256i mask = _mm256_set1_epi8(static_cast<char>(1 << (4 * half + shift / 2)));
      const __m256i high_set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, mask), mask);
      const __m256i low2 = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(shift)), three);
      const __m256i v = _mm256_sub_epi8(low2, _mm256_andnot_si256(high_set, four));  // −4 without the high bit
      mul16_i8(y, _mm256_set1_ps(d * static_cast<float>(scales[is++])), lo128(v));
      mul16_i8(y + 16, _mm256_set1_ps(d * static_cast<float>(scales[is++])), hi128(v));
    }
  }
}

template <class Y>
CKPT_AVX2 void q4_k(const uint8_t* b, Y y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  for (int c = 0; c < 4; ++c, y += 64) {
    const ggml_fields::KChunkScales s = ggml_fields::k_chunk_scales(b, d, dmin, c);
    const __m256 d1 = _mm256_set1_ps(s.d1), min1 = _mm256_set1_ps(s.m1);
    const __m256 d2 = _mm256_set1_ps(s.d2), min2 = _mm256_set1_ps(s.m2);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * c));
    const __m256i lo = low_nibbles(q), hi = high_nibbles(q);
    mul_sub16_u8(y, d1, lo128(lo), min1);
    mul_sub16_u8(y + 16, d1, hi128(lo), min1);
    mul_sub16_u8(y + 32, d2, lo128(hi), min2);
    mul_sub16_u8(y + 48, d2, hi128(hi), min2);
  }
}

template <class Y>
CKPT_AVX2 void q5_k(const uint8_t* b, Y y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)), one = _mm256_set1_epi8(1);
  for (int c = 0; c < 4; ++c, y += 64) {
    const ggml_fields::KChunkScales s = ggml_fields::k_chunk_scales(b, d, dmin, c);
    const __m256 d1 = _mm256_set1_ps(s.d1), min1 = _mm256_set1_ps(s.m1);
    const __m256 d2 = _mm256_set1_ps(s.d2), min2 = _mm256_set1_ps(s.m2);
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * c));
    // Bit 2c (low nibbles) and 2c+1 (high) of qh[l], moved to 0x10 (bytes are 0 or 1 before the shift).
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one), 4);
    const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one), 4);
    const __m256i lo = _mm256_or_si256(low_nibbles(ql), h1), hi = _mm256_or_si256(high_nibbles(ql), h2);
    mul_sub16_u8(y, d1, lo128(lo), min1);
    mul_sub16_u8(y + 16, d1, hi128(lo), min1);
    mul_sub16_u8(y + 32, d2, lo128(hi), min2);
    mul_sub16_u8(y + 48, d2, hi128(hi), min2);
  }
}

template <class Y>
CKPT_AVX2 void q6_k(const uint8_t* b, Y y) {
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half, y += 128) {
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    __m256i q[4];
    dequant_simd::q6_k_codes(b, half, q);
    for (int k = 0; k < 4; ++k) {
      mul16_i8(y + 32 * k, _mm256_set1_ps(d * static_cast<float>(sc[2 * k])), lo128(q[k]));
      mul16_i8(y + 32 * k + 16, _mm256_set1_ps(d * static_cast<float>(sc[2 * k + 1])), hi128(q[k]));
    }
  }
}

template <class Y>
CKPT_AVX2 void q8_k(const uint8_t* b, Y y) {
  float d;
  std::memcpy(&d, b, 4);
  const __m256 dv = _mm256_set1_ps(d);
  for (int k = 0; k < 32; ++k) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 4 + 8 * k));
    put(y + 8 * k, _mm256_mul_ps(dv, i8x8(v)));
  }
}

// ---- i-quants ---------------------------------------------------------------------------

template <class Y>
CKPT_AVX2 void iq2_xxs(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* idx = b + 2 + 8 * ib;
    const uint32_t aux = ld32(idx + 4);
    const __m256 db = _mm256_set1_ps(d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f);
    for (int l = 0; l < 4; ++l, y += 8) put8(y, db, iq2xxs_grid[idx[l]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
  }
}

template <class Y>
CKPT_AVX2 void iq2_xs(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t s = b[66 + ib];
    const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + static_cast<float>(s & 0xF)) * 0.25f),
                          _mm256_set1_ps(d * (0.5f + static_cast<float>(s >> 4)) * 0.25f)};
    for (int l = 0; l < 4; ++l, y += 8) {
      const uint16_t q = ld16(b + 2 + 2 * (4 * ib + l));
      put8(y, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
    }
  }
}

template <class Y>
CKPT_AVX2 void iq2_s(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
  for (int ib = 0; ib < 8; ++ib) {
    const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + static_cast<float>(scales[ib] & 0xF)) * 0.25f),
                          _mm256_set1_ps(d * (0.5f + static_cast<float>(scales[ib] >> 4)) * 0.25f)};
    for (int l = 0; l < 4; ++l, y += 8) {
      const int idx = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300);
      put8(y, db[l / 2], iq2s_grid[idx], signs[4 * ib + l]);
    }
  }
}

template <class Y>
CKPT_AVX2 void iq3_xxs(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t aux = ld32(b + 66 + 4 * ib);
    const __m256 db = _mm256_set1_ps(d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f);
    for (int l = 0; l < 4; ++l, y += 8)
      put8(y, db, pair(iq3xxs_grid[q[2 * l]], iq3xxs_grid[q[2 * l + 1]]), ksigns_iq2xs[(aux >> (7 * l)) & 127]);
  }
}

template <class Y>
CKPT_AVX2 void iq3_s(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const __m256 db = _mm256_set1_ps(d * static_cast<float>(1 + 2 * s));
    for (int l = 0; l < 4; ++l, y += 8) {
      const int i1 = qs[8 * ib + 2 * l] | ((qh[ib] << (8 - 2 * l)) & 256);
      const int i2 = qs[8 * ib + 2 * l + 1] | ((qh[ib] << (7 - 2 * l)) & 256);
      put8(y, db, pair(iq3s_grid[i1], iq3s_grid[i2]), signs[4 * ib + l]);
    }
  }
}

template <class Y>
CKPT_AVX2 void iq4_xs(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const uint16_t scales_h = ld16(b + 2);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    nibble_table32(b + 8 + 16 * ib, kvalues_iq4nl.data(), _mm256_set1_ps(d * static_cast<float>(ls - 32)), y);
  }
}

// ---- dispatch ---------------------------------------------------------------------------

// The block types with an AVX2 loop: X(type id, block function).
#define CKPT_AVX2_BLOCK_TYPES(X)                                                                         \
  X(kGgmlQ4_0, q4_0) X(kGgmlQ4_1, q4_1) X(kGgmlQ5_0, q5_0) X(kGgmlQ5_1, q5_1) X(kGgmlQ8_0, q8_0)          \
  X(kGgmlQ8_1, q8_1) X(kGgmlQ2_K, q2_k) X(kGgmlQ3_K, q3_k) X(kGgmlQ4_K, q4_k) X(kGgmlQ5_K, q5_k)          \
  X(kGgmlQ6_K, q6_k) X(kGgmlQ8_K, q8_k) X(kGgmlIQ2_XXS, iq2_xxs) X(kGgmlIQ2_XS, iq2_xs) X(kGgmlIQ2_S, iq2_s) \
  X(kGgmlIQ3_XXS, iq3_xxs) X(kGgmlIQ3_S, iq3_s) X(kGgmlIQ4_NL, iq4_nl) X(kGgmlIQ4_XS, iq4_xs) X(kGgmlMXFP4, mxfp4)

// `blocks` whole blocks (elements of the float types) of `type` into y. Returns false for a
// type without a loop.
template <class Y>
bool run(int32_t type, const uint8_t* in, size_t blocks, Y y) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const size_t ts = info ? info->type_size : 0, bs = info ? info->block_size : 0;
  switch (type) {
    case kGgmlF16: f16(in, blocks, y); return true;
    case kGgmlBF16: bf16(in, blocks, y); return true;
#define CKPT_LOOP(T, fn) \
  case T: blocks_loop<fn<Y>>(in, blocks, ts, bs, y); return true;
    CKPT_AVX2_BLOCK_TYPES(CKPT_LOOP)
#undef CKPT_LOOP
    default: return false;
  }
}

}  // namespace

// AVX2 through the compiler's CPU model (which also checks the OS saves the YMM state);
// F16C from CPUID leaf 1 (clang's model does not name it).
bool cpu_supported() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return ok;
}

bool has_loop(int32_t type) {
  switch (type) {
    case kGgmlF32:
    case kGgmlF16:
    case kGgmlBF16:
#define CKPT_CASE(T, fn) case T:
    CKPT_AVX2_BLOCK_TYPES(CKPT_CASE)
#undef CKPT_CASE
      return true;
    default: return false;
  }
}

void dequantize(int32_t type, const uint8_t* in, size_t blocks, float* out) {
  if (blocks == 0) return;  // empty spans may hold null pointers
  if (type == kGgmlF32) return void(std::memcpy(out, in, 4 * blocks));
  run(type, in, blocks, Store{out});
}

void digest_inner(int32_t type, const uint8_t* in, size_t blocks, const uint32_t* wa, const uint32_t* wb, uint64_t& a,
                  uint64_t& b) {
  digest_avx2::Sums s;
  digest_avx2::clear(s);
  if (blocks > 0) {
    if (type == kGgmlF32)
      f32(in, blocks, Digest{&s, wa, wb});
    else
      run(type, in, blocks, Digest{&s, wa, wb});
  }
  digest_avx2::finish(s, a, b);
}

}  // namespace ckpt::dequant_avx2

#else  // not x86: the scalar reference only

namespace ckpt::dequant_avx2 {
bool cpu_supported() { return false; }
bool has_loop(int32_t) { return false; }
void dequantize(int32_t, const uint8_t*, size_t, float*) {}
void digest_inner(int32_t, const uint8_t*, size_t, const uint32_t*, const uint32_t*, uint64_t& a, uint64_t& b) {
  a = b = 0;
}
}  // namespace ckpt::dequant_avx2

#endif

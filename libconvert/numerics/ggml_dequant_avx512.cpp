// AVX-512 block loops for ggml_dequantize and ggml_dequant_digest: the AVX2 loops' formulas
// (ggml_dequant_avx2.cpp) on 16 lanes, for the types large GGUFs are mostly made of (Q8_0,
// IQ4_NL, MXFP4, Q4_K, Q6_K, IQ3_XXS, IQ2_S, IQ3_S). What they gain is the digest: its step takes 16 elements per four multiplies
// (f32_digest_avx512.h), where the AVX2 step takes 8. Built and run as the AVX2 file is: the
// baseline ISA with a target attribute on every function, called only after a CPU check,
// -ffp-contract=off and no FMA in the attribute.
//
// Bit-identical to the scalar loops, NaN payloads included, for the AVX2 file's reasons:
// every product is exact and is computed from the same operands (a block scale times an
// integer code); Q4_K's one rounding is the same subtraction; the i-quants' sign is a
// sign-bit flip of db · g, as in the reference (here by a masked xor, the mask the block's
// sign bits); the sub-block scales are the same scalar float expressions.
#include "numerics/ggml_dequant_avx512.h"

#include <type_traits>

#include "core/ggml_types.h"
#include "numerics/ggml_block_fields.h"
#include "numerics/ggml_dequant.h"
#include "numerics/ggml_tables.h"

#if defined(__x86_64__)
// GCC 12's avx512fintrin.h builds vectors from a self-initialised _mm512_undefined_*, which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "numerics/f32_digest_avx512.h"
#include "numerics/ggml_dequant_simd.h"

#define CKPT_AVX512 __attribute__((target("avx512f,avx2")))

namespace ckpt::dequant_avx512 {
namespace {

using ggml_fields::f16_at;
using ggml_fields::ld32;


// ---- outputs (as in the AVX2 file: one decode per type for both uses) ----------------------

struct Store {
  float* p;
  Store operator+(size_t n) const { return {p + n}; }
  Store& operator+=(size_t n) {
    p += n;
    return *this;
  }
};
CKPT_AVX512 inline void put(Store y, __m512 v) { _mm512_storeu_ps(y.p, v); }

struct Digest {
  digest_avx512::Sums* s;
  const uint32_t *wa, *wb;
  Digest operator+(size_t n) const { return {s, wa + n, wb + n}; }
  Digest& operator+=(size_t n) {
    wa += n;
    wb += n;
    return *this;
  }
};
CKPT_AVX512 inline void put(Digest y, __m512 v) { digest_avx512::add16(*y.s, _mm512_castps_si512(v), y.wa, y.wb); }

// One loop per block function and output; a Digest's sums a local held in registers.
// CKPT_LOOP_ENTRY: see ggml_dequant_simd.h (a GCC 12 -O3 bug).
template <auto kFn, class Y>
CKPT_LOOP_ENTRY CKPT_AVX512 void blocks_loop(const uint8_t* in, size_t blocks, size_t type_size, size_t block_size, Y y) {
  if constexpr (std::is_same_v<Y, Digest>) {
    digest_avx512::Sums s = *y.s;
    for (size_t i = 0; i < blocks; ++i) kFn(in + i * type_size, Digest{&s, y.wa, y.wb} + i * block_size);
    *y.s = s;
  } else {
    for (size_t i = 0; i < blocks; ++i) kFn(in + i * type_size, y + i * block_size);
  }
}

// Sixteen unsigned bytes as floats.
CKPT_AVX512 inline __m512 u8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
CKPT_AVX512 inline __m128i lo128(__m256i v) { return _mm256_castsi256_si128(v); }
CKPT_AVX512 inline __m128i hi128(__m256i v) { return _mm256_extracti128_si256(v, 1); }

// Sixteen signed bytes as floats.
CKPT_AVX512 inline __m512 i8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }
// The sign bit flipped in the lanes whose bit of `signs` is 1 (the i-quants' negation of db · g).
CKPT_AVX512 inline __m512 negate_where(__m512 v, uint32_t signs) {
  const __m512i bits = _mm512_castps_si512(v);
  return _mm512_castsi512_ps(
      _mm512_mask_xor_epi32(bits, static_cast<__mmask16>(signs), bits, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// ---- 32-element blocks --------------------------------------------------------------------

template <class Y>
CKPT_AVX512 void q8_0(const uint8_t* b, Y y) {
  const __m512 d = _mm512_set1_ps(f16_at(b));
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
  const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18));
  put(y, _mm512_mul_ps(i8x16(q0), d));
  put(y + 16, _mm512_mul_ps(i8x16(q1), d));
}

// 16 bytes of nibbles through a 16-entry int8 table, times d (IQ4_NL, MXFP4).
template <class Y>
CKPT_AVX512 inline void nibble_table32(const uint8_t* qs, const int8_t* table, __m512 d, Y y) {
  const __m128i kv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  put(y, _mm512_mul_ps(d, i8x16(_mm_shuffle_epi8(kv, dequant_simd::low_nibbles(v)))));
  put(y + 16, _mm512_mul_ps(d, i8x16(_mm_shuffle_epi8(kv, dequant_simd::high_nibbles(v)))));
}
template <class Y>
CKPT_AVX512 void iq4_nl(const uint8_t* b, Y y) {
  nibble_table32(b + 2, kvalues_iq4nl.data(), _mm512_set1_ps(f16_at(b)), y);
}
template <class Y>
CKPT_AVX512 void mxfp4(const uint8_t* b, Y y) {
  nibble_table32(b + 1, kvalues_fp4.data(), _mm512_set1_ps(ggml_e8m0_to_f32_half(b[0])), y);
}

// ---- Q4_K ---------------------------------------------------------------------------------


// y[0..15] = d · q − m: the product exact, the one rounding the subtraction.
template <class Y>
CKPT_AVX512 inline void mul_sub16_u8(Y y, __m512 d, __m128i q, __m512 m) {
  put(y, _mm512_sub_ps(_mm512_mul_ps(d, u8x16(q)), m));
}

template <class Y>
CKPT_AVX512 void q4_k(const uint8_t* b, Y y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  for (int c = 0; c < 4; ++c, y += 64) {
    const ggml_fields::KChunkScales s = ggml_fields::k_chunk_scales(b, d, dmin, c);
    const __m512 d1 = _mm512_set1_ps(s.d1), min1 = _mm512_set1_ps(s.m1);
    const __m512 d2 = _mm512_set1_ps(s.d2), min2 = _mm512_set1_ps(s.m2);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * c));
    const __m256i lo = dequant_simd::low_nibbles(q), hi = dequant_simd::high_nibbles(q);
    mul_sub16_u8(y, d1, lo128(lo), min1);
    mul_sub16_u8(y + 16, d1, hi128(lo), min1);
    mul_sub16_u8(y + 32, d2, lo128(hi), min2);
    mul_sub16_u8(y + 48, d2, hi128(hi), min2);
  }
}

// ---- Q6_K ---------------------------------------------------------------------------------

template <class Y>
CKPT_AVX512 void q6_k(const uint8_t* b, Y y) {
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half, y += 128) {
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    __m256i q[4];
    dequant_simd::q6_k_codes(b, half, q);
    for (int k = 0; k < 4; ++k) {
      put(y + 32 * k, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[2 * k])), i8x16(lo128(q[k]))));
      put(y + 32 * k + 16, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[2 * k + 1])), i8x16(hi128(q[k]))));
    }
  }
}

// ---- i-quants -----------------------------------------------------------------------------

// IQ3_XXS: per 32-element sub-block, eight 8-bit grid indices gathered; the four 7-bit sign
// fields through ksigns_iq2xs, one byte each, make the sub-block's 32 sign bits.
template <class Y>
CKPT_AVX512 void iq3_xxs(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const int* grid = reinterpret_cast<const int*>(iq3xxs_grid.data());
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint32_t aux = ld32(b + 66 + 4 * ib);
    const __m512 db = _mm512_set1_ps(d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * ib)));
    const __m256i g = _mm256_i32gather_epi32(grid, idx, 4);
    uint32_t sign_bits = 0;
    for (int l = 0; l < 4; ++l) sign_bits |= uint32_t{ksigns_iq2xs[(aux >> (7 * l)) & 127]} << (8 * l);
    put(y, negate_where(_mm512_mul_ps(db, u8x16(lo128(g))), sign_bits));
    put(y + 16, negate_where(_mm512_mul_ps(db, u8x16(hi128(g))), sign_bits >> 16));
  }
}

// IQ2_S: per 32-element sub-block, four 10-bit indices (qs bytes, two bits each from qh) of
// 8-magnitude grid entries gathered; the first 16 elements scaled by db[0], the rest db[1].
template <class Y>
CKPT_AVX512 void iq2_s(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
  const auto* grid = reinterpret_cast<const long long*>(iq2s_grid.data());
  const __m128i high_shift = _mm_setr_epi32(8, 6, 4, 2), bits89 = _mm_set1_epi32(0x300);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const __m512 db0 = _mm512_set1_ps(d * (0.5f + static_cast<float>(scales[ib] & 0xF)) * 0.25f);
    const __m512 db1 = _mm512_set1_ps(d * (0.5f + static_cast<float>(scales[ib] >> 4)) * 0.25f);
    const __m128i low8 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(ld32(qs + 4 * ib))));
    const __m128i high = _mm_and_si128(_mm_sllv_epi32(_mm_set1_epi32(qh[ib]), high_shift), bits89);
    const __m256i g = _mm256_i32gather_epi64(grid, _mm_or_si128(low8, high), 8);
    const uint32_t sign_bits = ld32(signs + 4 * ib);
    put(y, negate_where(_mm512_mul_ps(db0, u8x16(lo128(g))), sign_bits));
    put(y + 16, negate_where(_mm512_mul_ps(db1, u8x16(hi128(g))), sign_bits >> 16));
  }
}

// ---- IQ3_S --------------------------------------------------------------------------------

// Per 32-element sub-block: its eight 9-bit grid indices (qs bytes, the ninth bit from qh)
// in eight lanes, the eight grid words by one gather (32 magnitudes in order), each 16 of
// them times db with the sign bit flipped where the sub-block's 32 sign bits have a 1.
template <class Y>
CKPT_AVX512 void iq3_s(const uint8_t* b, Y y) {
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
  const __m256i ninth_shift = _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1), bit8 = _mm256_set1_epi32(256);
  const int* grid = reinterpret_cast<const int*>(iq3s_grid.data());
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const __m512 db = _mm512_set1_ps(d * static_cast<float>(1 + 2 * s));
    const __m256i low8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * ib)));
    const __m256i ninth = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(qh[ib]), ninth_shift), bit8);
    const __m256i g = _mm256_i32gather_epi32(grid, _mm256_or_si256(low8, ninth), 4);
    const uint32_t sign_bits = ld32(signs + 4 * ib);
    put(y, negate_where(_mm512_mul_ps(db, u8x16(lo128(g))), sign_bits));
    put(y + 16, negate_where(_mm512_mul_ps(db, u8x16(hi128(g))), sign_bits >> 16));
  }
}

#define CKPT_AVX512_BLOCK_TYPES(X)                                                                         \
  X(kGgmlQ8_0, q8_0) X(kGgmlIQ4_NL, iq4_nl) X(kGgmlMXFP4, mxfp4) X(kGgmlQ4_K, q4_k) X(kGgmlQ6_K, q6_k) \
  X(kGgmlIQ3_XXS, iq3_xxs) X(kGgmlIQ2_S, iq2_s) X(kGgmlIQ3_S, iq3_s)

template <class Y>
bool run(int32_t type, const uint8_t* in, size_t blocks, Y y) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const size_t ts = info ? info->type_size : 0, bs = info ? info->block_size : 0;
  switch (type) {
#define CKPT_LOOP(T, fn) \
  case T: blocks_loop<fn<Y>>(in, blocks, ts, bs, y); return true;
    CKPT_AVX512_BLOCK_TYPES(CKPT_LOOP)
#undef CKPT_LOOP
    default: return false;
  }
}

}  // namespace

// AVX-512F through the compiler's CPU model, which also checks that the OS saves the
// opmask and ZMM state (XCR0); the loops use AVX2 too, which every AVX-512F CPU has.
bool cpu_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
  return ok;
}

bool has_loop(int32_t type) {
  switch (type) {
#define CKPT_CASE(T, fn) case T:
    CKPT_AVX512_BLOCK_TYPES(CKPT_CASE)
#undef CKPT_CASE
      return true;
    default: return false;
  }
}

void dequantize(int32_t type, const uint8_t* in, size_t blocks, float* out) {
  if (blocks == 0) return;
  run(type, in, blocks, Store{out});
}

void digest_inner(int32_t type, const uint8_t* in, size_t blocks, const uint32_t* wa, const uint32_t* wb, uint64_t& a,
                  uint64_t& b) {
  digest_avx512::Sums s;
  digest_avx512::clear(s);
  if (blocks > 0) run(type, in, blocks, Digest{&s, wa, wb});
  digest_avx512::finish(s, a, b);
}

}  // namespace ckpt::dequant_avx512

#else  // not x86

namespace ckpt::dequant_avx512 {
bool cpu_supported() { return false; }
bool has_loop(int32_t) { return false; }
void dequantize(int32_t, const uint8_t*, size_t, float*) {}
void digest_inner(int32_t, const uint8_t*, size_t, const uint32_t*, const uint32_t*, uint64_t& a, uint64_t& b) {
  a = b = 0;
}
}  // namespace ckpt::dequant_avx512

#endif

// AVX-512 block loops for ggml_dequantize and ggml_dequant_digest: the AVX2 loops' formulas
// (ggml_dequant_avx2.cpp) on 16 lanes, for the types a large GGUF is mostly made of (IQ3_S,
// Q4_K). What they gain is the digest: its step takes 16 elements per four multiplies
// (f32_digest_avx512.h), where the AVX2 step takes 8. Built and run as the AVX2 file is: the
// baseline ISA with a target attribute on every function, called only after a CPU check,
// -ffp-contract=off and no FMA in the attribute.
//
// Bit-identical to the scalar loops, NaN payloads included, for the AVX2 file's reasons:
// every product is exact and is computed from the same operands (a block scale times an
// integer code); Q4_K's one rounding is the same subtraction; IQ3_S's sign is a sign-bit flip
// of db · g, as in the reference (here by a masked xor, the mask the block's sign bits).
#include "numerics/ggml_dequant_avx512.h"

#include <cstring>
#include <type_traits>

#include "core/ggml_types.h"
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

#define CKPT_AVX512 __attribute__((target("avx512f,avx2")))

namespace ckpt::dequant_avx512 {
namespace {

uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t ld32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // x86 is little-endian
}
float f16_at(const uint8_t* p) { return ggml_fp16_to_f32(ld16(p)); }

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
template <auto kFn, class Y>
CKPT_AVX512 void blocks_loop(const uint8_t* in, size_t blocks, size_t type_size, size_t block_size, Y y) {
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

// ---- Q4_K ---------------------------------------------------------------------------------

inline void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// y[0..15] = d · q − m: the product exact, the one rounding the subtraction.
template <class Y>
CKPT_AVX512 inline void mul_sub16_u8(Y y, __m512 d, __m128i q, __m512 m) {
  put(y, _mm512_sub_ps(_mm512_mul_ps(d, u8x16(q)), m));
}

template <class Y>
CKPT_AVX512 void q4_k(const uint8_t* b, Y y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c, y += 64) {
    int sc1, m1, sc2, m2;
    scale_min_k4(2 * c, b + 4, sc1, m1);
    scale_min_k4(2 * c + 1, b + 4, sc2, m2);
    const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc1)), min1 = _mm512_set1_ps(dmin * static_cast<float>(m1));
    const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc2)), min2 = _mm512_set1_ps(dmin * static_cast<float>(m2));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * c));
    const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    mul_sub16_u8(y, d1, lo128(lo), min1);
    mul_sub16_u8(y + 16, d1, hi128(lo), min1);
    mul_sub16_u8(y + 32, d2, lo128(hi), min2);
    mul_sub16_u8(y + 48, d2, hi128(hi), min2);
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
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const int* grid = reinterpret_cast<const int*>(iq3s_grid.data());
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const __m512 db = _mm512_set1_ps(d * static_cast<float>(1 + 2 * s));
    const __m256i low8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * ib)));
    const __m256i ninth = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(qh[ib]), ninth_shift), bit8);
    const __m256i g = _mm256_i32gather_epi32(grid, _mm256_or_si256(low8, ninth), 4);
    const uint32_t sign_bits = ld32(signs + 4 * ib);
    const __m512i v0 = _mm512_castps_si512(_mm512_mul_ps(db, u8x16(lo128(g))));
    const __m512i v1 = _mm512_castps_si512(_mm512_mul_ps(db, u8x16(hi128(g))));
    put(y, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v0, static_cast<__mmask16>(sign_bits), v0, sign_bit)));
    put(y + 16, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v1, static_cast<__mmask16>(sign_bits >> 16), v1, sign_bit)));
  }
}

#define CKPT_AVX512_BLOCK_TYPES(X) X(kGgmlQ4_K, q4_k) X(kGgmlIQ3_S, iq3_s)

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

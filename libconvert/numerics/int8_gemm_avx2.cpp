// AVX2 loops of the INT8 GEMM reference and of the double-precision product (int8_gemm_ref.h),
// on register tiles of up to 2 rows × 4 columns (each a row / column loaded once per step
// and used by every output of the tile; the double product widens four columns of w to
// double once and runs every row against them). Compiled for the baseline ISA with the AVX2
// functions marked by a target attribute, as ggml_dequant_avx2.cpp is, and run only after
// the CPU check (ggml_dequant_best_isa()).
//
// Same results as the scalar loops, bit for bit:
// - decode: the same table values (kE2m1LutX2[c] << shift) at the same places;
// - int32: every product of two int8 is exact in int16 arithmetic widened by vpmaddwd
//   (a pair sums to at most 2·128² = 32768, exact in int32), and an integer sum is the same
//   in any order; no partial sum can overflow (each is a sum of at most k products of
//   magnitude ≤ 128², and k ≤ INT32_MAX / 128²);
// - double: each lane is its own chain in the documented order (lane j: i ≡ j mod 4, i rising),
//   the lanes combined as (l0 + l1) + (l2 + l3) — the order the scalar loop writes out. A term
//   is a product of two floats widened to double, exact (24 + 24 significant bits fit in 53,
//   and no float product leaves double's exponent range), so the fused multiply-add this loop
//   uses rounds once where the scalar loop's add does, to the same bits (-ffp-contract=off
//   keeps the compiler from fusing anything else in the file).
#include "numerics/int8_gemm_avx2.h"

#include "numerics/f64_lanes.h"
#include "numerics/int8_shift.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <vector>

#define CKPT_AVX2 __attribute__((target("avx2")))
// The double product's loops also use FMA (a CPU check of its own: fma_supported()).
#define CKPT_AVX2_FMA __attribute__((target("avx2,fma")))
// The tiles' loops over their rows and columns are unrolled, so that the accumulators live
// in registers (at -O2 GCC would keep the arrays in memory).
#define CKPT_UNROLL _Pragma("GCC unroll 8")

namespace ckpt::int8_gemm_avx2 {
namespace {

CKPT_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

CKPT_AVX2 inline __m256i load_i8x16_as_i16(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// R rows of a (from a) × C columns of q (from q): acc[r·n + c].
template <int R, int C>
CKPT_AVX2 void int32_tile(const int8_t* a, const int8_t* q, uint64_t n, uint64_t k, int32_t* acc) {
  __m256i s[R][C];
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) s[r][c] = _mm256_setzero_si256();
  uint64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m256i av[R], qv[C];
    CKPT_UNROLL
    for (int r = 0; r < R; ++r) av[r] = load_i8x16_as_i16(a + r * k + i);
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) qv[c] = load_i8x16_as_i16(q + c * k + i);
    CKPT_UNROLL
    for (int r = 0; r < R; ++r)
      CKPT_UNROLL
      for (int c = 0; c < C; ++c) s[r][c] = _mm256_add_epi32(s[r][c], _mm256_madd_epi16(av[r], qv[c]));
  }
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) {
      int32_t t = hsum_i32(s[r][c]);
      for (uint64_t j = i; j < k; ++j) t += int32_t(a[r * k + j]) * int32_t(q[c * k + j]);
      acc[r * n + c] = t;
    }
}

template <int R>
CKPT_AVX2 void int32_rows(const int8_t* a, const int8_t* q, uint64_t n, uint64_t k, int32_t* acc) {
  uint64_t c = 0;
  for (; c + 4 <= n; c += 4) int32_tile<R, 4>(a, q + c * k, n, k, acc + c);
  for (; c < n; ++c) int32_tile<R, 1>(a, q + c * k, n, k, acc + c);
}

// R rows of x (float, widened on the fly) × C columns of w (already widened to double by the
// caller, wd[c·k + i]): y[r·n + c].
template <int R, int C>
CKPT_AVX2_FMA void f64_tile(const float* x, const double* wd, uint64_t n, uint64_t k, double* y) {
  __m256d s[R][C];
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) s[r][c] = _mm256_setzero_pd();
  uint64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    __m256d xv[R];
    CKPT_UNROLL
    for (int r = 0; r < R; ++r) xv[r] = _mm256_cvtps_pd(_mm_loadu_ps(x + r * k + i));
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) {
      const __m256d wv = _mm256_loadu_pd(wd + c * k + i);
      CKPT_UNROLL
      for (int r = 0; r < R; ++r) s[r][c] = _mm256_fmadd_pd(xv[r], wv, s[r][c]);
    }
  }
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int c = 0; c < C; ++c) {
      alignas(32) double lane[4];
      _mm256_store_pd(lane, s[r][c]);
      y[r * n + c] = f64_lanes_finish(lane, x + r * k, wd + c * k, i, k);
    }
}

// Columns [c, c + C) of w widened into wd, then every row of x against them.
template <int C>
CKPT_AVX2_FMA void f64_columns(const float* x, const float* w, uint64_t m, uint64_t n, uint64_t k, uint64_t c,
                           double* wd, double* y) {
  for (uint64_t i = 0; i < C * k; ++i) wd[i] = static_cast<double>(w[c * k + i]);
  uint64_t r = 0;
  for (; r + 2 <= m; r += 2) f64_tile<2, C>(x + r * k, wd, n, k, y + r * n + c);
  if (r < m) f64_tile<1, C>(x + r * k, wd, n, k, y + r * n + c);
}

}  // namespace

// Per 16-byte chunk (one row's 32-block): the bytes put in source order by one shuffle (the
// inverse of kTileSourceByte), split into low and high nibbles, each looked up in the
// 16-entry table lut_x2[c] << shift (exact int8: |value| <= 96), and interleaved low/high.
CKPT_AVX2 void decode_int8_shift(const uint8_t* mxfp4, const uint8_t* shift2, uint64_t rows, uint64_t k,
                                 uint64_t g_begin, uint64_t g_end, int8_t* q) {
  alignas(16) uint8_t inverse[16];
  for (uint8_t i = 0; i < 16; ++i) inverse[kTileSourceByte[i]] = i;
  alignas(16) int8_t lut[4][16];
  for (int shift = 0; shift < 4; ++shift)
    for (int c = 0; c < 16; ++c) lut[shift][c] = static_cast<int8_t>(kE2m1LutX2[c] * (1 << shift));
  const __m128i perm = _mm_load_si128(reinterpret_cast<const __m128i*>(inverse));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  __m128i luts[4];
  for (int shift = 0; shift < 4; ++shift) luts[shift] = _mm_load_si128(reinterpret_cast<const __m128i*>(lut[shift]));
  const uint64_t groups = (rows + 7) / 8, blocks = k / 32;
  constexpr uint64_t kStrip = 8;  // the scalar loop's order (int8_gemm_ref.cpp)
  for (uint64_t kb0 = 0; kb0 < blocks; kb0 += kStrip) {
    for (uint64_t g = g_begin; g < g_end; ++g) {
      const uint64_t group_rows = rows - g * 8 < 8 ? rows - g * 8 : 8;
      const uint64_t kb_end = blocks < kb0 + kStrip ? blocks : kb0 + kStrip;
      for (uint64_t kb = kb0; kb < kb_end; ++kb) {
        const uint8_t* tile = mxfp4 + (kb * groups + g) * 128;
        const uint8_t* shifts = shift2 + ((kb / 4) * groups + g) * 8;
        for (uint64_t r8 = 0; r8 < group_rows; ++r8) {
          const __m128i lt = luts[(shifts[r8] >> (2 * (kb % 4))) & 3];
          const __m128i src =
              _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 * r8)), perm);
          const __m128i lo = _mm_shuffle_epi8(lt, _mm_and_si128(src, nibble));
          const __m128i hi = _mm_shuffle_epi8(lt, _mm_and_si128(_mm_srli_epi16(src, 4), nibble));
          int8_t* out = q + ((g - g_begin) * 8 + r8) * k + kb * 32;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi8(lo, hi));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_unpackhi_epi8(lo, hi));
        }
      }
    }
  }
}

CKPT_AVX2 void int32_gemm(const int8_t* a, const int8_t* q, uint64_t m, uint64_t n, uint64_t k, int32_t* acc) {
  uint64_t r = 0;
  for (; r + 2 <= m; r += 2) int32_rows<2>(a + r * k, q, n, k, acc + r * n);
  if (r < m) int32_rows<1>(a + r * k, q, n, k, acc + r * n);
}

CKPT_AVX2_FMA void f64_gemm(const float* x, const float* w, uint64_t m, uint64_t n, uint64_t k, double* y) {
  std::vector<double> wd(4 * k);  // four columns of w as double, used by every row
  uint64_t c = 0;
  for (; c + 4 <= n; c += 4) f64_columns<4>(x, w, m, n, k, c, wd.data(), y);
  for (; c < n; ++c) f64_columns<1>(x, w, m, n, k, c, wd.data(), y);
}

bool fma_supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

}  // namespace ckpt::int8_gemm_avx2

#else  // not x86: never called (the dispatch runs the scalar loops)

namespace ckpt::int8_gemm_avx2 {
void decode_int8_shift(const uint8_t*, const uint8_t*, uint64_t, uint64_t, uint64_t, uint64_t, int8_t*) {}
void int32_gemm(const int8_t*, const int8_t*, uint64_t, uint64_t, uint64_t, int32_t*) {}
void f64_gemm(const float*, const float*, uint64_t, uint64_t, uint64_t, double*) {}
bool fma_supported() { return false; }
}  // namespace ckpt::int8_gemm_avx2

#endif

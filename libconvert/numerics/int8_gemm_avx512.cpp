// The AVX-512 loop of the double-precision product (int8_gemm_ref.h gemm_f64), for the CPUs
// whose ISA choice is avx512 (ggml_dequant_isa()): the INT8-shift verify's GEMM check spends
// most of its CPU time here, and a 512-bit register holds two columns' four lanes.
//
// Same results as the scalar loop, bit for bit, as the AVX2 loop is (int8_gemm_avx2.cpp):
// a 512-bit accumulator is two columns' four-lane chains side by side (lanes 0-3 column c,
// 4-7 column c + 1), each lane its own chain in the documented order (lane j: i ≡ j mod 4,
// i rising), the lanes combined as (l0 + l1) + (l2 + l3). Every term is a product of two
// floats widened to double, exact, so the fused multiply-add rounds once where the scalar
// loop's add does (-ffp-contract=off keeps the compiler from fusing anything else).
//
// Register tiles of up to 4 rows × 8 columns: the block's eight columns widened once into
// `wd`, pair by pair and four elements at a time ([w_c[i..i+3], w_{c+1}[i..i+3]], one 64-byte
// load), every row of x run against them; a row's four floats are loaded once per step,
// widened, and used by the tile's four pairs.
#include "numerics/int8_gemm_avx512.h"

#include "numerics/f64_lanes.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <vector>

#define CKPT_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define CKPT_UNROLL _Pragma("GCC unroll 8")

namespace ckpt::int8_gemm_avx512 {
namespace {

constexpr int kPairs = 4;  // columns per block: 2·kPairs

// Columns [c, c + 2P) of w (column c + 2P - 1 may be `n`: a zero column, its results
// dropped) widened into wd, pair-interleaved per four elements; k4 = k / 4 steps.
void widen_pairs(const float* w, uint64_t n, uint64_t k, uint64_t c, int pairs, double* wd) {
  const uint64_t k4 = k / 4;
  for (int p = 0; p < pairs; ++p)
    for (int half = 0; half < 2; ++half) {
      const uint64_t col = c + 2 * p + half;
      double* to = wd + p * k4 * 8 + half * 4;
      for (uint64_t s = 0; s < k4; ++s)
        for (int j = 0; j < 4; ++j) to[s * 8 + j] = col < n ? static_cast<double>(w[col * k + s * 4 + j]) : 0.0;
    }
}

// R rows of x × P column pairs starting at column c: y[r·n + col] for the columns < n.
template <int R, int P>
CKPT_AVX512 void f64_tile(const float* x, const float* w, const double* wd, uint64_t n, uint64_t k, uint64_t c,
                          double* y) {
  const uint64_t k4 = k / 4;
  __m512d s[R][P];
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_pd();
  for (uint64_t st = 0; st < k4; ++st) {
    __m512d xv[R];
    CKPT_UNROLL
    for (int r = 0; r < R; ++r)  // (maskz: GCC 12 warns of _mm512_cvtps_pd's undefined source)
      xv[r] = _mm512_maskz_cvtps_pd(0xFF, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x + r * k + st * 4)));
    CKPT_UNROLL
    for (int p = 0; p < P; ++p) {
      const __m512d wv = _mm512_loadu_pd(wd + (p * k4 + st) * 8);
      CKPT_UNROLL
      for (int r = 0; r < R; ++r) s[r][p] = _mm512_fmadd_pd(xv[r], wv, s[r][p]);
    }
  }
  CKPT_UNROLL
  for (int r = 0; r < R; ++r)
    CKPT_UNROLL
    for (int p = 0; p < P; ++p) {
      alignas(64) double lane[8];
      _mm512_store_pd(lane, s[r][p]);
      for (int half = 0; half < 2; ++half) {
        const uint64_t col = c + 2 * p + half;
        if (col >= n) continue;
        y[r * n + col] = f64_lanes_finish(lane + 4 * half, x + r * k, w + col * k, k4 * 4, k);
      }
    }
}

template <int P>
CKPT_AVX512 void f64_rows(const float* x, const float* w, const double* wd, uint64_t m, uint64_t n, uint64_t k,
                          uint64_t c, double* y) {
  uint64_t r = 0;
  for (; r + 4 <= m; r += 4) f64_tile<4, P>(x + r * k, w, wd, n, k, c, y + r * n);
  for (; r + 2 <= m; r += 2) f64_tile<2, P>(x + r * k, w, wd, n, k, c, y + r * n);
  if (r < m) f64_tile<1, P>(x + r * k, w, wd, n, k, c, y + r * n);
}

}  // namespace

CKPT_AVX512 void f64_gemm(const float* x, const float* w, uint64_t m, uint64_t n, uint64_t k, double* y) {
  std::vector<double> wd(std::max<uint64_t>(8, 2 * kPairs * (k / 4) * 4));  // never empty: widen_pairs offsets into it
  uint64_t c = 0;
  for (; c + 2 * kPairs <= n; c += 2 * kPairs) {
    widen_pairs(w, n, k, c, kPairs, wd.data());
    f64_rows<kPairs>(x, w, wd.data(), m, n, k, c, y);
  }
  for (; c < n; c += 2) {  // the last columns a pair at a time (an odd one beside a zero column)
    widen_pairs(w, n, k, c, 1, wd.data());
    f64_rows<1>(x, w, wd.data(), m, n, k, c, y);
  }
}

bool supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                         __builtin_cpu_supports("fma");
  return ok;
}

}  // namespace ckpt::int8_gemm_avx512

#else  // not x86: never called (the dispatch runs the scalar loop)

namespace ckpt::int8_gemm_avx512 {
void f64_gemm(const float*, const float*, uint64_t, uint64_t, uint64_t, double*) {}
bool supported() { return false; }
}  // namespace ckpt::int8_gemm_avx512

#endif

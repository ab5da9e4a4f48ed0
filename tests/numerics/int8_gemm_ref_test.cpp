#include "numerics/int8_gemm_ref.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/loader.h"
#include "io/mapped_file.h"
#include "numerics/fp8.h"
#include "test_require.h"
#include "test_util.h"

namespace ckpt {
namespace {

constexpr int kLutX2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// ---------------------------------------------------------------------------------------------
// Activation quantization (spec §6).

TEST(Int8Activation, ScaleRoundingAndZeroRow) {
  // Row 0: max 127 → scale exactly 1, so x / scale is x and the ties are visible.
  // Row 1: all zero → scale 1, codes 0. Row 2: max 2 → scale 2/127 (fp32 division).
  const std::vector<float> x = {127, 2.5f, 3.5f, -2.5f, -127, 0.5f, 1.5f, -0.5f,
                                0, 0, 0, 0, 0, 0, 0, 0,
                                2, -2, 1, -1, 0.5f, 0, 1e-30f, -2};
  std::vector<int8_t> a(x.size());
  std::vector<float> s(3);
  ASSERT_TRUE(quantize_activations(x, 3, 8, a, s));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(s[2], 2.0f / 127.0f);
  EXPECT_EQ(std::vector<int8_t>(a.begin(), a.begin() + 8), (std::vector<int8_t>{127, 2, 4, -2, -127, 0, 2, 0}));
  EXPECT_EQ(std::vector<int8_t>(a.begin() + 8, a.begin() + 16), std::vector<int8_t>(8, 0));
  for (int i = 0; i < 8; ++i)  // independent: rne of the fp32 quotient
    EXPECT_EQ(a[16 + i], int8_t(std::nearbyint(x[16 + i] / s[2]))) << i;
  EXPECT_EQ(a[16], 127);
  EXPECT_EQ(a[17], -127);
}

TEST(Int8Activation, ClampAbsAndNonFinite) {
  const std::vector<float> x = {300, -50, 100, 0};
  std::vector<int8_t> a(4);
  std::vector<float> s(1);
  ASSERT_TRUE(quantize_activations(x, 1, 4, a, s, 127.0f));  // 300 → 127: scale 1
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(a, (std::vector<int8_t>{127, -50, 100, 0}));
  const std::vector<float> bad = {std::nanf(""), 1, -127, 0};
  ASSERT_TRUE(quantize_activations(bad, 1, 4, a, s));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(a, (std::vector<int8_t>{0, 1, -127, 0}));
  // An infinite max gives an infinite scale, as on the GPU: everything quantizes to 0.
  const std::vector<float> inf = {INFINITY, 1, -127, 0};
  ASSERT_TRUE(quantize_activations(inf, 1, 4, a, s));
  EXPECT_TRUE(std::isinf(s[0]));
  EXPECT_EQ(a, (std::vector<int8_t>{0, 0, 0, 0}));
  // Size mismatches are refused without writing.
  EXPECT_FALSE(quantize_activations(x, 2, 4, a, s));
  EXPECT_FALSE(quantize_activations(x, 1, 4, std::span(a).first(3), s));
}

// ---------------------------------------------------------------------------------------------
// Decode and GEMM on hand-made slabs.

TEST(Int8Decode, SingleTileByHand) {
  // 1 row, K = 32: tile byte i holds source byte {0,1,8,9,2,3,10,11,...}[i].
  const RemapParams p{1, 32, 3, RemapRounding::half_away};
  std::vector<uint8_t> mx(128, 0), sh(8, 0);
  mx[0] = 0xF1;  // source byte 0: element 0 = +1 (code 1), element 1 = −12 (code 15)
  mx[2] = 0x80;  // source byte 8: elements 16, 17 = 0, −0 → both 0
  mx[15] = 0x07; // source byte 15: element 30 = 12
  sh[0] = 3;     // shift 3 for block 0
  std::vector<int8_t> q(32, 55);
  ASSERT_TRUE(decode_int8_shift(mx, sh, p, q));
  std::vector<int8_t> want(32, 0);
  want[0] = 8;
  want[1] = -96;
  want[30] = 96;
  EXPECT_EQ(q, want);
  EXPECT_FALSE(decode_int8_shift(std::span(mx).first(127), sh, p, q));
  EXPECT_FALSE(decode_int8_shift(mx, sh, RemapParams{1, 48, 3, RemapRounding::half_away}, q));
  EXPECT_FALSE(decode_int8_shift(mx, sh, p, std::span(q).first(31)));
}

TEST(Int8GemmRef, EpilogueRoundsLikeTheKernel) {
  // acc = 3·(−96) + 1·5 = −283; out = bf16((−283 · a_scale) · channel_scale).
  const std::vector<int8_t> a = {3, 1}, q = {-96, 5};
  const std::vector<float> as = {0.013f}, cs = {0.0625f};
  std::vector<int32_t> acc(1);
  std::vector<uint16_t> out(1);
  ASSERT_TRUE(int8_gemm_bf16(a, as, q, cs, 1, 1, 2, acc, out));
  EXPECT_EQ(acc[0], -283);
  const float fp32 = (-283.0f * 0.013f) * 0.0625f;
  EXPECT_EQ(out[0], bf16_from_float_rne(fp32));
  ASSERT_TRUE(int8_gemm_bf16(a, as, q, cs, 1, 1, 2, {}, out));  // accumulators not wanted
  EXPECT_FALSE(int8_gemm_bf16(a, as, q, cs, 1, 1, 2, std::span(acc).first(0), std::span(out).first(0)));
  EXPECT_FALSE(int8_gemm_bf16(a, as, q, cs, 1, 2, 2, acc, out));
  const uint64_t huge_k = 200000;  // k·128² would overflow int32
  std::vector<int8_t> big(huge_k);
  EXPECT_FALSE(int8_gemm_bf16(big, as, big, cs, 1, 1, huge_k, acc, out));
}

// ---------------------------------------------------------------------------------------------
// On the oracle's remapped weights (dsv4-tiny, Triton rounding) against the original MXFP4.

using test::tensor_bytes;

// The original weights w[n][k] = lut_x2[c]·2^(b−128) of one expert's fused matrix, as doubles.
std::vector<double> original_weights(const LoadedModel& in, const std::string& block, const std::string& matrix,
                                     int expert, uint64_t& rows, uint64_t& k) {
  std::vector<double> w;
  rows = 0;
  for (const char* part : matrix == "w13" ? std::vector<const char*>{"w1", "w3"} : std::vector<const char*>{"w2"}) {
    const std::string base = block + ".ffn.experts." + std::to_string(expert) + "." + part;
    const auto codes = tensor_bytes(in, base + ".weight"), scales = tensor_bytes(in, base + ".scale");
    k = in.view.find(base + ".weight")->shape[1] * 2;
    const uint64_t part_rows = codes.size() / (k / 2);
    for (uint64_t n = 0; n < part_rows; ++n)
      for (uint64_t i = 0; i < k; ++i) {
        const uint8_t byte = codes[n * (k / 2) + i / 2];
        const int code = i % 2 ? byte >> 4 : byte & 15;
        w.push_back(kLutX2[code] * std::ldexp(1.0, int(scales[n * (k / 32) + i / 32]) - 128));
      }
    rows += part_rows;
  }
  return w;
}

// Naive decode straight from the §4 formulas: walk tile byte t, find its lane, row and source
// elements, apply lut_x2 and the row's 2-bit shift.
std::vector<int> naive_decode(const uint8_t* mxfp4, const uint8_t* shift2, uint64_t rows, uint64_t k) {
  const uint64_t kb_count = k / 32, groups = (rows + 7) / 8;
  std::vector<int> q(rows * k, 0);
  for (uint64_t kb = 0; kb < kb_count; ++kb)
    for (uint64_t ng = 0; ng < groups; ++ng)
      for (uint64_t t = 0; t < 128; ++t) {
        const uint64_t lane = t / 4, lane_byte = t % 4, n = ng * 8 + lane / 4, tid = lane % 4;
        if (n >= rows) continue;
        const uint64_t j = tid * 2 + (lane_byte & 1) + (lane_byte / 2) * 8;
        const uint8_t byte = mxfp4[(kb * groups + ng) * 128 + t];
        const int shift = (shift2[((kb / 4) * groups + n / 8) * 8 + n % 8] >> (2 * (kb % 4))) & 3;
        q[n * k + kb * 32 + 2 * j] = kLutX2[byte & 15] * (1 << shift);
        q[n * k + kb * 32 + 2 * j + 1] = kLutX2[byte >> 4] * (1 << shift);
      }
  return q;
}

// Sums for the relative L2 errors over every (token, expert, row).
struct ErrorSums {
  double err_sq = 0, ref_sq = 0;        // BF16 output vs exact reference
  double weight_only_sq = 0;            // Σx·w' (exact) vs Σx·w: the remap's share
  double act_bound_sq = 0, x_sq_over_k = 0;  // Σ_m (s_m/2)², Σ_m ||x_m||²/K, one per expert
  double w_sq = 0, wq_sq = 0, delta_sq = 0;  // ||W||², ||W'||², ||W'−W||², summed over experts
};

// One expert: checks (a) the accumulators and BF16 bits against a naive GEMM and (b) every
// element against the rigorous per-element bound, and accumulates the L2 sums.
void check_expert(const std::vector<float>& x, uint64_t m, const std::vector<double>& w, const uint8_t* mxfp4,
                  const uint8_t* shift2, const float* channel_scale, uint64_t rows, uint64_t k, ErrorSums& sums) {
  const RemapParams p{rows, k, 3, RemapRounding::half_away};
  const std::vector<int> q_naive = naive_decode(mxfp4, shift2, rows, k);
  std::vector<int8_t> q(rows * k);
  ASSERT_TRUE(decode_int8_shift({mxfp4, remap_mxfp4_bytes(p)}, {shift2, remap_shift2_bytes(p)}, p, q));
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], q_naive[i]) << i;

  std::vector<int8_t> a(m * k);
  std::vector<float> a_scale(m);
  ASSERT_TRUE(quantize_activations(x, m, k, a, a_scale));
  std::vector<int32_t> acc(m * rows);
  std::vector<uint16_t> out(m * rows);
  ASSERT_TRUE(int8_gemm_bf16(a, a_scale, q, {channel_scale, rows}, m, rows, k, acc, out));

  for (uint64_t r = 0; r < m; ++r) {
    double x_sq = 0;
    for (uint64_t i = 0; i < k; ++i) x_sq += double(x[r * k + i]) * x[r * k + i];
    sums.act_bound_sq += std::pow(a_scale[r] / 2.0, 2);
    sums.x_sq_over_k += x_sq / double(k);
    for (uint64_t n = 0; n < rows; ++n) {
      int64_t acc_naive = 0;
      double y_ref = 0, y_wq = 0, abs_wq = 0, x_delta = 0;
      for (uint64_t i = 0; i < k; ++i) {
        const double wq = q_naive[n * k + i] * double(channel_scale[n]), xi = x[r * k + i];
        acc_naive += int64_t(a[r * k + i]) * q_naive[n * k + i];
        y_ref += xi * w[n * k + i];
        y_wq += xi * wq;
        abs_wq += std::fabs(wq);
        x_delta += std::fabs(xi) * std::fabs(wq - w[n * k + i]);
      }
      ASSERT_EQ(acc[r * rows + n], acc_naive) << "token " << r << " row " << n;
      const float fp32 = (float(acc_naive) * a_scale[r]) * channel_scale[n];
      ASSERT_EQ(out[r * rows + n], bf16_from_float_rne(fp32)) << "token " << r << " row " << n;
      // Rigorous per element: |ε| <= s·(0.5 + 2^−17) (rne plus the fp32 quotient's rounding);
      // z = Σâ·w' is exact in acc; the epilogue adds <= 2^−24 and BF16 <= 2^−9 relative.
      const double y = bf16_to_float(out[r * rows + n]);
      const double z = double(acc_naive) * a_scale[r] * channel_scale[n];
      const double bound = a_scale[r] * (0.5 + 0x1p-17) * abs_wq + x_delta + (0x1p-9 + 0x1p-23) * std::fabs(z);
      ASSERT_LE(std::fabs(y - y_ref), bound * (1 + 1e-12)) << "token " << r << " row " << n;
      sums.err_sq += (y - y_ref) * (y - y_ref);
      sums.ref_sq += y_ref * y_ref;
      sums.weight_only_sq += (y_wq - y_ref) * (y_wq - y_ref);
    }
  }
  for (uint64_t i = 0; i < rows * k; ++i) {
    const double wq = q_naive[i] * double(channel_scale[i / k]);
    sums.w_sq += w[i] * w[i];
    sums.wq_sq += wq * wq;
    sums.delta_sq += (wq - w[i]) * (wq - w[i]);
  }
}

// Relative L2 error bound (in expectation over zero-mean activations independent of their
// rounding errors; y_ref can cancel, so no worst-case relative bound exists):
//   y − y_ref = Σ_k ε·w' (activations) + Σ_k x·δ (weights) + epilogue/BF16 rounding, with
//   |ε| <= s_m/2 = max|x_m|/254, δ = w' − w from the remap, BF16 <= 2^−9 relative.
//   E||Σε·w'||² <= Σ_m (s_m/2)²·||W'||²,  E||Σx·δ||² = Σ_m (||x_m||²/K)·||δ||²,
//   E||y_ref||² = Σ_m (||x_m||²/K)·||W||².
//   rel_L2 <= κ·sqrt(r_a² + r_w²) + 2^−9 + 2^−23, where
//   r_a² = Σ_m (s_m/2)² / Σ_m (||x_m||²/K) · ||W'||²/||W||²,  r_w² = ||δ||²/||W||²
//   (r_w² = sum_sq_err / sum_sq_weight of RemapStats), κ = 1.5 for finite-sample spread.
// (|ε| <= s/2 is the worst case; uniform rounding error has E[ε²] = s²/12, so r_a is ~√3 loose.)
double l2_bound(const ErrorSums& s, double& r_a, double& r_w) {
  r_a = std::sqrt(s.act_bound_sq / s.x_sq_over_k * (s.wq_sq / s.w_sq));
  r_w = std::sqrt(s.delta_sq / s.w_sq);
  return 1.5 * std::hypot(r_a, r_w) + 0x1p-9 + 0x1p-23;
}

TEST(Int8GemmRef, OracleWeightsExactAccumulatorsAndBoundedError) {
  auto in = test::load_model_checked(test::fixture("oracle/dsv4-tiny"));
  auto remapped = test::load_model_checked(test::fixture("oracle/dsv4-tiny.remap.triton.safetensors"));
  ASSERT_TRUE(in && remapped);
  const uint64_t m = 32;
  for (const std::string block : {"layers.0", "mtp.1"}) {
    for (const std::string matrix : {"w13", "w2"}) {
      const std::string fused = block + ".ffn.experts." + matrix;
      const auto mx = tensor_bytes(*remapped, fused + ".mxfp4"), sh = tensor_bytes(*remapped, fused + ".shift2"),
                 cs_bytes = tensor_bytes(*remapped, fused + ".channel_scale");
      std::vector<float> cs(cs_bytes.size() / 4);
      std::memcpy(cs.data(), cs_bytes.data(), cs_bytes.size());  // F32 LE, as the host
      ErrorSums sums;
      for (int e = 0; e < 8; ++e) {
        uint64_t rows = 0, k = 0;
        const std::vector<double> w = original_weights(*in, block, matrix, e, rows, k);
        const RemapParams p{rows, k, 3, RemapRounding::half_away};
        std::mt19937 rng(1234 + e);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(m * k);
        for (float& v : x) v = dist(rng);
        check_expert(x, m, w, mx.data() + e * remap_mxfp4_bytes(p), sh.data() + e * remap_shift2_bytes(p),
                     cs.data() + e * rows, rows, k, sums);
        if (HasFatalFailure()) return;
      }
      double r_a = 0, r_w = 0;
      const double bound = l2_bound(sums, r_a, r_w);
      const double measured = std::sqrt(sums.err_sq / sums.ref_sq);
      const double weight_only = std::sqrt(sums.weight_only_sq / sums.ref_sq);
      std::printf("[ gemm     ] %-24s rel L2 %.5f (bound %.5f; r_a %.5f, r_w %.5f; weight-only measured %.5f)\n",
                  fused.c_str(), measured, bound, r_a, r_w, weight_only);
      EXPECT_LE(measured, bound) << fused;
      EXPECT_LT(measured, 0.04) << fused;  // upstream's dense acceptance (spec §7.4)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The AVX2 loops against the scalar ones (the same function), and both against independent
// sums written here.

bool cpu_runs_avx2() { return ggml_dequant_best_isa() >= DequantIsa::avx2; }
bool cpu_runs_avx512() { return ggml_dequant_best_isa() >= DequantIsa::avx512; }

// Fills a [m, k] and q [n, k] by pattern: 0 random, 1 all −128, 2 all 127, 3 a −128 / q 127,
// 4 alternating −128 / 127 (a) against 127 / −128 (q).
void fill(int pattern, std::mt19937_64& rng, std::vector<int8_t>& a, std::vector<int8_t>& q) {
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = pattern == 0 ? int8_t(rng()) : pattern == 1 || pattern == 3 ? int8_t(-128) : pattern == 2 ? int8_t(127)
                                                                                    : int8_t(i % 2 ? 127 : -128);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = pattern == 0 ? int8_t(rng()) : pattern == 1 ? int8_t(-128) : pattern == 2 || pattern == 3 ? int8_t(127)
                                                                                    : int8_t(i % 2 ? -128 : 127);
}

TEST(Int8GemmIsa, Avx2AccumulatorsAndBf16EqualTheScalarLoopsAndAnInt64Sum) {
  if (!cpu_runs_avx2()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs here";
  std::mt19937_64 rng(20261201);
  struct Size {
    uint64_t m, n, k;
  };
  // m = 1 and odd m / n (the 1-row and 1-column tiles), k multiples of 32 around the 16-wide
  // steps, k with a scalar tail, and the largest k whose accumulators fit int32.
  const std::vector<Size> sizes = {{1, 1, 32},  {1, 7, 32},  {2, 4, 64},  {3, 5, 96},   {1, 9, 2048}, {5, 17, 128},
                                   {4, 8, 256}, {7, 3, 160}, {2, 1, 8},   {3, 6, 37},   {1, 1, 1},    {64, 33, 512},
                                   {1, 5, 131040}};
  for (const Size& z : sizes) {
    for (int pattern = 0; pattern < 5; ++pattern) {
      SCOPED_TRACE(testing::Message() << "m " << z.m << " n " << z.n << " k " << z.k << " pattern " << pattern);
      std::vector<int8_t> a(z.m * z.k), q(z.n * z.k);
      fill(pattern, rng, a, q);
      std::vector<float> as(z.m), cs(z.n);
      for (float& v : as) v = std::ldexp(float(rng() % 1000 + 1), -int(rng() % 20));
      for (float& v : cs) v = std::ldexp(float(rng() % 1000 + 1), -int(rng() % 20));
      std::vector<int32_t> acc_s(z.m * z.n), acc_v(z.m * z.n);
      std::vector<uint16_t> out_s(z.m * z.n), out_v(z.m * z.n), out_v_no_acc(z.m * z.n);
      ASSERT_TRUE(int8_gemm_bf16_isa(DequantIsa::scalar, a, as, q, cs, z.m, z.n, z.k, acc_s, out_s));
      ASSERT_TRUE(int8_gemm_bf16_isa(DequantIsa::avx2, a, as, q, cs, z.m, z.n, z.k, acc_v, out_v));
      ASSERT_TRUE(int8_gemm_bf16_isa(DequantIsa::avx2, a, as, q, cs, z.m, z.n, z.k, {}, out_v_no_acc));
      for (uint64_t r = 0; r < z.m; ++r)
        for (uint64_t c = 0; c < z.n; ++c) {
          int64_t want = 0;
          for (uint64_t i = 0; i < z.k; ++i) want += int64_t(a[r * z.k + i]) * q[c * z.k + i];
          const uint64_t o = r * z.n + c;
          ASSERT_EQ(acc_s[o], want) << "scalar [" << r << ", " << c << "]";
          ASSERT_EQ(acc_v[o], want) << "avx2 [" << r << ", " << c << "]";
          ASSERT_EQ(out_v[o], out_s[o]) << "[" << r << ", " << c << "]";
          ASSERT_EQ(out_v_no_acc[o], out_s[o]) << "[" << r << ", " << c << "]";
          ASSERT_EQ(out_s[o], bf16_from_float_rne((float(want) * as[r]) * cs[c]));
        }
      if (z.k == 131040 && pattern == 1) {
        EXPECT_EQ(acc_v[0], 131040 * 16384);  // 2^31 − 524288
      }
    }
  }
  // The default entry point takes the process's ISA and gives the same bits.
  std::vector<int8_t> a(3 * 64), q(5 * 64);
  fill(0, rng, a, q);
  const std::vector<float> as(3, 0.5f), cs(5, 0.25f);
  std::vector<int32_t> acc_d(15), acc_s(15);
  std::vector<uint16_t> out_d(15), out_s(15);
  ASSERT_TRUE(int8_gemm_bf16(a, as, q, cs, 3, 5, 64, acc_d, out_d));
  ASSERT_TRUE(int8_gemm_bf16_isa(DequantIsa::scalar, a, as, q, cs, 3, 5, 64, acc_s, out_s));
  EXPECT_EQ(acc_d, acc_s);
  EXPECT_EQ(out_d, out_s);
}

TEST(Int8GemmIsa, DecodeOnBothIsasEqualsTheNaiveDecode) {
  std::mt19937_64 rng(99);
  struct Size {
    uint64_t rows, k;
  };
  // Partial row groups, strips of 8 32-blocks with a remainder, and every byte value at
  // every tile position (pattern 1) with every shift.
  const std::vector<Size> sizes = {{1, 32}, {7, 64}, {8, 32}, {13, 288}, {33, 1056}, {64, 512}, {16, 8192}};
  for (const Size& z : sizes) {
    for (int pattern = 0; pattern < 2; ++pattern) {
      SCOPED_TRACE(testing::Message() << "rows " << z.rows << " k " << z.k << " pattern " << pattern);
      const RemapParams p{z.rows, z.k, 3, RemapRounding::half_away};
      std::vector<uint8_t> mx(remap_mxfp4_bytes(p)), sh(remap_shift2_bytes(p));
      for (size_t i = 0; i < mx.size(); ++i) mx[i] = pattern == 0 ? uint8_t(rng()) : uint8_t(i * 7 + i / 128);
      for (size_t i = 0; i < sh.size(); ++i) sh[i] = pattern == 0 ? uint8_t(rng()) : uint8_t(i * 0x1B);
      const std::vector<int> want = naive_decode(mx.data(), sh.data(), z.rows, z.k);
      for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2}) {
        if (isa == DequantIsa::avx2 && !cpu_runs_avx2()) continue;
        std::vector<int8_t> q(z.rows * z.k, 55);
        ASSERT_TRUE(decode_int8_shift_isa(isa, mx, sh, p, q));
        for (size_t i = 0; i < q.size(); ++i)
          ASSERT_EQ(q[i], want[i]) << (isa == DequantIsa::avx2 ? "avx2" : "scalar") << " row " << i / z.k << " column "
                                   << i % z.k;
      }
    }
  }
}

// The decode digested piece by piece in cache (int8_shift_digest) is int8_digest of the whole
// decode, on both ISAs: one row group and many, partial groups, several 256 KiB pieces.
TEST(Int8GemmIsa, DecodeDigestIsTheDigestOfTheWholeDecodeOnBothIsas) {
  std::mt19937_64 rng(5);
  const DigestWeights w(0xD16E57);
  struct Size {
    uint64_t rows, k;
  };
  const std::vector<Size> sizes = {{1, 32}, {13, 288}, {100, 4096}, {301, 2048}, {8, 40960}};
  for (const Size& z : sizes) {
    SCOPED_TRACE(testing::Message() << "rows " << z.rows << " k " << z.k);
    const RemapParams p{z.rows, z.k, 3, RemapRounding::half_away};
    std::vector<uint8_t> mx(remap_mxfp4_bytes(p)), sh(remap_shift2_bytes(p));
    for (auto& b : mx) b = uint8_t(rng());
    for (auto& b : sh) b = uint8_t(rng());
    std::vector<int8_t> q(z.rows * z.k);
    ASSERT_TRUE(decode_int8_shift_isa(DequantIsa::scalar, mx, sh, p, q));
    const F32Digest want = int8_digest_isa(DequantIsa::scalar, q, 0, w);
    for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2}) {
      if (isa == DequantIsa::avx2 && !cpu_runs_avx2()) continue;
      F32Digest got;
      ASSERT_TRUE(int8_shift_digest_isa(isa, mx, sh, p, w, got));
      EXPECT_EQ(got, want) << (isa == DequantIsa::avx2 ? "avx2" : "scalar");
    }
    F32Digest got;
    ASSERT_TRUE(int8_shift_digest(mx, sh, p, w, got));
    EXPECT_EQ(got, want);
    mx.pop_back();
    EXPECT_FALSE(int8_shift_digest(mx, sh, p, w, got));  // a slab of the wrong size
  }
}

// gemm_f64's documented order written out here: lane i % 4, rising i, (l0 + l1) + (l2 + l3).
double fixed_order_dot(const float* x, const float* w, uint64_t k) {
  double lane[4] = {0, 0, 0, 0};
  for (uint64_t i = 0; i < k; ++i) {
    const volatile double p = double(x[i]) * double(w[i]);  // no contraction into an FMA
    lane[i % 4] = lane[i % 4] + p;
  }
  const double lo = lane[0] + lane[1], hi = lane[2] + lane[3];
  return lo + hi;
}

TEST(Int8GemmIsa, DoubleProductHasOneFixedOrderOnEveryIsa) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Size {
    uint64_t m, n, k;
  };
  // Every row tile (4, 2, 1) and column block (8, a pair, an odd last column) of the
  // AVX-512 loop and the AVX2 loop's (2 x 4, 1), with and without a k % 4 tail.
  const std::vector<Size> sizes = {{1, 1, 1},  {1, 1, 3},   {1, 4, 4},   {2, 5, 37},    {3, 9, 64},
                                   {1, 7, 2048}, {5, 6, 130}, {7, 19, 67}, {8, 16, 256}, {11, 25, 4099}};
  for (const Size& z : sizes) {
    SCOPED_TRACE(testing::Message() << "m " << z.m << " n " << z.n << " k " << z.k);
    std::vector<float> x(z.m * z.k), w(z.n * z.k);
    // Wide magnitudes, so that a different summation order would round differently.
    for (float& v : x) v = std::ldexp(dist(rng), int(rng() % 40) - 20);
    for (float& v : w) v = std::ldexp(dist(rng), int(rng() % 40) - 20);
    std::vector<double> ys(z.m * z.n), yv(z.m * z.n), yz(z.m * z.n), yd(z.m * z.n);
    ASSERT_TRUE(gemm_f64_isa(DequantIsa::scalar, x, w, z.m, z.n, z.k, ys));
    ASSERT_TRUE(gemm_f64(x, w, z.m, z.n, z.k, yd));
    if (cpu_runs_avx2()) {
      ASSERT_TRUE(gemm_f64_isa(DequantIsa::avx2, x, w, z.m, z.n, z.k, yv));
    }
    if (cpu_runs_avx512()) {
      ASSERT_TRUE(gemm_f64_isa(DequantIsa::avx512, x, w, z.m, z.n, z.k, yz));
    }
    for (uint64_t r = 0; r < z.m; ++r)
      for (uint64_t c = 0; c < z.n; ++c) {
        const uint64_t o = r * z.n + c;
        const double want = fixed_order_dot(x.data() + r * z.k, w.data() + c * z.k, z.k);
        ASSERT_EQ(std::bit_cast<uint64_t>(ys[o]), std::bit_cast<uint64_t>(want)) << "scalar [" << r << ", " << c << "]";
        ASSERT_EQ(std::bit_cast<uint64_t>(yd[o]), std::bit_cast<uint64_t>(want)) << "default [" << r << ", " << c << "]";
        if (cpu_runs_avx2()) {
          ASSERT_EQ(std::bit_cast<uint64_t>(yv[o]), std::bit_cast<uint64_t>(want)) << "avx2 [" << r << ", " << c << "]";
        }
        if (cpu_runs_avx512()) {
          ASSERT_EQ(std::bit_cast<uint64_t>(yz[o]), std::bit_cast<uint64_t>(want)) << "avx512 [" << r << ", " << c << "]";
        }
      }
    // One column block at a time (as verify splits the work): the same numbers.
    for (uint64_t c = 0; c < z.n; ++c) {
      std::vector<double> col(z.m);
      ASSERT_TRUE(gemm_f64(x, std::span<const float>(w).subspan(c * z.k, z.k), z.m, 1, z.k, col));
      for (uint64_t r = 0; r < z.m; ++r) ASSERT_EQ(std::bit_cast<uint64_t>(col[r]), std::bit_cast<uint64_t>(yd[r * z.n + c]));
    }
  }
  std::vector<float> x(8), w(8);
  std::vector<double> y(1);
  EXPECT_FALSE(gemm_f64(x, w, 1, 1, 4, y));  // sizes do not match
  EXPECT_FALSE(gemm_f64(x, w, 2, 2, 4, std::span<double>(y)));
  if (!cpu_runs_avx512())
    test::skip_or_fail_without(test::Need::avx512,
                               "this CPU has no AVX-512F: the AVX-512 double product was not checked (scalar and AVX2 were)");
}

}  // namespace
}  // namespace ckpt

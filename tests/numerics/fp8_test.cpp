#include "numerics/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/json.h"
#include "formats/loader.h"
#include "io/mapped_file.h"
#include "test_util.h"

namespace ckpt {
namespace {

// ---------------------------------------------------------------------------------------------
// Independent references: integer arithmetic only, decoded from the bit fields here, so they
// share no code path with the library (no ldexpf, no float bit trick).

struct ExactValue {  // (−1)^neg · sig · 2^exp
  bool neg;
  uint64_t sig;
  int exp;
};

ExactValue e4m3_exact(uint8_t c) {
  const int e = (c >> 3) & 0xF, m = c & 7;
  const bool neg = (c & 0x80) != 0;
  if (e == 0) return {neg, static_cast<uint64_t>(m), -9};
  return {neg, static_cast<uint64_t>(8 + m), e - 10};
}

struct Rounded {
  uint16_t bits;
  bool exact;
};

// Rounds an exact value once to BF16 (RNE). BF16 finite magnitudes are q · 2^qe with
// q ∈ [128, 255] for normals (qe = leading exponent − 7) and q < 128 at qe = −133 for subnormals.
Rounded bf16_from_exact(const ExactValue& v) {
  const uint16_t sign = v.neg ? 0x8000 : 0;
  if (v.sig == 0) return {sign, true};
  const int lead = v.exp + static_cast<int>(std::bit_width(v.sig)) - 1;
  int qe = std::max(lead - 7, -133);
  const int sh = qe - v.exp;  // q = sig · 2^−sh, rounded
  uint64_t q = 0;
  bool exact = true;
  if (sh <= 0) {
    q = v.sig << -sh;
  } else if (sh >= 64) {
    exact = false;  // far below half a quantum
  } else {
    q = v.sig >> sh;
    const uint64_t rem = v.sig & ((uint64_t{1} << sh) - 1), half = uint64_t{1} << (sh - 1);
    exact = rem == 0;
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  if (q == 256) {  // rounding carried into the next binade
    q = 128;
    ++qe;
  }
  if (qe == -133 && q < 128) return {static_cast<uint16_t>(sign | q), exact};  // subnormal or zero
  const int e = qe + 7;
  if (e > 127) return {static_cast<uint16_t>(sign | 0x7F80), false};
  return {static_cast<uint16_t>(sign | ((e + 127) << 7) | (q & 0x7F)), exact};
}

// BF16 from float by integer RNE on the bit pattern, written out longhand.
uint16_t ref_bf16_rne(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t hi = u >> 16;
  const uint32_t lo = u & 0xFFFF;
  if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) ++hi;
  return static_cast<uint16_t>(hi);
}

float ref_e4m3_float(uint8_t c) {
  const ExactValue v = e4m3_exact(c);
  const double mag = std::ldexp(static_cast<double>(v.sig), v.exp);  // exact in double, then in float
  return static_cast<float>(v.neg ? -mag : mag);
}

bool bf16_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }
bool bf16_is_subnormal(uint16_t b) { return (b & 0x7F80) == 0 && (b & 0x7F) != 0; }

uint16_t get_bf16(const std::vector<uint8_t>& out, size_t i) {
  return static_cast<uint16_t>(out[2 * i] | (out[2 * i + 1] << 8));
}

// ---------------------------------------------------------------------------------------------
// Scalar functions.

TEST(Fp8Scalar, E4m3DecodeKnownCodes) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0xC0), -2.0f);
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(e4m3_to_float(0x00)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    EXPECT_EQ(e4m3_is_nan(code), c == 0x7F || c == 0xFF) << c;
    if (!e4m3_is_nan(code)) {
      EXPECT_EQ(std::bit_cast<uint32_t>(e4m3_to_float(code)), std::bit_cast<uint32_t>(ref_e4m3_float(code))) << c;
    }
  }
}

TEST(Fp8Scalar, Bf16RneTiesNanAndOverflow) {
  const auto bf = [](uint32_t u) { return bf16_from_float_rne(std::bit_cast<float>(u)); };
  EXPECT_EQ(bf(0x3F800000), 0x3F80);  // 1.0
  EXPECT_EQ(bf(0x3F808000), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf(0x3F818000), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(bf(0x3F808001), 0x3F81);  // above the tie
  EXPECT_EQ(bf(0x80000000), 0x8000);  // −0
  EXPECT_EQ(bf(0x00008000), 0x0000);  // subnormal tie to even (zero)
  EXPECT_EQ(bf(0x7F7F7FFF), 0x7F7F);  // just below the overflow tie
  EXPECT_EQ(bf(0x7F7F8000), 0x7F80);  // tie at BF16 max rounds to even = inf
  EXPECT_EQ(bf(0x7F7FFFFF), 0x7F80);  // FLT_MAX → inf
  EXPECT_EQ(bf(0xFF7FFFFF), 0xFF80);  // −FLT_MAX → −inf
  EXPECT_EQ(bf(0x7F800000), 0x7F80);  // inf stays inf
  EXPECT_EQ(bf(0x7F800001), 0x7FC0);  // signalling NaN: quiet, not inf
  EXPECT_EQ(bf(0xFF80FFFF), 0xFFC0);  // payload only in the low half: still NaN, sign kept
  EXPECT_EQ(bf(0x7FFFFFFF), 0x7FFF);  // would carry out of the exponent without the NaN branch
}

// All 254 finite codes × all 255 finite scales against the integer reference.
TEST(Fp8Scalar, E8m0ExhaustiveMatchesExactReference) {
  uint64_t pairs = 0, mismatches = 0, subnormal = 0, inf = 0, neg_zero = 0, inexact_in_exact_range = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (e4m3_is_nan(code)) continue;
    for (int b = 0; b < 255; ++b) {
      ExactValue v = e4m3_exact(code);
      v.exp += b - 127;
      const Rounded want = bf16_from_exact(v);
      const uint16_t got = fp8_e8m0_product_bf16(code, static_cast<uint8_t>(b));
      ++pairs;
      if (got != want.bits && ++mismatches <= 10)
        ADD_FAILURE() << "code 0x" << std::hex << c << " scale " << std::dec << b << ": got 0x" << std::hex << got
                      << " want 0x" << want.bits;
      subnormal += bf16_is_subnormal(want.bits);
      inf += (want.bits & 0x7FFF) == 0x7F80;
      neg_zero += want.bits == 0x8000;
      inexact_in_exact_range += !want.exact && b >= 3 && b <= 246;
    }
  }
  EXPECT_EQ(pairs, 64770u);
  EXPECT_EQ(mismatches, 0u);
  // The corners the spec names were really exercised, and §7.2's exact range holds.
  EXPECT_GT(subnormal, 0u);
  EXPECT_GT(inf, 0u);
  EXPECT_GT(neg_zero, 0u);
  EXPECT_EQ(inexact_in_exact_range, 0u);
  std::printf("E8M0 exhaustive: %llu pairs, %llu BF16 subnormal, %llu inf, %llu -0\n",
              static_cast<unsigned long long>(pairs), static_cast<unsigned long long>(subnormal),
              static_cast<unsigned long long>(inf), static_cast<unsigned long long>(neg_zero));
}

// Random finite fp32 scales (every exponent, both signs) plus hand-picked corners.
std::vector<float> f32_scales() {
  std::vector<float> s = {1.0f, -1.0f, 0.0f, -0.0f, 0x1p-149f, 0x1p-126f, 0x1.fffffep127f, 3.0f,
                          1.0f / 3.0f, 0.00223f, 1.0f / 448.0f, 0x1.000002p0f};
  std::mt19937 rng(20240731);
  while (s.size() < 4096) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(f)) s.push_back(f);
  }
  return s;
}

TEST(Fp8Scalar, F32ScaleIsOneBinary32MultiplyThenRne) {
  uint64_t mismatches = 0, checked = 0;
  for (float s : f32_scales()) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const uint16_t got = fp8_f32_product_bf16(code, s);
      ++checked;
      if (e4m3_is_nan(code)) {
        EXPECT_TRUE(bf16_is_nan(got));
        continue;
      }
      volatile float y = ref_e4m3_float(code) * s;  // volatile: one stored binary32 product
      const uint16_t want = ref_bf16_rne(y);
      if (got != want && ++mismatches <= 10)
        ADD_FAILURE() << "code 0x" << std::hex << c << " scale " << std::hexfloat << s << ": got 0x" << got
                      << " want 0x" << want;
    }
  }
  EXPECT_EQ(checked, 4096u * 256u);
  EXPECT_EQ(mismatches, 0u);
}

// Pre-rounding the scale to BF16 (the bf16 × bf16 peers) is a different function: this suite
// would catch it, both through a concrete pair and through the share of products it changes.
TEST(Fp8Scalar, F32ScalePreRoundedToBf16WouldDiffer) {
  const auto prerounded = [](uint8_t code, float s) {
    const float s16 = std::bit_cast<float>(static_cast<uint32_t>(ref_bf16_rne(s)) << 16);
    volatile float y = ref_e4m3_float(code) * s16;
    return ref_bf16_rne(y);
  };
  // A concrete pair: the first one in the scale list where the two functions disagree.
  bool found = false;
  for (float s : f32_scales()) {
    if (!std::isnormal(s) || std::fabs(s) > 1e30f) continue;  // pre-rounding to inf is a cruder bug
    for (int c = 0; c < 256 && !found; ++c) {
      const auto code = static_cast<uint8_t>(c);
      if (e4m3_is_nan(code) || fp8_f32_product_bf16(code, s) == prerounded(code, s)) continue;
      found = true;
      std::printf("pre-rounding differs at code 0x%02x scale %a: 0x%04x (fp32 product) vs 0x%04x\n", c,
                  static_cast<double>(s), fp8_f32_product_bf16(code, s), prerounded(code, s));
    }
    if (found) break;
  }
  EXPECT_TRUE(found);
  uint64_t differ = 0, total = 0;
  for (float s : f32_scales()) {
    if (!std::isnormal(s) || std::fabs(s) > 1e30f) continue;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      if (e4m3_is_nan(code)) continue;
      ++total;
      differ += fp8_f32_product_bf16(code, s) != prerounded(code, s);
    }
  }
  const double share = static_cast<double>(differ) / static_cast<double>(total);
  std::printf("pre-rounding the F32 scale to BF16 changes %llu of %llu products (%.1f%%)\n",
              static_cast<unsigned long long>(differ), static_cast<unsigned long long>(total), 100 * share);
  EXPECT_GT(share, 0.10);  // the spec measures ~24%
}

// ---------------------------------------------------------------------------------------------
// Block dequantizer: the table path against the scalar functions.

bool bf16_is_inf(uint16_t b) { return (b & 0x7FFF) == 0x7F80; }

// One row per E8M0 scale (block 1 × 254), the 254 finite codes in every row: every pair once,
// except the pairs that overflow BF16 (a fault, below), replaced by code 0.
TEST(Fp8Dequant, E8m0TablesMatchScalarForAllPairs) {
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if (!e4m3_is_nan(static_cast<uint8_t>(c))) codes.push_back(static_cast<uint8_t>(c));
  const Fp8Grid g{255, codes.size(), 1, codes.size()};
  std::vector<uint8_t> w, scales;
  for (int b = 0; b < 255; ++b) {
    for (uint8_t c : codes) w.push_back(bf16_is_inf(fp8_e8m0_product_bf16(c, static_cast<uint8_t>(b))) ? 0 : c);
    scales.push_back(static_cast<uint8_t>(b));
  }
  std::vector<uint8_t> out(2 * w.size());
  ASSERT_FALSE(dequant_fp8_rows_e8m0(w, 0, g, scales, out).has_value());
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_EQ(get_bf16(out, i), fp8_e8m0_product_bf16(w[i], scales[i / g.cols])) << i;
}

TEST(Fp8Dequant, F32TablesMatchScalar) {
  const std::vector<float> all = f32_scales();
  const std::vector<float> scales(all.begin(), all.begin() + 64);
  const Fp8Grid g{64 * 3, 254 * 2 + 5, 3, 254};  // ragged last column block
  std::vector<uint8_t> w(g.rows * g.cols);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<uint8_t>(i * 37 % 256);
    if (e4m3_is_nan(w[i])) w[i] = 0x80;
  }
  std::vector<float> grid(fp8_scale_rows(g) * fp8_scale_cols(g));
  for (size_t k = 0; k < grid.size(); ++k) grid[k] = scales[k % scales.size()];
  for (uint64_t i = 0; i < g.rows; ++i)  // products beyond BF16 are a fault (below): not here
    for (uint64_t j = 0; j < g.cols; ++j) {
      uint8_t& c = w[i * g.cols + j];
      if (bf16_is_inf(fp8_f32_product_bf16(c, grid[(i / g.block_rows) * fp8_scale_cols(g) + j / g.block_cols]))) c = 0;
    }
  std::vector<uint8_t> out(2 * w.size());
  ASSERT_FALSE(dequant_fp8_rows_f32(w, 0, g, grid, out).has_value());
  for (uint64_t i = 0; i < g.rows; ++i)
    for (uint64_t j = 0; j < g.cols; ++j) {
      const float s = grid[(i / g.block_rows) * fp8_scale_cols(g) + j / g.block_cols];
      ASSERT_EQ(get_bf16(out, i * g.cols + j), fp8_f32_product_bf16(w[i * g.cols + j], s)) << i << "," << j;
    }
}

// ---------------------------------------------------------------------------------------------
// Faults and arguments.

struct Case {
  Fp8Grid g{4, 300, 2, 128};  // scale grid [2, 3]
  std::vector<uint8_t> w = std::vector<uint8_t>(4 * 300, 0x38);
  std::vector<uint8_t> s = std::vector<uint8_t>(6, 127);
  std::vector<uint8_t> out = std::vector<uint8_t>(2 * 4 * 300, 0xAB);
  std::optional<Fp8Fault> run_rows(uint64_t r0, uint64_t r1) {
    return dequant_fp8_rows_e8m0(std::span(w).subspan(r0 * g.cols, (r1 - r0) * g.cols), r0, g, s,
                                 std::span(out).subspan(2 * r0 * g.cols, 2 * (r1 - r0) * g.cols));
  }
  bool out_untouched() const {
    return std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xAB; });
  }
};

TEST(Fp8Dequant, WeightNanReportsRowMajorElement) {
  for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
    Case c;
    c.w[3 * 300 + 257] = nan;
    c.w[3 * 300 + 290] = nan;
    auto f = c.run_rows(0, 4);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->kind, Fp8Fault::weight_nan);
    EXPECT_EQ(f->element, 3u * 300 + 257);
    EXPECT_TRUE(c.out_untouched());
    f = c.run_rows(2, 4);  // index stays absolute when converting a later row range
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->element, 3u * 300 + 257);
    EXPECT_FALSE(c.run_rows(0, 3).has_value());  // the rows before it are fine
  }
}

TEST(Fp8Dequant, ScaleNanReportsFirstElementUsingIt) {
  Case c;
  c.s[1 * 3 + 1] = 0xFF;  // block row 1 (rows 2–3), block column 1 (columns 128–255)
  auto f = c.run_rows(0, 4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::scale_nan);
  EXPECT_EQ(f->element, 2u * 300 + 128);
  EXPECT_TRUE(c.out_untouched());
  EXPECT_FALSE(c.run_rows(0, 2).has_value());  // rows 0–1 do not use it

  c.w[2 * 300 + 5] = 0x7F;  // an earlier NaN code wins
  f = c.run_rows(0, 4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::weight_nan);
  EXPECT_EQ(f->element, 2u * 300 + 5);

  c.w[2 * 300 + 5] = 0x38;
  c.w[2 * 300 + 128] = 0xFF;  // both bad at one element: the scale is reported
  f = c.run_rows(2, 4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::scale_nan);
  EXPECT_EQ(f->element, 2u * 300 + 128);
}

// 448 · 2^(254−127) is far beyond BF16's 3.39e38: the conversion refuses it (as the MXFP4
// path does) instead of writing ±inf, naming the first such element in row-major order. A
// huge scale with small codes only is fine; an earlier NaN code is reported first.
TEST(Fp8Dequant, ProductBeyondBf16IsAnOverflowFaultNotInf) {
  Case c;
  c.s[1 * 3 + 2] = 254;      // block row 1 (rows 2–3), block column 2 (columns 256–299): 2^127
  EXPECT_FALSE(c.run_rows(0, 4).has_value());  // 0x38 = 1.0: 2^127 is finite
  c.w[3 * 300 + 270] = 0xFE;  // −448 · 2^127
  c.w[3 * 300 + 280] = 0x7E;
  std::fill(c.out.begin(), c.out.end(), 0xAB);
  auto f = c.run_rows(0, 4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::overflow);
  EXPECT_EQ(f->element, 3u * 300 + 270);
  EXPECT_STREQ(fp8_fault_name(f->kind), "overflow");
  EXPECT_TRUE(c.out_untouched());
  EXPECT_FALSE(c.run_rows(0, 3).has_value());  // row 2 has only 1.0 there
  c.w[3 * 300 + 10] = 0x7F;  // a NaN code earlier in the row wins
  f = c.run_rows(0, 4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::weight_nan);

  // The threshold is exact: 2^(246−127) · 448 < 2^128 converts, 2^(247−127) · 448 does not.
  const Fp8Grid g{1, 1, 1, 1};
  std::vector<uint8_t> w{0x7E}, out(2);
  EXPECT_FALSE(dequant_fp8_rows_e8m0(w, 0, g, std::vector<uint8_t>{246}, out).has_value());
  f = dequant_fp8_rows_e8m0(w, 0, g, std::vector<uint8_t>{247}, out);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::overflow);
  // F32 multipliers: the same rule.
  f = dequant_fp8_rows_f32(w, 0, g, std::vector<float>{1e37f}, out);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, Fp8Fault::overflow);
  EXPECT_FALSE(dequant_fp8_rows_f32(w, 0, g, std::vector<float>{1e35f}, out).has_value());
}

TEST(Fp8Dequant, F32NonFiniteScaleIsScaleFault) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    const Fp8Grid g{3, 5, 2, 2};  // scale grid [2, 3]
    std::vector<uint8_t> w(15, 0x38), out(30);
    std::vector<float> s(6, 0.5f);
    s[5] = bad;  // rows 2.., columns 4..
    auto f = dequant_fp8_rows_f32(w, 0, g, s, out);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->kind, Fp8Fault::scale_nan);
    EXPECT_EQ(f->element, 2u * 5 + 4);
    EXPECT_STREQ(fp8_fault_name(f->kind), "scale_nan");
  }
}

TEST(Fp8Dequant, SizeMismatchesAreBadArguments) {
  struct Bad {
    const char* what;
    Fp8Grid g;
    size_t weight, out, scale;
    uint64_t row_begin;
  };
  const uint64_t big = uint64_t{1} << 40;
  const Bad table[] = {
      {"block_rows 0", {4, 8, 0, 4}, 32, 64, 2, 0},
      {"block_cols 0", {4, 8, 2, 0}, 32, 64, 2, 0},
      {"partial row", {4, 8, 2, 4}, 31, 62, 4, 0},
      {"rows past the end", {4, 8, 2, 4}, 32, 64, 4, 1},
      {"row_begin past the end", {4, 8, 2, 4}, 0, 0, 4, 5},
      {"out too short", {4, 8, 2, 4}, 32, 63, 4, 0},
      {"out too long", {4, 8, 2, 4}, 32, 66, 4, 0},
      {"scale grid short", {4, 8, 2, 4}, 32, 64, 3, 0},
      {"scale grid long", {4, 8, 2, 4}, 32, 64, 5, 0},
      {"grid product overflows", {big, big, 1, 1}, 0, 0, 0, 0},
      {"cols 0 with bytes", {4, 0, 2, 4}, 8, 16, 0, 0},
  };
  for (const Bad& b : table) {
    std::vector<uint8_t> w(b.weight, 0x38), out(b.out), s(b.scale, 127);
    std::vector<float> sf(b.scale, 1.0f);
    auto f8 = dequant_fp8_rows_e8m0(w, b.row_begin, b.g, s, out);
    auto f32 = dequant_fp8_rows_f32(w, b.row_begin, b.g, sf, out);
    ASSERT_TRUE(f8.has_value()) << b.what;
    EXPECT_EQ(f8->kind, Fp8Fault::bad_arguments) << b.what;
    ASSERT_TRUE(f32.has_value()) << b.what;
    EXPECT_EQ(f32->kind, Fp8Fault::bad_arguments) << b.what;
  }
  // Degenerate but valid: no rows, or a [5, 0] weight with its empty grid.
  std::vector<uint8_t> none, s4(4, 127);
  EXPECT_FALSE(dequant_fp8_rows_e8m0(none, 4, Fp8Grid{4, 8, 2, 4}, s4, none).has_value());
  EXPECT_FALSE(dequant_fp8_rows_e8m0(none, 0, Fp8Grid{5, 0, 2, 4}, none, none).has_value());
}

// ---------------------------------------------------------------------------------------------
// Oracle fixtures: the peers' own outputs.

std::vector<uint8_t> tensor_bytes(const LoadedModel& m, const ModelTensor& t) {
  MappedFile f;
  IoError err;
  EXPECT_TRUE(f.open(m.view.file_paths[t.file], err)) << err.message;
  if (f.size() == 0 || t.offset + t.nbytes > f.size()) return {};
  auto s = f.read_bytes(t.offset, t.nbytes);
  return {s.begin(), s.end()};
}

std::vector<float> as_f32(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);  // fixtures are little-endian, as is the host
  return v;
}

// weight_block_size from config.json's quantization_config.
std::pair<uint64_t, uint64_t> block_size(const LoadedModel& m) {
  EXPECT_NE(m.view.config, nullptr);
  if (!m.view.config) return {0, 0};
  auto qc = json_get(m.view.config->root(), "quantization_config");
  EXPECT_TRUE(qc.has_value());
  if (!qc) return {0, 0};
  auto bs = json_int_array(*qc, "weight_block_size");
  EXPECT_TRUE(bs && bs->size() == 2);
  if (!bs || bs->size() != 2) return {0, 0};
  return {static_cast<uint64_t>((*bs)[0]), static_cast<uint64_t>((*bs)[1])};
}

// `P.weight` pairs with `P<suffix>`; a bare FP8 `P` with `P.scale` (spec §7.4).
std::string scale_name(const std::string& weight, const std::string& suffix) {
  const std::string w = ".weight";
  if (weight.size() > w.size() && weight.compare(weight.size() - w.size(), w.size(), w) == 0)
    return weight.substr(0, weight.size() - w.size()) + suffix;
  return weight + ".scale";
}

struct Dequantized {
  Fp8Grid g;
  std::vector<uint8_t> codes, scales, bf16;
};

// Whole-tensor E8M0 dequant of `weight` with its scale, on the config's block grid.
Dequantized dequant_e8m0(const LoadedModel& m, const std::string& weight, std::pair<uint64_t, uint64_t> block) {
  Dequantized d;
  const ModelTensor* w = m.view.find(weight);
  const ModelTensor* s = m.view.find(scale_name(weight, ".scale"));
  EXPECT_TRUE(w && s) << weight;
  if (!w || !s) return d;
  EXPECT_EQ(w->type, "F8_E4M3");
  EXPECT_EQ(s->type, "F8_E8M0");
  EXPECT_EQ(w->shape.size(), 2u);
  d.g = Fp8Grid{w->shape[0], w->shape[1], block.first, block.second};
  EXPECT_EQ(s->shape, (std::vector<uint64_t>{fp8_scale_rows(d.g), fp8_scale_cols(d.g)})) << weight;
  d.codes = tensor_bytes(m, *w);
  d.scales = tensor_bytes(m, *s);
  d.bf16.assign(2 * d.codes.size(), 0);
  auto f = dequant_fp8_rows_e8m0(d.codes, 0, d.g, d.scales, d.bf16);
  EXPECT_FALSE(f.has_value()) << weight << ": " << fp8_fault_name(f->kind) << " at " << f->element;
  return d;
}

std::vector<uint8_t> peer_bf16(const LoadedModel& peer, const std::string& name, uint64_t elements) {
  const ModelTensor* t = peer.view.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  EXPECT_EQ(t->type, "BF16") << name;
  EXPECT_EQ(t->nbytes, 2 * elements) << name;
  return tensor_bytes(peer, *t);
}

TEST(Fp8Oracle, Dsv4TinyMatchesQwBf16ByteForByte) {
  auto in = test::load_model_checked(test::fixture("oracle/dsv4-tiny"));
  auto peer = test::load_model_checked(test::fixture("oracle/dsv4-tiny.qw-bf16"));
  ASSERT_TRUE(in && peer);
  const auto block = block_size(*in);
  ASSERT_EQ(block, (std::pair<uint64_t, uint64_t>{128, 128}));
  int tensors = 0;
  for (const ModelTensor& t : in->view.tensors) {
    if (t.type != "F8_E4M3") continue;
    const Dequantized d = dequant_e8m0(*in, t.name, block);
    EXPECT_EQ(d.bf16, peer_bf16(*peer, t.name, d.codes.size())) << t.name;
    ++tensors;
  }
  EXPECT_GE(tensors, 31);
  std::printf("dsv4-tiny: %d FP8 tensors byte-identical to qw-bf16\n", tensors);
}

TEST(Fp8Oracle, Dsv3TinyMatchesV3Bf16ByteForByte) {
  auto in = test::load_model_checked(test::fixture("oracle/dsv3-tiny"));
  auto peer = test::load_model_checked(test::fixture("oracle/dsv3-tiny.v3-bf16"));
  ASSERT_TRUE(in && peer);
  const auto block = block_size(*in);
  ASSERT_EQ(block, (std::pair<uint64_t, uint64_t>{128, 128}));
  int tensors = 0;
  bool saw_576 = false;
  for (const ModelTensor& t : in->view.tensors) {
    if (t.type != "F8_E4M3") continue;
    const ModelTensor* s = in->view.find(scale_name(t.name, ".weight_scale_inv"));
    ASSERT_TRUE(s) << t.name;
    ASSERT_EQ(s->type, "F32");
    const Fp8Grid g{t.shape.at(0), t.shape.at(1), block.first, block.second};
    ASSERT_EQ(s->shape, (std::vector<uint64_t>{fp8_scale_rows(g), fp8_scale_cols(g)})) << t.name;
    const std::vector<uint8_t> codes = tensor_bytes(*in, t);
    const std::vector<float> scales = as_f32(tensor_bytes(*in, *s));
    std::vector<uint8_t> out(2 * codes.size());
    ASSERT_FALSE(dequant_fp8_rows_f32(codes, 0, g, scales, out).has_value()) << t.name;
    EXPECT_EQ(out, peer_bf16(*peer, t.name, codes.size())) << t.name;

    // The streaming converter's view: 7 rows at a time (not a divisor of 128) gives the same bytes.
    std::vector<uint8_t> streamed(out.size());
    for (uint64_t r = 0; r < g.rows; r += 7) {
      const uint64_t n = std::min<uint64_t>(7, g.rows - r);
      ASSERT_FALSE(dequant_fp8_rows_f32(std::span(codes).subspan(r * g.cols, n * g.cols), r, g, scales,
                                        std::span(streamed).subspan(2 * r * g.cols, 2 * n * g.cols)));
    }
    EXPECT_EQ(streamed, out) << t.name;
    saw_576 |= g.rows == 576 && s->shape == std::vector<uint64_t>{5, 2};
    ++tensors;
  }
  EXPECT_TRUE(saw_576);
  EXPECT_GE(tensors, 4);
}

// ---------------------------------------------------------------------------------------------
// dsv4-edge: the peer (QW converter) is wrong on purpose; we must differ exactly where it is.

struct EdgeModels {
  std::unique_ptr<LoadedModel> in, peer;
  std::pair<uint64_t, uint64_t> block;
};

EdgeModels load_edge() {
  EdgeModels e{test::load_model_checked(test::fixture("oracle/dsv4-edge")),
               test::load_model_checked(test::fixture("oracle/dsv4-edge.qw-bf16")), {}};
  if (e.in) e.block = block_size(*e.in);
  return e;
}

uint64_t count_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  for (size_t i = 0; i + 1 < std::min(a.size(), b.size()); i += 2) n += a[i] != b[i] || a[i + 1] != b[i + 1];
  return n;
}

// QW's fallback: the FP8 value cast to BF16 without its scale (a scale of 2^0 everywhere).
std::vector<uint8_t> unscaled(const Dequantized& d) {
  std::vector<uint8_t> ones(d.scales.size(), 127), out(d.bf16.size());
  EXPECT_FALSE(dequant_fp8_rows_e8m0(d.codes, 0, d.g, ones, out).has_value());
  return out;
}

// Elements where a correct converter must differ from an unscaled cast: nonzero codes whose
// scale is not 2^0 (x · 2^k ≠ x for k ≠ 0, even after BF16 underflow or overflow).
uint64_t predicted_unscaled_diff(const Dequantized& d) {
  uint64_t n = 0;
  const uint64_t sc = fp8_scale_cols(d.g);
  for (uint64_t i = 0; i < d.g.rows; ++i)
    for (uint64_t j = 0; j < d.g.cols; ++j)
      n += (d.codes[i * d.g.cols + j] & 0x7F) != 0 &&
           d.scales[(i / d.g.block_rows) * sc + j / d.g.block_cols] != 127;
  return n;
}

TEST(Fp8Edge, RaggedRowsDiffersOnlyWhereThePeerGuessedA100RowBlock) {
  EdgeModels e = load_edge();
  ASSERT_TRUE(e.in && e.peer);
  const std::string name = "layers.0.attn.ragged_rows.weight";
  const Dequantized d = dequant_e8m0(*e.in, name, e.block);
  ASSERT_EQ(d.g.rows, 200u);
  const std::vector<uint8_t> peer = peer_bf16(*e.peer, name, d.codes.size());

  // The peer's reading: block = 200 / 2 scale rows = 100. It reproduces its bytes exactly.
  std::vector<uint8_t> guessed(d.bf16.size());
  ASSERT_FALSE(dequant_fp8_rows_e8m0(d.codes, 0, Fp8Grid{200, 256, 100, 128}, d.scales, guessed));
  EXPECT_EQ(guessed, peer);

  // Rows 0–99 (block row 0 both ways) and 128–199 (block row 1 both ways) agree; only rows
  // 100–127, which the peer moved to block row 1, can differ.
  const uint64_t row_bytes = 2 * d.g.cols;
  uint64_t diff_outside = 0, diff_inside = 0;
  for (uint64_t i = 0; i < d.g.rows; ++i) {
    const uint64_t n = count_diff({d.bf16.begin() + i * row_bytes, d.bf16.begin() + (i + 1) * row_bytes},
                                  {peer.begin() + i * row_bytes, peer.begin() + (i + 1) * row_bytes});
    (i >= 100 && i < 128 ? diff_inside : diff_outside) += n;
  }
  EXPECT_EQ(diff_outside, 0u);
  EXPECT_GT(diff_inside, 0u);
  std::printf("ragged_rows: %llu of %zu elements differ from qw-bf16, all in rows 100-127\n",
              static_cast<unsigned long long>(diff_inside), d.codes.size());
}

// ragged_both (129 rows do not divide by 2 scale rows), split_pair (scale in the other shard)
// and small_scale (no .weight suffix): the peer wrote the unscaled cast.
void expect_unscaled_peer(const std::string& name, bool expect_subnormals) {
  EdgeModels e = load_edge();
  ASSERT_TRUE(e.in && e.peer);
  const Dequantized d = dequant_e8m0(*e.in, name, e.block);
  const std::vector<uint8_t> peer = peer_bf16(*e.peer, name, d.codes.size());
  EXPECT_EQ(unscaled(d), peer) << name;
  const uint64_t diff = count_diff(d.bf16, peer);
  EXPECT_EQ(diff, predicted_unscaled_diff(d)) << name;
  EXPECT_GT(diff, 0u) << name;
  uint64_t subnormal = 0, zero_from_nonzero = 0;
  for (size_t i = 0; i < d.codes.size(); ++i) {
    subnormal += bf16_is_subnormal(get_bf16(d.bf16, i));
    zero_from_nonzero += (get_bf16(d.bf16, i) & 0x7FFF) == 0 && (d.codes[i] & 0x7F) != 0;
  }
  if (expect_subnormals) {
    EXPECT_GT(subnormal, 0u) << name;
  }
  std::printf("%s [%llu,%llu] scale grid [%llu,%llu] (first scale byte %u): %llu of %zu elements differ from "
              "qw-bf16; %llu BF16 subnormals, %llu underflow to 0\n",
              name.c_str(), static_cast<unsigned long long>(d.g.rows), static_cast<unsigned long long>(d.g.cols),
              static_cast<unsigned long long>(fp8_scale_rows(d.g)), static_cast<unsigned long long>(fp8_scale_cols(d.g)),
              d.scales.empty() ? 0u : d.scales[0], static_cast<unsigned long long>(diff), d.codes.size(),
              static_cast<unsigned long long>(subnormal), static_cast<unsigned long long>(zero_from_nonzero));
}

TEST(Fp8Edge, RaggedBothPeerIsUnscaled) { expect_unscaled_peer("layers.0.attn.ragged_both.weight", false); }

TEST(Fp8Edge, SplitPairScaleFromOtherShardPeerIsUnscaled) {
  EdgeModels e = load_edge();
  ASSERT_TRUE(e.in);
  const ModelTensor* w = e.in->view.find("layers.0.attn.split_pair.weight");
  const ModelTensor* s = e.in->view.find("layers.0.attn.split_pair.scale");
  ASSERT_TRUE(w && s);
  EXPECT_NE(w->file, s->file);  // the case is what it says
  expect_unscaled_peer("layers.0.attn.split_pair.weight", false);
}

TEST(Fp8Edge, SmallScaleGivesBf16SubnormalsPeerIsUnscaled) {
  expect_unscaled_peer("layers.0.attn.small_scale", true);
}

}  // namespace
}  // namespace ckpt

// The AVX2 loops of the MXFP4 → INT8-shift remap (numerics/int8_shift_avx2.cpp) against the
// scalar loops, the reference (int8_shift_test.cpp proves the scalar loops against an
// independent oracle of the spec): the same slab bytes, faults and RemapStats, bit for bit,
// exhaustively over every code × every scale byte × every headroom × both roundings, and on
// random experts of ragged shapes split into parts.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "numerics/ggml_dequant.h"
#include "numerics/int8_shift.h"

namespace ckpt {
namespace {

bool cpu_runs_avx2() { return ggml_dequant_best_isa() >= DequantIsa::avx2; }

constexpr RemapRounding kRoundings[] = {RemapRounding::half_away, RemapRounding::half_even};

// One expert: rows x k, its weight and scale bytes, stacked from parts of the given row counts.
struct Expert {
  uint64_t rows = 0, k = 0;
  std::vector<uint8_t> weight, scale;
  std::vector<RemapPart> parts(const std::vector<uint64_t>& split) const {
    std::vector<RemapPart> out;
    uint64_t r0 = 0;
    for (uint64_t n : split) {
      out.push_back(RemapPart{std::span<const uint8_t>(weight).subspan(r0 * k / 2, n * k / 2),
                              std::span<const uint8_t>(scale).subspan(r0 * k / 32, n * k / 32), n});
      r0 += n;
    }
    return out;
  }
};

uint64_t bits(double v) { return std::bit_cast<uint64_t>(v); }

// Every field, the doubles by their bits.
void expect_same_stats(const RemapStats& a, const RemapStats& b, const std::string& where) {
  EXPECT_EQ(a.num_weights, b.num_weights) << where;
  EXPECT_EQ(a.nonzero, b.nonzero) << where;
  EXPECT_EQ(a.exact_all, b.exact_all) << where;
  EXPECT_EQ(a.exact_nonzero, b.exact_nonzero) << where;
  EXPECT_EQ(a.overflow, b.overflow) << where;
  EXPECT_EQ(a.blocks, b.blocks) << where;
  EXPECT_EQ(a.blocks_folded, b.blocks_folded) << where;
  EXPECT_EQ(a.vanished_nonzero, b.vanished_nonzero) << where;
  EXPECT_EQ(bits(a.max_rel_err_nonzero), bits(b.max_rel_err_nonzero)) << where;
  EXPECT_EQ(bits(a.sum_rel_err_nonzero), bits(b.sum_rel_err_nonzero)) << where;
  EXPECT_EQ(bits(a.sum_abs_err), bits(b.sum_abs_err)) << where;
  EXPECT_EQ(bits(a.sum_sq_err), bits(b.sum_sq_err)) << where;
  EXPECT_EQ(bits(a.max_abs_err), bits(b.max_abs_err)) << where;
  EXPECT_EQ(bits(a.sum_sq_weight), bits(b.sum_sq_weight)) << where;
  EXPECT_EQ(a.row_span_hist, b.row_span_hist) << where;
  EXPECT_EQ(a.row_span_max, b.row_span_max) << where;
}

// What one ISA makes of an expert: the three slabs (from 0xAA-filled buffers, so an unwritten
// byte shows), the faults, and the stats accumulated into a nonzero start.
struct Outcome {
  std::vector<uint8_t> mxfp4, shift2, channel_scale;
  std::optional<RemapFault> f_mxfp4, f_shift2, f_channel_scale;
  RemapStats stats;
};

RemapStats seeded_stats() {
  RemapStats s;
  s.num_weights = 7;
  s.nonzero = 3;
  s.sum_abs_err = 0.125;
  s.sum_sq_weight = 1.5;
  s.row_span_hist[2] = 1;
  s.row_span_max = 2;
  return s;
}

Outcome run(DequantIsa isa, const std::vector<RemapPart>& parts, const RemapParams& p, bool with_stats = true) {
  Outcome o;
  o.stats = seeded_stats();
  o.mxfp4.assign(remap_mxfp4_bytes(p), 0xAA);
  o.shift2.assign(remap_shift2_bytes(p), 0xAA);
  o.channel_scale.assign(remap_channel_scale_bytes(p), 0xAA);
  o.f_mxfp4 = remap_expert_mxfp4_isa(isa, parts, p, o.mxfp4, with_stats ? &o.stats : nullptr);
  o.f_shift2 = remap_expert_shift2_isa(isa, parts, p, o.shift2);
  o.f_channel_scale = remap_expert_channel_scale_isa(isa, parts, p, o.channel_scale);
  return o;
}

void expect_same_fault(const std::optional<RemapFault>& a, const std::optional<RemapFault>& b, const std::string& where) {
  ASSERT_EQ(a.has_value(), b.has_value()) << where;
  if (!a) return;
  EXPECT_EQ(a->kind, b->kind) << where;
  EXPECT_EQ(a->row, b->row) << where;
  EXPECT_EQ(a->block, b->block) << where;
}

// The first differing byte, named.
void expect_same_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      ADD_FAILURE() << where << ": byte " << i << " scalar " << int(a[i]) << " avx2 " << int(b[i]);
      return;
    }
}

void expect_same(const Outcome& s, const Outcome& v, const std::string& where) {
  expect_same_fault(s.f_mxfp4, v.f_mxfp4, where + " mxfp4 fault");
  expect_same_fault(s.f_shift2, v.f_shift2, where + " shift2 fault");
  expect_same_fault(s.f_channel_scale, v.f_channel_scale, where + " channel_scale fault");
  expect_same_bytes(s.mxfp4, v.mxfp4, where + " mxfp4");
  expect_same_bytes(s.shift2, v.shift2, where + " shift2");
  expect_same_bytes(s.channel_scale, v.channel_scale, where + " channel_scale");
  expect_same_stats(s.stats, v.stats, where + " stats");
}

void compare_isas(const Expert& e, const std::vector<uint64_t>& split, const RemapParams& p, const std::string& where) {
  const auto parts = e.parts(split);
  const Outcome s = run(DequantIsa::scalar, parts, p), v = run(DequantIsa::avx2, parts, p);
  expect_same(s, v, where);
  // Without stats too (the verifier's and validate's call).
  const Outcome s0 = run(DequantIsa::scalar, parts, p, false), v0 = run(DequantIsa::avx2, parts, p, false);
  expect_same_bytes(s0.mxfp4, v0.mxfp4, where + " mxfp4 without stats");
  expect_same_bytes(s.mxfp4, s0.mxfp4, where + " mxfp4 with and without stats");
}

std::string name(const RemapParams& p) {
  return "rows " + std::to_string(p.rows) + " k " + std::to_string(p.k) + " headroom " + std::to_string(p.headroom) +
         " " + remap_rounding_name(p.rounding);
}

// Every code at every byte position (low and high nibble) of every block, and every scale byte
// 0..254 as a row maximum with every smaller scale byte below it (every delta 0..254 on every
// maximum): row r's block kb has scale min(kb, r). 255 rows (a partial last group) of 255
// blocks (odd: the AVX2 loops' one-block tail; 255 % 32 = 31: shift2's masked tail).
Expert every_code_and_scale() {
  Expert e;
  e.rows = 255;
  e.k = 32 * 255;
  e.weight.resize(e.rows * e.k / 2);
  e.scale.resize(e.rows * e.k / 32);
  for (uint64_t r = 0; r < e.rows; ++r)
    for (uint64_t kb = 0; kb < 255; ++kb) {
      e.scale[r * 255 + kb] = uint8_t(std::min(kb, r));
      for (uint64_t j = 0; j < 16; ++j)  // byte j: low nibble j + kb, high nibble 7j + kb + r (mod 16)
        e.weight[r * e.k / 2 + kb * 16 + j] = uint8_t(((j + kb) & 15) | (((7 * j + kb + r) & 15) << 4));
    }
  return e;
}

TEST(RemapIsa, EveryCodeScaleByteHeadroomAndRoundingGivesTheScalarBytesAndStats) {
  if (!cpu_runs_avx2()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs here";
  const Expert e = every_code_and_scale();
  for (RemapRounding r : kRoundings)
    for (unsigned h = 0; h <= 3; ++h) {
      const RemapParams p{e.rows, e.k, h, r};
      compare_isas(e, {e.rows}, p, name(p));
    }
}

// A random expert: scales around `base` within `span` below the row maximum (span 0: one
// exponent; 3: all lossless at headroom 3; 5: about a third folded; 40: far folds), or
// uniformly random (span < 0) over 0..254.
Expert random_expert(std::mt19937_64& rng, uint64_t rows, uint64_t k, int base, int span) {
  Expert e;
  e.rows = rows;
  e.k = k;
  e.weight.resize(rows * k / 2);
  e.scale.resize(rows * k / 32);
  for (auto& b : e.weight) b = uint8_t(rng());
  for (auto& s : e.scale)
    s = span < 0 ? uint8_t(rng() % 255) : uint8_t(base - int(rng() % uint64_t(span + 1)));
  return e;
}

TEST(RemapIsa, RandomExpertsOfRaggedShapesInPartsGiveTheScalarBytesAndStats) {
  if (!cpu_runs_avx2()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs here";
  std::mt19937_64 rng(20261201);
  struct Shape {
    uint64_t rows, k;
  };
  // k of 1, 2, 3, 31, 32, 33, 64, 65 blocks (the 2-block step, the 32-block shift2 step and
  // their tails); rows around the groups of 8; a production-like w13 slice.
  const std::vector<Shape> shapes = {{1, 32},    {1, 64},   {7, 96},    {8, 992},  {9, 1024},
                                     {16, 1056}, {3, 2048}, {17, 2080}, {64, 2048}, {130, 416}};
  const std::vector<std::pair<int, int>> scales = {{127, 0}, {126, 3}, {124, 5}, {130, 9}, {200, 40}, {0, -1}};
  for (const Shape& z : shapes)
    for (const auto& [base, span] : scales)
      for (RemapRounding r : kRoundings)
        for (unsigned h = 0; h <= 3; ++h) {
          const Expert e = random_expert(rng, z.rows, z.k, base, span);
          const RemapParams p{z.rows, z.k, h, r};
          // One part, and (w13-like) split in two at a random row.
          compare_isas(e, {z.rows}, p, name(p) + " span " + std::to_string(span));
          if (z.rows > 1) {
            const uint64_t cut = 1 + rng() % (z.rows - 1);
            compare_isas(e, {cut, z.rows - cut}, p, name(p) + " split " + std::to_string(cut));
          }
        }
}

TEST(RemapIsa, NanScalesAndBadArgumentsGiveTheSameFaultsAndLeaveTheSlabsUntouched) {
  if (!cpu_runs_avx2()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs here";
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    Expert e = random_expert(rng, 9 + trial, 32 * (1 + trial % 7), 126, 4);
    // One or two NaN scales (0xFF); the first in row-major order is the one named.
    const uint64_t at = rng() % e.scale.size();
    e.scale[at] = 0xFF;
    if (trial % 2) e.scale[rng() % e.scale.size()] = 0xFF;
    const RemapParams p{e.rows, e.k, unsigned(trial % 4), kRoundings[trial % 2]};
    const auto parts = e.parts({e.rows / 2, e.rows - e.rows / 2});
    const Outcome s = run(DequantIsa::scalar, parts, p), v = run(DequantIsa::avx2, parts, p);
    ASSERT_TRUE(v.f_mxfp4.has_value());
    EXPECT_EQ(v.f_mxfp4->kind, RemapFault::e8m0_nan);
    expect_same(s, v, "trial " + std::to_string(trial));
    EXPECT_EQ(v.mxfp4, std::vector<uint8_t>(v.mxfp4.size(), 0xAA));  // untouched
    EXPECT_EQ(v.shift2, std::vector<uint8_t>(v.shift2.size(), 0xAA));
    expect_same_stats(v.stats, seeded_stats(), "stats untouched");
  }
  // Bad arguments: headroom 4, k not a multiple of 32 (the slab sizes of a valid k).
  const Expert e = random_expert(rng, 8, 64, 126, 3);
  for (const RemapParams& p : {RemapParams{8, 64, 4, RemapRounding::half_away}, RemapParams{9, 64, 3, RemapRounding::half_even}}) {
    const Outcome s = run(DequantIsa::scalar, e.parts({8}), p), v = run(DequantIsa::avx2, e.parts({8}), p);
    ASSERT_TRUE(v.f_mxfp4.has_value());
    EXPECT_EQ(v.f_mxfp4->kind, RemapFault::bad_arguments);
    expect_same(s, v, name(p));
  }
}

// The unsuffixed functions follow the process's ISA choice; forcing scalar gives the same bytes.
TEST(RemapIsa, DispatchedFunctionsEqualBothIsas) {
  std::mt19937_64 rng(11);
  const Expert e = random_expert(rng, 24, 2048, 125, 5);
  const RemapParams p{e.rows, e.k, 3, RemapRounding::half_away};
  const auto parts = e.parts({12, 12});
  std::vector<uint8_t> got(remap_mxfp4_bytes(p));
  RemapStats st = seeded_stats();
  ASSERT_FALSE(remap_expert_mxfp4(parts, p, got, &st));
  const DequantIsa before = ggml_dequant_force_isa(DequantIsa::scalar);
  std::vector<uint8_t> scalar(remap_mxfp4_bytes(p));
  RemapStats ss = seeded_stats();
  ASSERT_FALSE(remap_expert_mxfp4(parts, p, scalar, &ss));
  ggml_dequant_force_isa(before);
  EXPECT_EQ(got, scalar);
  expect_same_stats(ss, st, "dispatched");
  const Outcome v = run(DequantIsa::avx2, parts, p);  // clamped to scalar where the CPU has no AVX2
  EXPECT_EQ(v.mxfp4, got);
}

}  // namespace
}  // namespace ckpt

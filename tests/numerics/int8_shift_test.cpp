#include "numerics/int8_shift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "formats/json.h"
#include "formats/loader.h"
#include "io/mapped_file.h"
#include "test_util.h"

namespace ckpt {
namespace {

constexpr RemapRounding kAway = RemapRounding::half_away;
constexpr RemapRounding kEven = RemapRounding::half_even;

// ---------------------------------------------------------------------------------------------
// Independent reference, written from the spec text (§3-§4) with doubles and index formulas;
// it shares no table or helper with the library.

constexpr int kMagX2[8] = {0, 1, 2, 3, 4, 6, 8, 12};

// torch's argmin over |v − magnitude|: the first minimum wins, so ties go to the smaller.
int ref_nearest_index(double v) {
  int best = 0;
  for (int i = 1; i < 8; ++i)
    if (std::fabs(std::fabs(v) - kMagX2[i]) < std::fabs(std::fabs(v) - kMagX2[best])) best = i;
  return best;
}

double ref_round(double x, RemapRounding r) {
  const double f = std::floor(x), frac = x - f;
  if (r == kAway) return x >= 0 ? std::floor(x + 0.5) : -std::floor(-x + 0.5);
  if (frac != 0.5) return frac < 0.5 ? f : f + 1;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;  // tie: the even neighbour
}

int ref_shift2(int delta, unsigned headroom) { return std::clamp(int(headroom) - delta, 0, 3); }

uint8_t ref_nibble(uint8_t c, int delta, unsigned headroom, RemapRounding r) {
  const int q = kMagX2[c & 7];
  if (q == 0) return 0;
  const double target = q * std::pow(2.0, int(headroom) - delta);
  const double code_value = ref_round(target, r) / std::pow(2.0, ref_shift2(delta, headroom));
  return uint8_t(ref_nearest_index(code_value) | (c & 8));
}

struct RefSlabs {
  std::vector<uint8_t> mxfp4, shift2, channel_scale;
};

// One expert [n_rows, k]: weight n_rows x k/2, scale n_rows x k/32, by the §4 formulas.
RefSlabs ref_remap(const std::vector<uint8_t>& weight, const std::vector<uint8_t>& scale, uint64_t n_rows,
                   uint64_t k, unsigned headroom, RemapRounding r) {
  const uint64_t kb_count = k / 32, groups = (n_rows + 7) / 8, s_count = (kb_count + 3) / 4;
  RefSlabs out;
  out.mxfp4.assign(kb_count * groups * 128, 0);
  out.shift2.assign(s_count * groups * 8, 0);
  auto bmax = [&](uint64_t n) { return *std::max_element(&scale[n * kb_count], &scale[n * kb_count] + kb_count); };
  auto delta = [&](uint64_t n, uint64_t kb) { return int(bmax(n)) - int(scale[n * kb_count + kb]); };
  for (uint64_t kb = 0; kb < kb_count; ++kb) {
    for (uint64_t ng = 0; ng < groups; ++ng) {
      for (uint64_t t = 0; t < 128; ++t) {
        const uint64_t lane = t / 4, lane_byte = t % 4, row8 = lane / 4, tid = lane % 4, n = ng * 8 + row8;
        if (n >= n_rows) continue;
        const uint64_t j = tid * 2 + (lane_byte & 1) + (lane_byte / 2) * 8;
        const uint8_t src = weight[n * (k / 2) + kb * 16 + j];
        const int d = delta(n, kb);
        out.mxfp4[(kb * groups + ng) * 128 + t] =
            uint8_t(ref_nibble(src & 15, d, headroom, r) | ref_nibble(src >> 4, d, headroom, r) << 4);
      }
    }
  }
  for (uint64_t n = 0; n < n_rows; ++n) {
    for (uint64_t kb = 0; kb < kb_count; ++kb)
      out.shift2[((kb / 4) * groups + n / 8) * 8 + n % 8] |= uint8_t(ref_shift2(delta(n, kb), headroom) << (2 * (kb % 4)));
    const float cs = float(std::pow(2.0, (int(bmax(n)) - 127) - int(headroom)) * 0.5);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&cs);  // the host is little-endian, as the format
    out.channel_scale.insert(out.channel_scale.end(), p, p + 4);
  }
  return out;
}

std::vector<uint8_t> run_mxfp4(const std::vector<RemapPart>& parts, const RemapParams& p, RemapStats* stats = nullptr) {
  std::vector<uint8_t> out(remap_mxfp4_bytes(p), 0xAA);  // 0xAA: padding must be written, not assumed
  auto f = remap_expert_mxfp4(parts, p, out, stats);
  EXPECT_FALSE(f.has_value()) << remap_fault_name(f->kind) << " row " << f->row << " block " << f->block;
  return out;
}
std::vector<uint8_t> run_shift2(const std::vector<RemapPart>& parts, const RemapParams& p) {
  std::vector<uint8_t> out(remap_shift2_bytes(p), 0xAA);
  auto f = remap_expert_shift2(parts, p, out);
  EXPECT_FALSE(f.has_value()) << remap_fault_name(f->kind);
  return out;
}
std::vector<uint8_t> run_channel_scale(const std::vector<RemapPart>& parts, const RemapParams& p) {
  std::vector<uint8_t> out(remap_channel_scale_bytes(p), 0xAA);
  auto f = remap_expert_channel_scale(parts, p, out);
  EXPECT_FALSE(f.has_value()) << remap_fault_name(f->kind);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The per-element rule.

TEST(RemapCode, NearestMagnitudeThresholdsAndNeighbours) {
  // Every threshold of §3 step 4 takes the smaller magnitude; the next double up the larger.
  const double edges[7] = {0.5, 1.5, 2.5, 3.5, 5, 7, 10};
  for (int i = 0; i < 7; ++i) {
    const double e = edges[i], above = std::nextafter(e, 100.0), below = std::nextafter(e, 0.0);
    EXPECT_EQ(e2m1_nearest_magnitude_index(e), i) << e;
    EXPECT_EQ(e2m1_nearest_magnitude_index(below), i) << e;
    EXPECT_EQ(e2m1_nearest_magnitude_index(above), i + 1) << e;
    EXPECT_EQ(e2m1_nearest_magnitude_index(-e), i) << -e;  // magnitude of the value
    EXPECT_EQ(e2m1_nearest_magnitude_index(-above), i + 1) << -e;
    // Slightly further away as well, and against torch's argmin semantics.
    for (double v : {e - 0.01, e, e + 0.01}) EXPECT_EQ(e2m1_nearest_magnitude_index(v), ref_nearest_index(v)) << v;
  }
  EXPECT_EQ(e2m1_nearest_magnitude_index(0.0), 0);
  EXPECT_EQ(e2m1_nearest_magnitude_index(-0.0), 0);
  EXPECT_EQ(e2m1_nearest_magnitude_index(1e9), 7);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(e2m1_nearest_magnitude_index(kMagX2[i]), i);
  for (double v = 0; v < 16; v += 1.0 / 64) EXPECT_EQ(e2m1_nearest_magnitude_index(v), ref_nearest_index(v)) << v;
}

TEST(RemapCode, RoundTargetTiesPerMode) {
  // Triton: floor(t + 0.5), ties away from zero. torch.round: ties to even.
  const struct { double t, away, even; } cases[] = {
      {0.5, 1, 0}, {1.5, 2, 2}, {2.5, 3, 2}, {3.5, 4, 4}, {0.25, 0, 0}, {0.75, 1, 1}, {0.375, 0, 0},
      {0.5 - 0x1p-20, 0, 0}, {std::nextafter(0.5, 1.0), 1, 1}, {1.5 - 0x1p-20, 1, 1},
      {std::nextafter(1.5, 2.0), 2, 2}, {2.5 - 0x1p-20, 2, 2}, {std::nextafter(2.5, 3.0), 3, 3}, {0, 0, 0},
      {6, 6, 6}, {96, 96, 96},
      // floor(t + 0.5) taken literally (Triton's formula; its fp32 add rounds the same way): the
      // largest double below 0.5 plus 0.5 rounds to 1.0. Unreachable: targets are q·2^−d.
      {std::nextafter(0.5, 0.0), 1, 0}};
  for (const auto& c : cases) {
    EXPECT_EQ(remap_round_target(c.t, kAway), c.away) << c.t;
    EXPECT_EQ(remap_round_target(c.t, kEven), c.even) << c.t;
  }
}

// Decoded |q_i8| = mag_x2[nibble] << shift2, in channel_scale units (§3's table).
int decoded_units(uint8_t code, int delta, RemapRounding r) {
  const uint8_t nib = remap_code_nibble(code, uint64_t(delta), 3, r);
  return kMagX2[nib & 7] << remap_shift2_for(3, uint64_t(delta));
}

TEST(RemapCode, SpecTableDelta0To9BothRoundings) {
  const uint8_t codes[7] = {1, 2, 3, 4, 5, 6, 7};  // q = 1, 2, 3, 4, 6, 8, 12
  // Rows delta = 4..9 copied from spec §3; delta 0..3 is "same" (q·2^(3−delta)).
  const int away[6][7] = {{1, 1, 2, 2, 3, 4, 6}, {0, 1, 1, 1, 2, 2, 3}, {0, 0, 0, 1, 1, 1, 2},
                          {0, 0, 0, 0, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}};
  const int even[6][7] = {{0, 1, 2, 2, 3, 4, 6}, {0, 0, 1, 1, 2, 2, 3}, {0, 0, 0, 0, 1, 1, 2},
                          {0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}};
  for (int delta = 0; delta <= 9; ++delta) {
    for (int i = 0; i < 7; ++i) {
      for (uint8_t sign : {uint8_t{0}, uint8_t{8}}) {
        const uint8_t c = uint8_t(codes[i] | sign);
        const int exact = kMagX2[codes[i]] << 3 >> std::min(delta, 3);  // q·2^(3−delta) for delta <= 3
        const int want_away = delta <= 3 ? exact : away[delta - 4][i];
        const int want_even = delta <= 3 ? exact : even[delta - 4][i];
        EXPECT_EQ(decoded_units(c, delta, kAway), want_away) << "delta " << delta << " code " << int(c);
        EXPECT_EQ(decoded_units(c, delta, kEven), want_even) << "delta " << delta << " code " << int(c);
        if (delta <= 3) {  // lossless: the code itself is unchanged
          EXPECT_EQ(remap_code_nibble(c, uint64_t(delta), 3, kAway), c);
          EXPECT_EQ(remap_code_nibble(c, uint64_t(delta), 3, kEven), c);
        }
        // The sign bit always survives, also when the magnitude becomes 0.
        EXPECT_EQ(remap_code_nibble(c, uint64_t(delta), 3, kAway) & 8, sign);
        EXPECT_EQ(remap_code_nibble(c, uint64_t(delta), 3, kEven) & 8, sign);
      }
    }
  }
}

TEST(RemapCode, TiesAtHalfAreTheOnlyDisagreement) {
  // target 0.5 at (delta, q) in {(4,1), (5,2), (6,4), (7,8)}: Triton 1, torch 0.
  const struct { int delta; uint8_t code; } ties[] = {{4, 1}, {5, 2}, {6, 4}, {7, 6}};  // code 6 is q = 8
  for (const auto& t : ties) {
    EXPECT_EQ(remap_code_nibble(t.code, uint64_t(t.delta), 3, kAway), 1) << t.delta;
    EXPECT_EQ(remap_code_nibble(t.code, uint64_t(t.delta), 3, kEven), 0) << t.delta;
    EXPECT_EQ(remap_code_nibble(uint8_t(t.code | 8), uint64_t(t.delta), 3, kAway), 9) << t.delta;
    EXPECT_EQ(remap_code_nibble(uint8_t(t.code | 8), uint64_t(t.delta), 3, kEven), 8) << t.delta;
  }
  int disagreements = 0;
  for (unsigned h = 0; h <= 3; ++h)
    for (uint64_t delta = 0; delta <= 40; ++delta)
      for (uint8_t c = 0; c < 16; ++c)
        disagreements += remap_code_nibble(c, delta, h, kAway) != remap_code_nibble(c, delta, h, kEven);
  // 4 ties x 2 signs at headroom 3, and the same (delta − headroom, q) ties at headrooms 0..2.
  EXPECT_EQ(disagreements, 4 * 2 * 4);
}

TEST(RemapCode, TiesAtOneAndAHalfRoundUpInBothModes) {
  // target 1.5 at (delta, q) in {(4,3), (5,6), (6,12)} → 2 (magnitude index 2) in both modes.
  const struct { int delta; uint8_t code; } ties[] = {{4, 3}, {5, 5}, {6, 7}};
  for (const auto& t : ties) {
    for (RemapRounding r : {kAway, kEven}) {
      EXPECT_EQ(remap_code_nibble(t.code, uint64_t(t.delta), 3, r), 2) << t.delta;
      EXPECT_EQ(remap_code_nibble(uint8_t(t.code | 8), uint64_t(t.delta), 3, r), 10) << t.delta;
    }
  }
}

TEST(RemapCode, NegativeZeroDropsSignNegativeRoundedToZeroKeepsIt) {
  for (unsigned h = 0; h <= 3; ++h)
    for (uint64_t delta : {0, 1, 3, 4, 7, 8, 200, 254})
      for (RemapRounding r : {kAway, kEven}) EXPECT_EQ(remap_code_nibble(8, delta, h, r), 0);
  // −0.5 (code 9, q = 1) at delta 5: target 0.25 → 0, sign kept → code 8.
  EXPECT_EQ(remap_code_nibble(9, 5, 3, kAway), 8);
  EXPECT_EQ(remap_code_nibble(15, 9, 3, kEven), 8);   // −6 far below the row max
  EXPECT_EQ(remap_code_nibble(15, 254, 3, kAway), 8);
  EXPECT_EQ(remap_code_nibble(7, 254, 3, kAway), 0);
}

TEST(RemapCode, EveryCodeDeltaHeadroomMatchesReference) {
  for (unsigned h = 0; h <= 3; ++h)
    for (int delta = 0; delta <= 40; ++delta)
      for (uint8_t c = 0; c < 16; ++c)
        for (RemapRounding r : {kAway, kEven})
          ASSERT_EQ(remap_code_nibble(c, uint64_t(delta), h, r), ref_nibble(c, delta, h, r))
              << "h " << h << " delta " << delta << " code " << int(c) << " " << remap_rounding_name(r);
}

// ---------------------------------------------------------------------------------------------
// Layout on hand-made experts.

struct Expert {
  uint64_t rows, k;
  std::vector<uint8_t> weight, scale;
};

// Random codes and scales whose row spans reach `max_span` (so folded blocks occur).
Expert random_expert(uint64_t rows, uint64_t k, int max_span, uint32_t seed) {
  std::mt19937 rng(seed);
  Expert e{rows, k, std::vector<uint8_t>(rows * k / 2), std::vector<uint8_t>(rows * k / 32)};
  for (auto& b : e.weight) b = uint8_t(rng());
  for (uint64_t n = 0; n < rows; ++n) {
    const int base = 100 + int(rng() % 40);
    for (uint64_t kb = 0; kb < k / 32; ++kb) e.scale[n * (k / 32) + kb] = uint8_t(base - int(rng() % (max_span + 1)));
  }
  return e;
}

// The expert split into two stacked parts after `split` rows.
std::vector<RemapPart> split_parts(const Expert& e, uint64_t split) {
  const uint64_t wrow = e.k / 2, srow = e.k / 32;
  return {RemapPart{std::span(e.weight).first(split * wrow), std::span(e.scale).first(split * srow), split},
          RemapPart{std::span(e.weight).subspan(split * wrow), std::span(e.scale).subspan(split * srow), e.rows - split}};
}

TEST(RemapLayout, SlabSizesFor0731) {
  // Spec §2, per expert (the table's totals / 256).
  const RemapParams w13{4096, 4096, 3, kAway}, w2{4096, 2048, 3, kAway};
  EXPECT_EQ(remap_mxfp4_bytes(w13), 2147483648ull / 256);
  EXPECT_EQ(remap_shift2_bytes(w13), 33554432ull / 256);
  EXPECT_EQ(remap_channel_scale_bytes(w13), 4194304ull / 256);
  EXPECT_EQ(remap_mxfp4_bytes(w2), 1073741824ull / 256);
  EXPECT_EQ(remap_shift2_bytes(w2), 16777216ull / 256);
  EXPECT_EQ(remap_channel_scale_bytes(w2), 4194304ull / 256);
  // Partial group and partial shift2 byte: 13 rows → G = 2; KB = 5 → S = 2.
  const RemapParams odd{13, 160, 3, kAway};
  EXPECT_EQ(remap_mxfp4_bytes(odd), 5u * 2 * 128);
  EXPECT_EQ(remap_shift2_bytes(odd), 2u * 2 * 8);
  EXPECT_EQ(remap_channel_scale_bytes(odd), 13u * 4);
}

TEST(RemapLayout, RaggedRowsAndBlocksMatchReference) {
  // N = 13 (not a multiple of 8: 3 zero rows in the last group), KB = 5 (not a multiple of 4:
  // 3 unused 2-bit fields in each row's second shift2 byte), spans up to 7, two stacked parts.
  for (unsigned h = 0; h <= 3; ++h) {
    for (RemapRounding r : {kAway, kEven}) {
      const Expert e = random_expert(13, 160, 7, 17 + h);
      const RemapParams p{e.rows, e.k, h, r};
      const auto parts = split_parts(e, 5);
      const RefSlabs ref = ref_remap(e.weight, e.scale, e.rows, e.k, h, r);
      EXPECT_EQ(run_mxfp4(parts, p), ref.mxfp4) << "h " << h;
      EXPECT_EQ(run_shift2(parts, p), ref.shift2) << "h " << h;
      EXPECT_EQ(run_channel_scale(parts, p), ref.channel_scale) << "h " << h;
    }
  }
  // Padding explicitly: rows 13..15 of group 1 are zero in every tile; high fields of the
  // second shift2 byte (kb 5..7) are zero.
  const Expert e = random_expert(13, 160, 7, 99);
  const RemapParams p{e.rows, e.k, 3, kAway};
  const auto mx = run_mxfp4(split_parts(e, 8), p);
  for (uint64_t kb = 0; kb < 5; ++kb)
    for (uint64_t t = 5 * 16; t < 128; ++t) EXPECT_EQ(mx[(kb * 2 + 1) * 128 + t], 0) << kb << " " << t;
  const auto sh = run_shift2(split_parts(e, 8), p);
  for (uint64_t n = 0; n < 16; ++n) {
    const uint8_t second = sh[(1 * 2 + n / 8) * 8 + n % 8];
    EXPECT_EQ(second & 0xFC, 0) << n;
    if (n >= 13) {
      EXPECT_EQ(second, 0);
      EXPECT_EQ(sh[(n / 8) * 8 + n % 8], 0);
    }
  }
}

TEST(RemapLayout, PartsSplitAnywhereGiveTheSameBytes) {
  const Expert e = random_expert(24, 64, 6, 5);
  const RemapParams p{e.rows, e.k, 3, kAway};
  const std::vector<RemapPart> whole{RemapPart{e.weight, e.scale, e.rows}};
  const auto want = run_mxfp4(whole, p);
  for (uint64_t split : {0, 1, 7, 8, 23, 24}) EXPECT_EQ(run_mxfp4(split_parts(e, split), p), want) << split;
}

TEST(RemapLayout, MinusZeroAndVanishingNegativeInPlace) {
  // One row, two blocks: block 0 at the row max (b = 130), block 1 five exponents below.
  Expert e{1, 64, std::vector<uint8_t>(32, 0), {130, 125}};
  e.weight[0] = 0x88;           // −0, −0 in the max block → 0x00
  e.weight[16] = 0x9A;          // block 1: −1 (q = 2 → 0.5 tie), −0.5 (q = 1 → 0.25)
  const auto away = run_mxfp4({RemapPart{e.weight, e.scale, 1}}, RemapParams{1, 64, 3, kAway});
  const auto even = run_mxfp4({RemapPart{e.weight, e.scale, 1}}, RemapParams{1, 64, 3, kEven});
  EXPECT_EQ(away[0], 0x00);
  EXPECT_EQ(away[128], 0x89);   // low: −1 → code 9 (half away); high: code 8 (sign kept)
  EXPECT_EQ(even[128], 0x88);   // torch: both become code 8
}

// ---------------------------------------------------------------------------------------------
// Faults.

TEST(RemapFaults, NanScaleNamesRowAndBlockAndLeavesOutputUntouched) {
  Expert e = random_expert(12, 256, 3, 3);
  e.scale[(5 + 2) * 8 + 6] = 0xFF;  // part 2 (from row 5), its row 2, block 6
  e.scale[(5 + 3) * 8 + 1] = 0xFF;  // a later one must not be reported
  const RemapParams p{e.rows, e.k, 3, kAway};
  const auto parts = split_parts(e, 5);
  std::vector<uint8_t> mx(remap_mxfp4_bytes(p), 0xAA), sh(remap_shift2_bytes(p), 0xAA),
      cs(remap_channel_scale_bytes(p), 0xAA);
  RemapStats stats;
  for (auto f : {remap_expert_mxfp4(parts, p, mx, &stats), remap_expert_shift2(parts, p, sh),
                 remap_expert_channel_scale(parts, p, cs)}) {
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->kind, RemapFault::e8m0_nan);
    EXPECT_STREQ(remap_fault_name(f->kind), "e8m0_nan");
    EXPECT_EQ(f->row, 7u);
    EXPECT_EQ(f->block, 6u);
  }
  for (auto* v : {&mx, &sh, &cs}) EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](uint8_t b) { return b == 0xAA; }));
  EXPECT_EQ(stats.num_weights, 0u);
}

TEST(RemapFaults, BadArgumentsTable) {
  const Expert e = random_expert(8, 64, 3, 4);
  const std::vector<RemapPart> good{RemapPart{e.weight, e.scale, 8}};
  const RemapParams ok{8, 64, 3, kAway};
  struct Case {
    const char* what;
    RemapParams p;
    std::vector<RemapPart> parts;
    int64_t out_delta;  // added to the correct output size
  };
  auto with_rows = [&](uint64_t rows) { return std::vector<RemapPart>{RemapPart{e.weight, e.scale, rows}}; };
  const Case cases[] = {
      {"k % 32 != 0", RemapParams{8, 48, 3, kAway}, good, 0},
      {"k == 0", RemapParams{8, 0, 3, kAway}, good, 0},
      {"rows == 0", RemapParams{0, 64, 3, kAway}, {}, 0},
      {"headroom 4", RemapParams{8, 64, 4, kAway}, good, 0},
      {"parts sum to fewer rows", ok, {RemapPart{std::span(e.weight).first(224), std::span(e.scale).first(14), 7}}, 0},
      {"part rows disagree with spans", ok, with_rows(9), 0},
      {"no parts", ok, {}, 0},
      {"weight span short", ok, {RemapPart{std::span(e.weight).first(255), e.scale, 8}}, 0},
      {"scale span short", ok, {RemapPart{e.weight, std::span(e.scale).first(15), 8}}, 0},
      {"out one byte short", ok, good, -1},
      {"out one byte long", ok, good, +1},
  };
  for (const Case& c : cases) {
    const uint64_t mx_size = c.p.k % 32 == 0 && c.p.rows ? remap_mxfp4_bytes(c.p) : 64;
    std::vector<uint8_t> mx(size_t(int64_t(mx_size) + c.out_delta), 0xAA);
    auto f = remap_expert_mxfp4(c.parts, c.p, mx, nullptr);
    ASSERT_TRUE(f.has_value()) << c.what;
    EXPECT_EQ(f->kind, RemapFault::bad_arguments) << c.what;
    EXPECT_TRUE(std::all_of(mx.begin(), mx.end(), [](uint8_t b) { return b == 0xAA; })) << c.what;
    if (std::string(c.what).starts_with("weight")) continue;  // shift2 / scales ignore weights
    const uint64_t sh_size = c.p.k % 32 == 0 && c.p.rows ? remap_shift2_bytes(c.p) : 64;
    std::vector<uint8_t> sh(size_t(int64_t(sh_size) + c.out_delta));
    auto g = remap_expert_shift2(c.parts, c.p, sh);
    ASSERT_TRUE(g.has_value()) << c.what;
    EXPECT_EQ(g->kind, RemapFault::bad_arguments) << c.what;
    std::vector<uint8_t> cs(size_t(int64_t(remap_channel_scale_bytes(c.p)) + c.out_delta));
    auto h = remap_expert_channel_scale(c.parts, c.p, cs);
    ASSERT_TRUE(h.has_value()) << c.what;
    EXPECT_EQ(h->kind, RemapFault::bad_arguments) << c.what;
  }
  // Scale-only slabs accept parts without weights (the converter reads only the scales).
  const std::vector<RemapPart> scales_only{RemapPart{{}, e.scale, 8}};
  std::vector<uint8_t> sh(remap_shift2_bytes(ok)), cs(remap_channel_scale_bytes(ok));
  EXPECT_FALSE(remap_expert_shift2(scales_only, ok, sh).has_value());
  EXPECT_FALSE(remap_expert_channel_scale(scales_only, ok, cs).has_value());
}

// ---------------------------------------------------------------------------------------------
// Statistics on a hand-computed row.

TEST(RemapStats, HandComputedRow) {
  // Row of 3 blocks, scales 130 (max), 127 (delta 3: lossless), 125 (delta 5: folded).
  Expert e{1, 96, std::vector<uint8_t>(48, 0), {130, 127, 125}};
  e.weight[0] = 0x17;   // block 0: 12 and 1 (x2 units); 30 zeros
  e.weight[16] = 0xF9;  // block 1: −1 and −12
  e.weight[32] = 0x21;  // block 2 (folded, delta 5): q=1 → 0.25 → 0 (vanishes); q=2 → 0.5 tie
  e.weight[33] = 0x07;  //   q=12 → 3 exact? 12/4 = 3 → 3: exact
  for (RemapRounding r : {kAway, kEven}) {
    RemapStats s;
    run_mxfp4({RemapPart{e.weight, e.scale, 1}}, RemapParams{1, 96, 3, r}, &s);
    EXPECT_EQ(s.num_weights, 96u);
    EXPECT_EQ(s.nonzero, 7u);
    EXPECT_EQ(s.blocks, 3u);
    EXPECT_EQ(s.blocks_folded, 1u);
    EXPECT_EQ(s.exact_nonzero, 5u);  // 4 lossless + q=12 in the folded block
    EXPECT_EQ(s.exact_all, 94u);
    EXPECT_EQ(s.vanished_nonzero, r == kAway ? 1u : 2u);
    EXPECT_EQ(s.max_rel_err_nonzero, 1.0);
    // Relative errors: q=1 → 1.0; q=2 tie → |1·4 − 2|/2 = 1 (away) or |0 − 2|/2 = 1 (even).
    EXPECT_EQ(s.sum_rel_err_nonzero, 2.0);
    EXPECT_EQ(s.row_span_max, 5);
    EXPECT_EQ(s.row_span_hist[5], 1u);
    // Absolute errors in real units: block 2's unit is 2^(125−128) = 1/8; both errors are 1 and 2 units.
    EXPECT_DOUBLE_EQ(s.sum_abs_err, (1 + 2) / 8.0);
    EXPECT_DOUBLE_EQ(s.max_abs_err, 2 / 8.0);
    const double w_sq = (144 + 1) * 16.0 + (1 + 144) * 0.5 * 0.5 + (1 + 4 + 144) / 64.0;
    EXPECT_DOUBLE_EQ(s.sum_sq_weight, w_sq);
  }
}

TEST(RemapStats, MergeAddsAndTakesMaxima) {
  RemapStats a, b;
  a.num_weights = 10; a.max_rel_err_nonzero = 0.5; a.row_span_max = 2; a.row_span_hist[2] = 1; a.sum_sq_err = 1;
  b.num_weights = 5; b.max_rel_err_nonzero = 0.25; b.row_span_max = 6; b.row_span_hist[2] = 3; b.sum_sq_err = 2;
  a.merge(b);
  EXPECT_EQ(a.num_weights, 15u);
  EXPECT_EQ(a.max_rel_err_nonzero, 0.5);
  EXPECT_EQ(a.row_span_max, 6);
  EXPECT_EQ(a.row_span_hist[2], 4u);
  EXPECT_EQ(a.sum_sq_err, 3.0);
}

// ---------------------------------------------------------------------------------------------
// Oracle: the deployment repository's own Triton and torch repacks of dsv4-tiny.

using test::tensor_bytes;

const char* const kBlocks[] = {"layers.0", "layers.1", "layers.2", "mtp.0", "mtp.1"};
constexpr int kExperts = 8;

// One expert's fused matrix read from dsv4-tiny: its parts' bytes and its RemapParams.
struct FusedExpert {
  std::vector<std::vector<uint8_t>> weights, scales;
  std::vector<uint64_t> rows;
  uint64_t k = 0;
  std::vector<RemapPart> parts() const {
    std::vector<RemapPart> v;
    for (size_t i = 0; i < rows.size(); ++i) v.push_back(RemapPart{weights[i], scales[i], rows[i]});
    return v;
  }
  RemapParams params(RemapRounding r) const {
    uint64_t n = 0;
    for (uint64_t x : rows) n += x;
    return RemapParams{n, k, 3, r};
  }
};

FusedExpert read_fused(const LoadedModel& m, const std::string& block, const std::string& matrix, int expert) {
  FusedExpert fe;
  const std::vector<std::string> mats = matrix == "w13" ? std::vector<std::string>{"w1", "w3"} : std::vector<std::string>{"w2"};
  for (const std::string& w : mats) {
    const std::string base = block + ".ffn.experts." + std::to_string(expert) + "." + w;
    const ModelTensor* wt = m.view.find(base + ".weight");
    const ModelTensor* st = m.view.find(base + ".scale");
    EXPECT_TRUE(wt && st) << base;
    if (!wt || !st) return fe;
    EXPECT_EQ(wt->type, "I8");
    EXPECT_EQ(st->type, "F8_E8M0");
    fe.k = wt->shape[1] * 2;
    EXPECT_EQ(st->shape, (std::vector<uint64_t>{wt->shape[0], fe.k / 32}));
    fe.rows.push_back(wt->shape[0]);
    fe.weights.push_back(tensor_bytes(m, base + ".weight"));
    fe.scales.push_back(tensor_bytes(m, base + ".scale"));
  }
  return fe;
}

struct FusedOutput {
  std::vector<uint8_t> mxfp4, shift2, channel_scale;
  RemapStats stats;
};

// Concatenation over experts of our slabs, as the converter writes them.
FusedOutput remap_fused(const LoadedModel& in, const std::string& block, const std::string& matrix, RemapRounding r) {
  FusedOutput out;
  for (int e = 0; e < kExperts; ++e) {
    const FusedExpert fe = read_fused(in, block, matrix, e);
    const RemapParams p = fe.params(r);
    const auto parts = fe.parts();
    auto append = [](std::vector<uint8_t>& to, const std::vector<uint8_t>& v) { to.insert(to.end(), v.begin(), v.end()); };
    append(out.mxfp4, run_mxfp4(parts, p, &out.stats));
    append(out.shift2, run_shift2(parts, p));
    append(out.channel_scale, run_channel_scale(parts, p));
  }
  return out;
}

uint64_t bytes_differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  uint64_t d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
  return d;
}

struct Oracles {
  std::unique_ptr<LoadedModel> in, triton, torch;
  JsonDoc report;
  simdjson::dom::element remap;
};

Oracles& oracles() {
  static Oracles o = [] {
    Oracles x;
    x.in = test::load_model_checked(test::fixture("oracle/dsv4-tiny"));
    x.triton = test::load_model_checked(test::fixture("oracle/dsv4-tiny.remap.triton.safetensors"));
    x.torch = test::load_model_checked(test::fixture("oracle/dsv4-tiny.remap.torch.safetensors"));
    const auto text = test::read_file(test::fixture("oracle/oracle-report.json"));
    std::string err;
    EXPECT_TRUE(x.report.parse(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), err)) << err;
    x.remap = *json_get(x.report.root(), "remap");
    return x;
  }();
  return o;
}

double report_number(const std::string& fused, const char* key) {
  auto entry = json_get(oracles().remap, fused);
  EXPECT_TRUE(entry.has_value()) << fused;
  if (!entry) return -1;
  auto v = json_get(*entry, key);
  EXPECT_TRUE(v.has_value()) << fused << " " << key;
  double d = -1;
  if (v && v->get_double().get(d) != simdjson::SUCCESS) {
    int64_t i = -1;
    EXPECT_EQ(v->get_int64().get(i), simdjson::SUCCESS);
    d = double(i);
  }
  return d;
}

TEST(RemapOracle, BothRoundingsEqualTheirOracleByteForByte) {
  Oracles& o = oracles();
  ASSERT_TRUE(o.in && o.triton && o.torch);
  for (const char* block : kBlocks) {
    for (const std::string matrix : {"w13", "w2"}) {
      const std::string fused = std::string(block) + ".ffn.experts." + matrix;
      const FusedOutput away = remap_fused(*o.in, block, matrix, kAway);
      const FusedOutput even = remap_fused(*o.in, block, matrix, kEven);
      for (const auto& [ours, oracle] : {std::pair{&away, o.triton.get()}, std::pair{&even, o.torch.get()}}) {
        const char* which = oracle == o.triton.get() ? "triton" : "torch";
        EXPECT_EQ(bytes_differing(ours->mxfp4, tensor_bytes(*oracle, fused + ".mxfp4")), 0u) << fused << " " << which;
        EXPECT_EQ(bytes_differing(ours->shift2, tensor_bytes(*oracle, fused + ".shift2")), 0u) << fused << " " << which;
        EXPECT_EQ(bytes_differing(ours->channel_scale, tensor_bytes(*oracle, fused + ".channel_scale")), 0u)
            << fused << " " << which;
      }
      // The two oracles differ only in mxfp4, exactly where our two modes differ.
      const uint64_t oracle_diff =
          bytes_differing(tensor_bytes(*o.triton, fused + ".mxfp4"), tensor_bytes(*o.torch, fused + ".mxfp4"));
      EXPECT_EQ(bytes_differing(away.mxfp4, even.mxfp4), oracle_diff) << fused;
      EXPECT_EQ(double(oracle_diff), report_number(fused, "triton_vs_torch_mxfp4_bytes_differing")) << fused;
      EXPECT_EQ(bytes_differing(away.shift2, even.shift2), 0u);
      EXPECT_EQ(bytes_differing(away.channel_scale, even.channel_scale), 0u);
      std::printf("[ oracle   ] %-24s triton vs torch mxfp4 bytes differing: %llu of %zu (ours: %llu)\n",
                  fused.c_str(), (unsigned long long)oracle_diff, away.mxfp4.size(),
                  (unsigned long long)bytes_differing(away.mxfp4, even.mxfp4));
    }
  }
  // Spec §3's figures for layers.0.
  EXPECT_EQ(bytes_differing(tensor_bytes(*o.triton, "layers.0.ffn.experts.w13.mxfp4"),
                            tensor_bytes(*o.torch, "layers.0.ffn.experts.w13.mxfp4")), 6736u);
  EXPECT_EQ(bytes_differing(tensor_bytes(*o.triton, "layers.0.ffn.experts.w2.mxfp4"),
                            tensor_bytes(*o.torch, "layers.0.ffn.experts.w2.mxfp4")), 2589u);
}

TEST(RemapOracle, StatsMatchOracleReport) {
  Oracles& o = oracles();
  ASSERT_TRUE(o.in);
  for (const char* block : kBlocks) {
    for (const std::string matrix : {"w13", "w2"}) {
      const std::string fused = std::string(block) + ".ffn.experts." + matrix;
      const FusedOutput away = remap_fused(*o.in, block, matrix, kAway);
      const FusedOutput even = remap_fused(*o.in, block, matrix, kEven);
      const RemapStats& s = away.stats;
      // The report's rates were computed in float32 by torch: compare to float32 resolution.
      EXPECT_EQ(double(s.num_weights), report_number(fused, "num_weights")) << fused;
      EXPECT_EQ(double(s.overflow), report_number(fused, "overflow_count")) << fused;
      EXPECT_NEAR(s.exact_rate_nonzero(), report_number(fused, "exact_rate_nonzero"), 1e-6) << fused;
      EXPECT_NEAR(s.exact_rate_all(), report_number(fused, "exact_rate_all"), 1e-6) << fused;
      EXPECT_NEAR(s.mean_rel_err_nonzero(), report_number(fused, "mean_rel_err_nonzero"), 1e-6) << fused;
      EXPECT_EQ(s.max_rel_err_nonzero, report_number(fused, "max_rel_err_nonzero")) << fused;
      EXPECT_EQ(double(s.row_span_max), report_number(fused, "row_span_max")) << fused;
      const double n = double(s.num_weights);
      EXPECT_NEAR(s.sum_abs_err / n, report_number(fused, "mae"), 1e-5 * report_number(fused, "mae")) << fused;
      EXPECT_NEAR(std::sqrt(s.sum_sq_err / n), report_number(fused, "rmse"), 1e-5 * report_number(fused, "rmse"));
      EXPECT_EQ(s.max_abs_err, report_number(fused, "max_abs_err")) << fused;
      // §8: every statistic is the same under both roundings.
      const RemapStats& t = even.stats;
      EXPECT_EQ(t.exact_nonzero, s.exact_nonzero);
      EXPECT_EQ(t.exact_all, s.exact_all);
      EXPECT_EQ(t.sum_rel_err_nonzero, s.sum_rel_err_nonzero);
      EXPECT_EQ(t.sum_sq_err, s.sum_sq_err);
      if (std::string(block) == "layers.0")
        std::printf("[ stats    ] %-24s exact_nonzero %.10f mean_rel %.8f max_rel %.1f span %d folded %llu/%llu "
                    "vanished %llu (triton) %llu (torch)\n",
                    fused.c_str(), s.exact_rate_nonzero(), s.mean_rel_err_nonzero(), s.max_rel_err_nonzero,
                    s.row_span_max, (unsigned long long)s.blocks_folded, (unsigned long long)s.blocks,
                    (unsigned long long)s.vanished_nonzero, (unsigned long long)t.vanished_nonzero);
    }
  }
}

}  // namespace
}  // namespace ckpt

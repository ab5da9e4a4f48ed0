// The AVX2 dequantizers against the scalar reference, bit for bit (NaN payloads too), on
// every code: every byte value at every byte position of a block, every f16 (and E8M0)
// scale value in every scale field (denormals, infinities, quiet and signalling NaNs),
// every grid index in every slot of the i-quants, and random blocks. The hand-built values
// of ggml_dequant_test.cpp check both paths against worked-out numbers; this file proves
// the two paths are the same function.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/ggml_types.h"
#include "numerics/ggml_dequant.h"
#include "test_require.h"
#include "test_util.h"

namespace ckpt {
namespace {

using TypeCase = test::GgmlAvx2Type;
const std::vector<TypeCase>& cases() { return test::ggml_avx2_types(); }
bool cpu_has_avx2() { return test::cpu_has_avx2_f16c(); }

std::string hex(float f) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", std::bit_cast<uint32_t>(f));
  return b;
}

// The first element whose bits differ between ref and fast, named with its block's bytes.
::testing::AssertionResult same_bits(const GgmlTypeInfo* info, const std::vector<uint8_t>& blocks,
                                     const std::vector<float>& ref, const std::vector<float>& fast, const char* isa_name) {
  const size_t n = ref.size();
  for (size_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(ref[i]) != std::bit_cast<uint32_t>(fast[i])) {
      const size_t b = i / info->block_size, off = b * info->type_size;
      std::string bytes;
      for (size_t k = 0; k < info->type_size; ++k) {
        char h[4];
        std::snprintf(h, sizeof h, "%02x", blocks[off + k]);
        bytes += h;
      }
      return ::testing::AssertionFailure() << info->name << " block " << b << " element " << i % info->block_size
                                           << ": scalar " << hex(ref[i]) << " " << isa_name << " " << hex(fast[i])
                                           << " (block bytes " << bytes << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Set when a check could not run a type's AVX-512 loop because this CPU lacks AVX-512F; the
// fixtures' TearDown reports it once per test (skipped, or failed under CKPT_REQUIRE_AVX512=1).
bool avx512_not_run = false;
void report_avx512_not_run() {
  if (std::exchange(avx512_not_run, false))
    test::skip_or_fail_without(test::Need::avx512,
                               "this CPU has no AVX-512F: the AVX-512 loops were not checked (the AVX2 ones were)");
}

// The fast paths and the reference on the same bytes; the first element whose bits differ, named.
::testing::AssertionResult same_on_both(int32_t type, const std::vector<uint8_t>& blocks) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const size_t n = blocks.size() / info->type_size * info->block_size;
  std::vector<float> ref(n);
  std::string error;
  if (!ggml_dequantize_isa(DequantIsa::scalar, type, blocks, ref, error))
    return ::testing::AssertionFailure() << "scalar: " << error;
  // The AVX2 loop, and the AVX-512 loop where the type has one and this CPU runs it.
  for (DequantIsa isa : {DequantIsa::avx2, DequantIsa::avx512}) {
    if (isa == DequantIsa::avx512 && !ggml_dequant_has_avx512_loop(type)) continue;
    if (isa == DequantIsa::avx512 && !test::cpu_has_avx512f()) {
      avx512_not_run = true;
      continue;
    }
    const char* isa_name = isa == DequantIsa::avx2 ? "avx2" : "avx512";
    std::vector<float> fast(n);
    if (!ggml_dequantize_isa(isa, type, blocks, fast, error))
      return ::testing::AssertionFailure() << isa_name << ": " << error;
    if (auto r = same_bits(info, blocks, ref, fast, isa_name); !r) return r;
  }
  return ::testing::AssertionSuccess();
}

class GgmlDequantIsa : public ::testing::TestWithParam<TypeCase> {
 protected:
  void SetUp() override {
    if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2/F16C: only the scalar path runs here";
    info_ = ggml_type_info(GetParam().type);
    ASSERT_NE(info_, nullptr);
  }
  void TearDown() override { report_avx512_not_run(); }
  std::vector<uint8_t> random_blocks(size_t count) {
    std::vector<uint8_t> v(count * info_->type_size);
    for (auto& b : v) b = static_cast<uint8_t>(rng_());
    return v;
  }
  const GgmlTypeInfo* info_ = nullptr;
  std::mt19937_64 rng_{20251201};
};

// The AVX-512 loops are the types large GGUFs are mostly made of (the ISA the CPU runs:
// GgmlDequantDispatch.BestIsaFollowsTheCpu).
TEST(GgmlDequantIsaChoice, Avx512LoopsAndTheBestIsa) {
  for (int32_t type : {kGgmlQ8_0, kGgmlIQ4_NL, kGgmlMXFP4, kGgmlQ4_K, kGgmlQ6_K, kGgmlIQ3_XXS, kGgmlIQ2_S, kGgmlIQ3_S})
    EXPECT_TRUE(ggml_dequant_has_avx512_loop(type)) << type;
  for (int32_t type : {kGgmlQ2_K, kGgmlQ5_K, kGgmlF32, kGgmlBF16}) EXPECT_FALSE(ggml_dequant_has_avx512_loop(type)) << type;
  EXPECT_TRUE(ggml_dequant_has_fast_path(DequantIsa::avx512, kGgmlQ8_0));  // avx512 includes every AVX2 loop
}

TEST_P(GgmlDequantIsa, HasAnAvx2Loop) {
  EXPECT_TRUE(ggml_dequant_has_fast_path(DequantIsa::avx2, GetParam().type)) << info_->name;
  EXPECT_FALSE(ggml_dequant_has_fast_path(DequantIsa::scalar, GetParam().type));
}

// For every byte position of a block, 256 copies of one random block with that byte set to
// 0..255: every nibble, sign byte, grid-index byte, qh/hmask byte, sub-block scale byte and
// both bytes of every f16 field take every value at every place.
TEST_P(GgmlDequantIsa, EveryByteValueAtEveryPosition) {
  for (int round = 0; round < 2; ++round) {  // two different random surroundings
    const std::vector<uint8_t> base = random_blocks(1);
    for (size_t p = 0; p < info_->type_size; ++p) {
      std::vector<uint8_t> blocks;
      blocks.reserve(256 * base.size());
      for (int v = 0; v < 256; ++v) {
        blocks.insert(blocks.end(), base.begin(), base.end());
        blocks[blocks.size() - base.size() + p] = static_cast<uint8_t>(v);
      }
      ASSERT_TRUE(same_on_both(GetParam().type, blocks)) << "byte position " << p;
    }
  }
}

TEST_P(GgmlDequantIsa, RandomBlocks) {
  const size_t count = info_->block_size == 1 ? 1 << 16 : info_->block_size == 32 ? 1 << 14 : 1 << 12;
  for (int round = 0; round < 4; ++round) ASSERT_TRUE(same_on_both(GetParam().type, random_blocks(count)));
}

// Lengths that are not a multiple of the vector width (the element types' tails) and a
// block count of zero.
TEST_P(GgmlDequantIsa, EveryLengthUpTo40Blocks) {
  for (size_t count = 0; count <= 40; ++count) ASSERT_TRUE(same_on_both(GetParam().type, random_blocks(count))) << count;
}

std::string case_name(const ::testing::TestParamInfo<TypeCase>& info) { return ggml_type_info(info.param.type)->name; }

INSTANTIATE_TEST_SUITE_P(Types, GgmlDequantIsa, ::testing::ValuesIn(cases()), case_name);

// The types with f16 scale fields (Q8_K's f32 and MXFP4's E8M0 scales have their own tests).
class GgmlDequantIsaScaled : public GgmlDequantIsa {};

// Every binary16 value (zeros, denormals, normals, ±Inf, quiet and signalling NaNs) in each
// f16 scale field, the rest of each block random.
TEST_P(GgmlDequantIsaScaled, EveryF16ScaleValueInEveryScaleField) {
  for (size_t field : GetParam().f16_fields) {
    test::for_every_f16_scale(info_->type_size, field, [&] { return random_blocks(4096); },
                              [&](const std::vector<uint8_t>& blocks, uint32_t chunk) {
                                ASSERT_TRUE(same_on_both(GetParam().type, blocks))
                                    << "field at byte " << field << ", values from " << chunk;
                              });
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlDequantIsaScaled, ::testing::ValuesIn(test::ggml_avx2_scaled_types()), case_name);

// ---- exhaustive domains of single fields ------------------------------------------------

class GgmlDequantIsaDomain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2/F16C";
  }
  void TearDown() override { report_avx512_not_run(); }
  std::mt19937_64 rng_{7};
  std::vector<uint8_t> random_bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng_());
    return v;
  }
};

// Q4_1 / Q5_1 with d = ±inf and a NaN minimum: a zero code's product 0 · inf is the default
// NaN and the sum of two NaNs is the product's on both ISAs (ggml_add_minimum), whatever
// order the compiler gives the addition (clang's was the other one: the fuzzer's find); a
// nonzero code gives inf + NaN = the minimum's NaN. Every code, both signs of d, NaN and
// signalling-NaN minima, and d NaN with m NaN.
TEST_F(GgmlDequantIsaDomain, ZeroTimesInfinityPlusANanMinimumIsTheProductsNan) {
  for (int32_t type : {kGgmlQ4_1, kGgmlQ5_1}) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    for (uint16_t d : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E55}}) {
      for (uint16_t m : {uint16_t{0x7E01}, uint16_t{0xFD23}, uint16_t{0x7C01}}) {
        std::vector<uint8_t> blocks(16 * info->type_size);
        for (size_t b = 0; b < 16; ++b) {
          uint8_t* blk = blocks.data() + b * info->type_size;
          blk[0] = static_cast<uint8_t>(d), blk[1] = static_cast<uint8_t>(d >> 8);
          blk[2] = static_cast<uint8_t>(m), blk[3] = static_cast<uint8_t>(m >> 8);
          // codes b and 0 in turn (Q5_1's high bits zero): zero codes in every lane
          for (size_t j = 4; j < info->type_size; ++j) blk[j] = static_cast<uint8_t>(j % 2 ? b : 0);
        }
        ASSERT_TRUE(same_on_both(type, blocks)) << info->name << " d " << std::hex << d << " m " << m;
#if defined(__x86_64__)
        std::vector<float> y(16 * info->block_size);
        std::string error;
        ASSERT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, type, blocks, y, error)) << error;
        const uint32_t product_nan = (d & 0x7FFF) == 0x7C00 ? 0xFFC00000u : 0x7FC00000u | (static_cast<uint32_t>(d & 0x3FF) << 13);
        for (size_t i = 0; i < y.size(); ++i) {
          if (std::bit_cast<uint32_t>(y[i]) == product_nan) continue;
          const bool quiet_m = (std::bit_cast<uint32_t>(y[i]) & 0x7FC00000u) == 0x7FC00000u;
          ASSERT_TRUE(quiet_m && (d & 0x7FFF) == 0x7C00) << info->name << " element " << i << std::hex << " bits "
                                                         << std::bit_cast<uint32_t>(y[i]);
        }
#endif
      }
    }
  }
}

TEST_F(GgmlDequantIsaDomain, EveryHalfAndEveryBfloat16) {
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    all[2 * h] = static_cast<uint8_t>(h);
    all[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  EXPECT_TRUE(same_on_both(kGgmlF16, all));
  EXPECT_TRUE(same_on_both(kGgmlBF16, all));
  // A signalling-NaN half keeps its payload and is quieted, as ggml's to_float does.
  std::vector<float> y(1);
  std::string error;
  ASSERT_TRUE(ggml_dequantize_isa(DequantIsa::avx2, kGgmlF16, std::vector<uint8_t>{0x01, 0x7C}, y, error));
  EXPECT_EQ(std::bit_cast<uint32_t>(y[0]), 0x7FC02000u);
}

// Q4_1 / Q5_1 with both the scale d and the minimum m NaN (different payloads): the sum
// q·d + m is defined as d's NaN, quieted, on both ISAs, whatever operand order the compiler
// picks (found by fuzz_ggml_dequant: gcc and clang ordered the scalar addition differently).
TEST_F(GgmlDequantIsaDomain, MinimumFormatsWithTwoNanFieldsGiveTheScalesNan) {
  for (int32_t type : {kGgmlQ4_1, kGgmlQ5_1}) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    std::vector<uint8_t> block = random_bytes(info->type_size);
    block[0] = 0x12; block[1] = 0x7D;  // d: signalling NaN, payload 0x112
    block[2] = 0x01; block[3] = 0xFF;  // m: a negative quiet NaN, another payload
    EXPECT_TRUE(same_on_both(type, block)) << info->name;
    for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2}) {
      std::vector<float> y(info->block_size);
      std::string error;
      ASSERT_TRUE(ggml_dequantize_isa(isa, type, block, y, error)) << error;
      for (float v : y) ASSERT_EQ(std::bit_cast<uint32_t>(v), 0x7FE24000u) << info->name << " " << hex(v);
    }
  }
}

// Every E8M0 scale byte with every nibble pair in every position (MXFP4).
TEST_F(GgmlDequantIsaDomain, Mxfp4EveryScaleTimesEveryCode) {
  std::vector<uint8_t> blocks;
  for (int e = 0; e < 256; ++e) {
    for (int shift = 0; shift < 16; ++shift) {
      blocks.push_back(static_cast<uint8_t>(e));
      for (int j = 0; j < 16; ++j) blocks.push_back(static_cast<uint8_t>(((j + shift) & 15) | ((15 - j) << 4)));
    }
  }
  EXPECT_TRUE(same_on_both(kGgmlMXFP4, blocks));
}

// Q8_K's f32 scale: special values (±0, denormals, ±Inf, NaNs) and random bit patterns.
TEST_F(GgmlDequantIsaDomain, Q8KEveryKindOfF32Scale) {
  std::vector<uint32_t> scales = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3F800000u,
                                  0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu};
  for (int i = 0; i < 4000; ++i) scales.push_back(static_cast<uint32_t>(rng_()));
  const size_t ts = ggml_type_info(kGgmlQ8_K)->type_size;
  std::vector<uint8_t> blocks = random_bytes(scales.size() * ts);
  for (size_t i = 0; i < scales.size(); ++i) std::memcpy(blocks.data() + i * ts, &scales[i], 4);
  EXPECT_TRUE(same_on_both(kGgmlQ8_K, blocks));
}

// IQ2_XS: every 16-bit (9-bit grid index, 7-bit sign index) word in every one of its 32 slots.
TEST_F(GgmlDequantIsaDomain, Iq2XsEveryIndexWordInEverySlot) {
  const size_t ts = ggml_type_info(kGgmlIQ2_XS)->type_size;
  for (int slot = 0; slot < 32; ++slot) {
    std::vector<uint8_t> blocks = random_bytes(65536 / 32 * ts);
    for (uint32_t q = 0; q < 65536; ++q) {  // block q / 32 holds 32 words, rotated by `slot`
      uint8_t* b = blocks.data() + (q / 32) * ts;
      const int s = static_cast<int>((q + slot) % 32);
      b[2 + 2 * s] = static_cast<uint8_t>(q);
      b[2 + 2 * s + 1] = static_cast<uint8_t>(q >> 8);
    }
    ASSERT_TRUE(same_on_both(kGgmlIQ2_XS, blocks)) << "slot rotation " << slot;
  }
}

// IQ2_S: every 10-bit grid index (a qs byte and two qh bits) in every one of its 32 slots.
TEST_F(GgmlDequantIsaDomain, Iq2SEveryGridIndexInEverySlot) {
  const size_t ts = ggml_type_info(kGgmlIQ2_S)->type_size;
  std::vector<uint8_t> blocks = random_bytes(32 * 1024 * ts);
  for (int slot = 0; slot < 32; ++slot) {
    const int ib = slot / 4, l = slot % 4;
    for (int idx = 0; idx < 1024; ++idx) {
      uint8_t* b = blocks.data() + (slot * 1024 + idx) * ts;
      b[2 + 4 * ib + l] = static_cast<uint8_t>(idx);
      b[66 + ib] = static_cast<uint8_t>((b[66 + ib] & ~(3 << (2 * l))) | ((idx >> 8) << (2 * l)));
    }
  }
  EXPECT_TRUE(same_on_both(kGgmlIQ2_S, blocks));
}

// IQ3_S: every 9-bit grid index (a qs byte and one qh bit) in every one of its 64 slots.
TEST_F(GgmlDequantIsaDomain, Iq3SEveryGridIndexInEverySlot) {
  const size_t ts = ggml_type_info(kGgmlIQ3_S)->type_size;
  std::vector<uint8_t> blocks = random_bytes(64 * 512 * ts);
  for (int slot = 0; slot < 64; ++slot) {
    const int ib = slot / 8, k = slot % 8;  // qs[8·ib + k]; its 9th bit is qh[ib] bit k
    for (int idx = 0; idx < 512; ++idx) {
      uint8_t* b = blocks.data() + (slot * 512 + idx) * ts;
      b[2 + 8 * ib + k] = static_cast<uint8_t>(idx);
      b[66 + ib] = static_cast<uint8_t>((b[66 + ib] & ~(1 << k)) | ((idx >> 8) << k));
    }
  }
  EXPECT_TRUE(same_on_both(kGgmlIQ3_S, blocks));
}

// ---- the dispatch hook ---------------------------------------------------------------------

// The CPU's best ISA is what CPUID says (asked here, not of the library), so an AVX-512
// host runs the AVX-512 loops.
TEST(GgmlDequantDispatch, BestIsaFollowsTheCpu) {
  const DequantIsa want = test::cpu_has_avx512f() ? DequantIsa::avx512
                          : cpu_has_avx2()        ? DequantIsa::avx2
                                                  : DequantIsa::scalar;
  EXPECT_EQ(static_cast<int>(ggml_dequant_best_isa()), static_cast<int>(want));
}

// Forcing scalar makes ggml_dequantize run the reference loops (both paths give the same
// values, so the choice is observed through ggml_dequant_isa()); forcing back restores it.
TEST(GgmlDequantDispatch, ForceIsaSwitchesWhatGgmlDequantizeUses) {
  const DequantIsa before = ggml_dequant_force_isa(DequantIsa::scalar);
  EXPECT_EQ(ggml_dequant_isa(), DequantIsa::scalar);
  std::vector<uint8_t> q80(34, 0x11);
  std::vector<float> y(32);
  std::string error;
  EXPECT_TRUE(ggml_dequantize(kGgmlQ8_0, q80, y, error)) << error;
  EXPECT_EQ(ggml_dequant_force_isa(DequantIsa::avx2), DequantIsa::scalar);
  // Clamped to what the CPU runs: the lesser of the two.
  EXPECT_EQ(ggml_dequant_isa(), std::min(DequantIsa::avx2, ggml_dequant_best_isa()));
  ggml_dequant_force_isa(DequantIsa::avx512);
  EXPECT_EQ(ggml_dequant_isa(), ggml_dequant_best_isa());
  ggml_dequant_force_isa(before);
  EXPECT_EQ(ggml_dequant_isa(), before);
}

// CKPT_DEQUANT_ISA: the accepted names, each clamped to what this CPU runs; any other value
// is an error naming it and the accepted ones (it fell back to the best ISA silently).
TEST(GgmlDequantDispatch, AnUnknownIsaNameIsAnErrorNamingItAndTheAcceptedOnes) {
  const DequantIsa best = ggml_dequant_best_isa();
  const struct {
    const char* value;
    DequantIsa want;
  } accepted[] = {{"", best},
                  {"auto", best},
                  {"scalar", DequantIsa::scalar},
                  {"avx2", std::min(DequantIsa::avx2, best)},
                  {"avx512", std::min(DequantIsa::avx512, best)}};
  for (const auto& a : accepted) {
    DequantIsa isa = DequantIsa::avx512;
    std::string error;
    EXPECT_TRUE(parse_dequant_isa(a.value, isa, error)) << a.value << ": " << error;
    EXPECT_EQ(isa, a.want) << a.value;
  }
  for (const char* bad : {"avx3", "AVX2", "avx2 ", "sse", "none", "1"}) {
    DequantIsa isa = DequantIsa::avx2;
    std::string error;
    EXPECT_FALSE(parse_dequant_isa(bad, isa, error)) << bad;
    EXPECT_NE(error.find(std::string("CKPT_DEQUANT_ISA='") + bad + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("accepted: auto, scalar, avx2, avx512"), std::string::npos) << error;
  }
}

TEST(GgmlDequantDispatch, BothIsasRejectTheSameBadArguments) {
  std::vector<uint8_t> in(35), iq1(56);
  std::vector<float> out(32), out256(256);
  std::string error;
  for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2, DequantIsa::avx512}) {
    EXPECT_FALSE(ggml_dequantize_isa(isa, kGgmlQ8_0, in, out, error));
    EXPECT_FALSE(ggml_dequantize_isa(isa, kGgmlIQ1_M, iq1, out256, error));
    EXPECT_EQ(error, "unsupported type IQ1_M (id 29)");
  }
}

}  // namespace
}  // namespace ckpt

// ggml_dequant_digest (numerics/ggml_dequant.h): the fused dequantize-and-digest equals the
// digest of the stored dequantization, bit for bit, on every input. The reference is the
// definition's two steps on the scalar ISA (ggml_dequantize_isa + f32_digest_isa); against
// it: the fused AVX2 path, the piece path of the scalar ISA, the two steps on AVX2 and the
// dispatched call. Inputs: random blocks (random f16 scale bytes include NaNs, infinities
// and denormals), every byte value at every byte position, every f16 scale value in every
// scale field, Q8_K's special f32 scales, every half and bfloat16; each at first indices 0,
// odd, just before and across a kDigestSpan boundary, random, and ending at kDigestMaxElems,
// with many lengths.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/ggml_types.h"
#include "numerics/f32_digest.h"
#include "numerics/ggml_dequant.h"
#include "test_require.h"
#include "test_util.h"

namespace ckpt {
namespace {

std::string hex(const F32Digest& d) {
  char b[48];
  std::snprintf(b, sizeof b, "{%016llx %016llx}", static_cast<unsigned long long>(d.a),
                static_cast<unsigned long long>(d.b));
  return b;
}

// The definition: the scalar dequantization, stored, then its digest.
F32Digest reference(int32_t type, std::span<const uint8_t> blocks, uint64_t first, const DigestWeights& w) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  std::vector<float> y(blocks.size() / info->type_size * info->block_size);
  std::string error;
  EXPECT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, type, blocks, y, error)) << error;
  return f32_digest_isa(DequantIsa::scalar, y, first, w);
}

// Set when a check could not run a type's AVX-512 loop because this CPU lacks AVX-512F; the
// fixtures' TearDown reports it once per test (skipped, or failed under CKPT_REQUIRE_AVX512=1).
bool avx512_not_run = false;
void report_avx512_not_run() {
  if (std::exchange(avx512_not_run, false))
    test::skip_or_fail_without(test::Need::avx512,
                               "this CPU has no AVX-512F: the AVX-512 digests were not checked (the AVX2 ones were)");
}

// Every way to the digest of `blocks` as elements first.. agrees with the reference; on a
// difference, the first block whose own digest differs is named with its bytes.
::testing::AssertionResult all_agree(int32_t type, std::span<const uint8_t> blocks, uint64_t first,
                                     const DigestWeights& w) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const size_t ts = info->type_size, bs = info->block_size, n = blocks.size() / ts * bs;
  const F32Digest want = reference(type, blocks, first, w);
  std::string error;
  F32Digest fused, scalar, dispatched;
  if (!ggml_dequant_digest_isa(DequantIsa::avx2, type, blocks, first, w, fused, error))
    return ::testing::AssertionFailure() << "avx2: " << error;
  if (!ggml_dequant_digest_isa(DequantIsa::scalar, type, blocks, first, w, scalar, error))
    return ::testing::AssertionFailure() << "scalar: " << error;
  if (!ggml_dequant_digest(type, blocks, first, w, dispatched, error))
    return ::testing::AssertionFailure() << "dispatched: " << error;
  std::vector<float> y(n);
  if (!ggml_dequantize_isa(DequantIsa::avx2, type, blocks, y, error))
    return ::testing::AssertionFailure() << "avx2 dequantize: " << error;
  const F32Digest two_steps = f32_digest_isa(DequantIsa::avx2, y, first, w);
  // The AVX-512 loops where the type has one and this CPU runs them (else the AVX2 ones again).
  const bool avx512 = test::cpu_has_avx512f() && ggml_dequant_has_avx512_loop(type);
  if (ggml_dequant_has_avx512_loop(type) && !test::cpu_has_avx512f()) avx512_not_run = true;
  F32Digest fused512 = fused, two_steps512 = two_steps;
  if (avx512) {
    if (!ggml_dequant_digest_isa(DequantIsa::avx512, type, blocks, first, w, fused512, error))
      return ::testing::AssertionFailure() << "avx512: " << error;
    if (!ggml_dequantize_isa(DequantIsa::avx512, type, blocks, y, error))
      return ::testing::AssertionFailure() << "avx512 dequantize: " << error;
    two_steps512 = f32_digest_isa(DequantIsa::avx512, y, first, w);
  }
  // Each way, and the ISA whose fused digest of one block is tried to name a differing block.
  struct Way {
    const char* what;
    F32Digest d;
    DequantIsa isa;
  };
  const Way got[] = {{"fused avx2", fused, DequantIsa::avx2},
                     {"scalar", scalar, DequantIsa::avx2},
                     {"dispatched", dispatched, DequantIsa::avx2},
                     {"avx2 dequantize then digest", two_steps, DequantIsa::avx2},
                     {"fused avx512", fused512, DequantIsa::avx512},
                     {"avx512 dequantize then digest", two_steps512, DequantIsa::avx512}};
  for (const auto& [what, d, isa] : got) {
    if (d == want) continue;
    auto failure = ::testing::AssertionFailure() << info->name << " " << blocks.size() / ts << " blocks from index "
                                                 << first << ": " << what << " " << hex(d) << ", reference "
                                                 << hex(want);
    for (size_t k = 0; k < blocks.size() / ts; ++k) {  // the first block that differs alone
      const auto one = blocks.subspan(k * ts, ts);
      F32Digest f;
      ggml_dequant_digest_isa(isa, type, one, first + k * bs, w, f, error);
      if (f == reference(type, one, first + k * bs, w)) continue;
      std::string bytes;
      for (uint8_t v : one) {
        char h[4];
        std::snprintf(h, sizeof h, "%02x", v);
        bytes += h;
      }
      failure << "; fused block " << k << " alone differs (bytes " << bytes << ")";
      break;
    }
    return failure;
  }
  return ::testing::AssertionSuccess();
}

class GgmlDequantDigest : public ::testing::TestWithParam<test::GgmlAvx2Type> {
 protected:
  void SetUp() override {
    if (!test::cpu_has_avx2_f16c()) GTEST_SKIP() << "this CPU has no AVX2/F16C: only the scalar path runs here";
    info_ = ggml_type_info(GetParam().type);
    ASSERT_NE(info_, nullptr);
    bs_ = info_->block_size;
  }
  void TearDown() override { report_avx512_not_run(); }
  std::vector<uint8_t> random_blocks(size_t count) {
    std::vector<uint8_t> v(count * info_->type_size);
    for (auto& b : v) b = static_cast<uint8_t>(rng_());
    return v;
  }
  // (first index, block count) pairs: the start, odd starts, blocks just before, on and
  // across a span boundary, several spans, random places, and the end of the index range.
  std::vector<std::pair<uint64_t, uint64_t>> placements() {
    const uint64_t per_span = kDigestSpan / bs_;
    std::vector<std::pair<uint64_t, uint64_t>> p = {
        {0, 0},
        {0, 1},
        {0, 2},
        {0, per_span},
        {0, per_span + 1},
        {1, 1},
        {1, 3 * per_span},
        {7, 33},
        {kDigestSpan - bs_, 2},
        {kDigestSpan - bs_ / 2 - 1, 3},
        {kDigestSpan - 1, 1},
        {kDigestSpan - 1, per_span + 2},
        {3 * kDigestSpan + 5, 50},
        {kDigestMaxElems - bs_, 1},
        {kDigestMaxElems - 40 * bs_, 40},
        {kDigestMaxElems - 40 * bs_ - 3, 40},
    };
    for (int r = 0; r < 8; ++r) {
      const uint64_t n = rng_() % (4 * per_span + 8);
      p.push_back({rng_() % (kDigestMaxElems - n * bs_), n});
    }
    return p;
  }
  const GgmlTypeInfo* info_ = nullptr;
  uint64_t bs_ = 1;
  std::mt19937_64 rng_{20251201};
  const DigestWeights w_{0x5eed1234abcdull};
};

TEST_P(GgmlDequantDigest, HasAFusedPath) {
  EXPECT_TRUE(ggml_dequant_has_fast_path(DequantIsa::avx2, GetParam().type)) << info_->name;
}

TEST_P(GgmlDequantDigest, RandomBlocksAtEveryPlacement) {
  for (const auto& [first, count] : placements())
    ASSERT_TRUE(all_agree(GetParam().type, random_blocks(count), first, w_));
}

TEST_P(GgmlDequantDigest, ManyRandomBlocks) {
  const size_t count = bs_ == 1 ? 1 << 17 : bs_ == 32 ? 1 << 14 : 1 << 11;
  for (uint64_t first : {uint64_t{0}, uint64_t{12345}})
    ASSERT_TRUE(all_agree(GetParam().type, random_blocks(count), first, w_));
}

// Every length from 0 to 40 blocks at the start, at an odd index and across a boundary.
TEST_P(GgmlDequantDigest, EveryLengthUpTo40Blocks) {
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, kDigestSpan - 5})
    for (size_t count = 0; count <= 40; ++count)
      ASSERT_TRUE(all_agree(GetParam().type, random_blocks(count), first, w_)) << count;
}

// 256 copies of a random block with one byte set to 0..255, for every byte position: every
// code, sign byte, grid index byte, sub-block scale and both bytes of every f16 field.
TEST_P(GgmlDequantDigest, EveryByteValueAtEveryPosition) {
  const std::vector<uint8_t> base = random_blocks(1);
  for (size_t p = 0; p < info_->type_size; ++p) {
    std::vector<uint8_t> blocks;
    blocks.reserve(256 * base.size());
    for (int v = 0; v < 256; ++v) {
      blocks.insert(blocks.end(), base.begin(), base.end());
      blocks[blocks.size() - base.size() + p] = static_cast<uint8_t>(v);
    }
    ASSERT_TRUE(all_agree(GetParam().type, blocks, p * 97, w_)) << "byte position " << p;
  }
}

// A fused digest that ignored its input would agree with nothing above; this also pins that
// one changed value changes it.
TEST_P(GgmlDequantDigest, OneChangedValueChangesTheFusedDigest) {
  std::vector<uint8_t> blocks = random_blocks(64);
  const size_t n = blocks.size() / info_->type_size * bs_;
  std::vector<float> before(n), after(n);
  std::string error;
  F32Digest d0, d1;
  ASSERT_TRUE(ggml_dequant_digest_isa(DequantIsa::avx2, GetParam().type, blocks, 3, w_, d0, error)) << error;
  ASSERT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, GetParam().type, blocks, before, error)) << error;
  for (size_t i = blocks.size() / 2;; ++i) {  // a byte change that changes a value
    ASSERT_LT(i, blocks.size());
    blocks[i] ^= 0x01;
    ASSERT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, GetParam().type, blocks, after, error)) << error;
    if (std::memcmp(before.data(), after.data(), 4 * n) != 0) break;
    blocks[i] ^= 0x01;
  }
  ASSERT_TRUE(ggml_dequant_digest_isa(DequantIsa::avx2, GetParam().type, blocks, 3, w_, d1, error)) << error;
  EXPECT_NE(d0, d1);
  EXPECT_EQ(d1, reference(GetParam().type, blocks, 3, w_));
}

std::string case_name(const ::testing::TestParamInfo<test::GgmlAvx2Type>& info) {
  return ggml_type_info(info.param.type)->name;
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlDequantDigest, ::testing::ValuesIn(test::ggml_avx2_types()), case_name);

class GgmlDequantDigestScaled : public GgmlDequantDigest {};

// Every binary16 value (zeros, denormals, normals, ±Inf, quiet and signalling NaNs) in each
// f16 scale field, the rest of each block random, 4096 values per call at an odd index.
TEST_P(GgmlDequantDigestScaled, EveryF16ScaleValueInEveryScaleField) {
  for (size_t field : GetParam().f16_fields) {
    test::for_every_f16_scale(info_->type_size, field, [&] { return random_blocks(4096); },
                              [&](const std::vector<uint8_t>& blocks, uint32_t chunk) {
                                ASSERT_TRUE(all_agree(GetParam().type, blocks, chunk + 1, w_))
                                    << "field " << field << " from " << chunk;
                              });
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlDequantDigestScaled, ::testing::ValuesIn(test::ggml_avx2_scaled_types()), case_name);

class GgmlDequantDigestDomain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cpu_has_avx2_f16c()) GTEST_SKIP() << "this CPU has no AVX2/F16C";
  }
  void TearDown() override { report_avx512_not_run(); }
  std::mt19937_64 rng_{11};
  const DigestWeights w_{0xfeedull};
};

// Every half and every bfloat16 (NaN payloads, signalling ones included), 16 spans, at an
// odd index: the F16C path with its NaN repair and the scalar tails.
TEST_F(GgmlDequantDigestDomain, EveryHalfAndEveryBfloat16) {
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    all[2 * h] = static_cast<uint8_t>(h);
    all[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  for (uint64_t first : {uint64_t{0}, uint64_t{3}, kDigestMaxElems - 65536 - 1}) {
    EXPECT_TRUE(all_agree(kGgmlF16, all, first, w_));
    EXPECT_TRUE(all_agree(kGgmlBF16, all, first, w_));
  }
}

// Q8_K's f32 scale: zeros, denormals, ±Inf, quiet and signalling NaNs, random patterns.
TEST_F(GgmlDequantDigestDomain, Q8KEveryKindOfF32Scale) {
  std::vector<uint32_t> scales = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3F800000u,
                                  0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu};
  for (int i = 0; i < 2000; ++i) scales.push_back(static_cast<uint32_t>(rng_()));
  const size_t ts = ggml_type_info(kGgmlQ8_K)->type_size;
  std::vector<uint8_t> blocks(scales.size() * ts);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng_());
  for (size_t i = 0; i < scales.size(); ++i) std::memcpy(blocks.data() + i * ts, &scales[i], 4);
  EXPECT_TRUE(all_agree(kGgmlQ8_K, blocks, 0, w_));
  EXPECT_TRUE(all_agree(kGgmlQ8_K, blocks, 129, w_));
}

// The same rejections as ggml_dequantize, and the index limit of the digest.
TEST_F(GgmlDequantDigestDomain, RejectsBadArguments) {
  const DigestWeights& w = w_;
  std::vector<uint8_t> q80(34 * 2), bad(35), iq1(56);
  std::string error;
  F32Digest d;
  for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2}) {
    EXPECT_FALSE(ggml_dequant_digest_isa(isa, kGgmlIQ1_M, iq1, 0, w, d, error));
    EXPECT_EQ(error, "unsupported type IQ1_M (id 29)");
    EXPECT_FALSE(ggml_dequant_digest_isa(isa, kGgmlQ8_0, bad, 0, w, d, error));
    EXPECT_EQ(error, "ggml_dequant_digest: Q8_0 input of 35 bytes is not a whole number of 34-byte blocks");
    EXPECT_TRUE(ggml_dequant_digest_isa(isa, kGgmlQ8_0, q80, kDigestMaxElems - 64, w, d, error)) << error;
    EXPECT_FALSE(ggml_dequant_digest_isa(isa, kGgmlQ8_0, q80, kDigestMaxElems - 63, w, d, error));
    EXPECT_EQ(error, "ggml_dequant_digest: 64 elements from index 16777153 pass the digest's 16777216-element limit");
    EXPECT_FALSE(ggml_dequant_digest_isa(isa, kGgmlQ8_0, {}, kDigestMaxElems + 1, w, d, error));
    EXPECT_TRUE(ggml_dequant_digest_isa(isa, kGgmlQ8_0, {}, kDigestMaxElems, w, d, error)) << error;
    EXPECT_EQ(d, F32Digest{});
  }
}

// The dispatched call follows ggml_dequant_force_isa (the scalar piece path when forced).
TEST_F(GgmlDequantDigestDomain, DispatchFollowsTheForcedIsa) {
  std::vector<uint8_t> blocks(110 * 40);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng_());
  const F32Digest want = reference(kGgmlIQ3_S, blocks, 77, w_);
  std::string error;
  for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2}) {
    const DequantIsa before = ggml_dequant_force_isa(isa);
    F32Digest d;
    EXPECT_TRUE(ggml_dequant_digest(kGgmlIQ3_S, blocks, 77, w_, d, error)) << error;
    EXPECT_EQ(d, want);
    ggml_dequant_force_isa(before);
  }
}

}  // namespace
}  // namespace ckpt

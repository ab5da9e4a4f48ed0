// The embedded ggml tables against the hashes of gguf.md §6, and the IQ3_S "31/30"
// regression: the pre-#5829 iq3xs_grid must be told apart both by hash and by value.
#include "numerics/ggml_tables.h"

#include <bit>
#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "core/ggml_types.h"
#include "io/hash.h"
#include "numerics/ggml_dequant.h"

namespace ckpt {
namespace {

// Pinned here independently of the generated file (gguf.md §6).
const std::map<std::string, std::string> kSpecHashes = {
    {"kmask_iq2xs", "5ac9831b2e30eb285ef34f8501620f878432d5c04331ad1ae47f977a83ba41a5"},
    {"ksigns_iq2xs", "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31"},
    {"iq2xxs_grid", "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54"},
    {"iq2xs_grid", "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de"},
    {"iq2s_grid", "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88"},
    {"iq3xxs_grid", "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d"},
    {"iq3s_grid", "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f"},
    {"kvalues_iq4nl", "61aa47540aa024b5d6ddaa839b84ffe59f3d5a349af5c6c7ffcb5e0474b46163"},
    {"kvalues_fp4", "adf76b672d47eb7fc0afd4db132d548d59d3190aa0ad118fdbf569d5fd478f97"},
};

TEST(GgmlTables, EveryTableMatchesItsPinnedHash) {
  for (const auto& [name, hash] : kSpecHashes) EXPECT_EQ(ggml_table_sha256(name), hash) << name;
  EXPECT_EQ(ggml_table_sha256("no_such_table"), "");
}

TEST(GgmlTables, EmbeddedHashesAreTheSpecHashesAndVerify) {
  ASSERT_EQ(ggml_table_hashes().size(), kSpecHashes.size());
  for (const auto& t : ggml_table_hashes()) EXPECT_EQ(kSpecHashes.at(t.name), t.sha256) << t.name;
  std::string error;
  EXPECT_TRUE(ggml_tables_verified(error)) << error;
}

TEST(GgmlTables, StructuralFacts) {
  // iq3s_grid: bytes in {1,3,...,15}, strictly ascending words, first/last as in §6.
  EXPECT_EQ(iq3s_grid.front(), 0x01010101u);
  EXPECT_EQ(iq3s_grid.back(), 0x0f0f0101u);
  for (size_t i = 1; i < iq3s_grid.size(); ++i) EXPECT_LT(iq3s_grid[i - 1], iq3s_grid[i]);
  for (size_t i = 0; i < ksigns_iq2xs.size(); ++i)
    EXPECT_EQ(ksigns_iq2xs[i], i | (std::popcount(i) & 1) << 7) << i;  // even count of negatives
  for (size_t j = 0; j < kmask_iq2xs.size(); ++j) EXPECT_EQ(kmask_iq2xs[j], 1u << j);
}

// --- the 31/30 bug -----------------------------------------------------------------

// The table vLLM / sglang still ship: 4 × iq3s_grid, except 15 → 62 (0x3e) instead of 60.
std::vector<uint32_t> old_iq3xs_grid() {
  std::vector<uint32_t> old;
  for (uint32_t w : iq3s_grid) {
    uint32_t o = 0;
    for (int j = 0; j < 4; ++j) {
      const uint32_t b = (w >> (8 * j)) & 0xFF;
      o |= (b == 15 ? 62u : 4 * b) << (8 * j);
    }
    old.push_back(o);
  }
  return old;
}

bool has_byte_15(uint32_t w) {
  for (int j = 0; j < 4; ++j)
    if (((w >> (8 * j)) & 0xFF) == 15) return true;
  return false;
}

TEST(GgmlTables, OldIq3xsGridHashesDifferently) {
  auto old = old_iq3xs_grid();
  EXPECT_EQ(old[0], 0x04040404u);  // the first words §6 quotes from sglang
  EXPECT_EQ(old[4], 0x0404043eu);
  size_t bytes15 = 0, words15 = 0;
  for (uint32_t w : iq3s_grid) {
    words15 += has_byte_15(w);
    for (int j = 0; j < 4; ++j) bytes15 += ((w >> (8 * j)) & 0xFF) == 15;
  }
  EXPECT_EQ(bytes15, 150u);
  EXPECT_EQ(words15, 146u);
  Sha256 h;
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(old.data()), old.size() * 4));
  const std::string old_hash = h.hex_digest();
  EXPECT_NE(old_hash, kSpecHashes.at("iq3s_grid"));
  EXPECT_NE(old_hash, kSpecHashes.at("iq3xxs_grid"));
}

// An IQ3_S block (110 B) whose every index points at a grid word containing 15, with
// all nine index bits used, scale nibbles 0..15 and mixed signs.
std::vector<uint8_t> iq3s_block_hitting_15(std::vector<int>& indices) {
  std::vector<int> hits;
  for (int i = 0; i < 512; ++i)
    if (has_byte_15(iq3s_grid[i])) hits.push_back(i);
  std::vector<uint8_t> b(110, 0);
  b[0] = 0x55;  // d = fp16 0x3555 (0.33325...): 11 significant bits
  b[1] = 0x35;
  for (int k = 0; k < 64; ++k) {
    const int idx = hits[(k * 37) % hits.size()];
    indices.push_back(idx);
    const int ib = k / 8, l = (k % 8) / 2;
    b[2 + k] = static_cast<uint8_t>(idx & 0xFF);
    // 9th bit: qh[ib] bit 2l for the first index of pair l, bit 2l+1 for the second.
    if (idx & 256) b[66 + ib] |= static_cast<uint8_t>(1 << (2 * l + (k % 2)));
  }
  for (int k = 0; k < 32; ++k) b[74 + k] = static_cast<uint8_t>(k * 29 + 7);
  for (int k = 0; k < 4; ++k) b[106 + k] = static_cast<uint8_t>(0x10 * (2 * k + 9) + 2 * k);
  return b;
}

// The pre-#5829 decoding: old grid bytes, db = d·(0.5 + s)·0.5.
std::vector<float> dequant_iq3s_old(const std::vector<uint8_t>& b, const std::vector<uint32_t>& old) {
  std::vector<float> y;
  const float d = ggml_fp16_to_f32(static_cast<uint16_t>(b[0] | b[1] << 8));
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xF;
    const float db = d * (0.5f + static_cast<float>(s)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const int i1 = b[2 + 8 * ib + 2 * l] | ((b[66 + ib] << (8 - 2 * l)) & 256);
      const int i2 = b[2 + 8 * ib + 2 * l + 1] | ((b[66 + ib] << (7 - 2 * l)) & 256);
      const uint8_t signs = b[74 + 4 * ib + l];
      for (int j = 0; j < 8; ++j) {
        const uint32_t w = j < 4 ? old[i1] : old[i2];
        const float g = static_cast<float>((w >> (8 * (j % 4))) & 0xFF);
        y.push_back(db * g * ((signs >> j) & 1 ? -1.0f : 1.0f));
      }
    }
  }
  return y;
}

TEST(GgmlTables, OldGridIsCaughtByIq3sDequantAtTightTolerance) {
  std::vector<int> indices;
  auto block = iq3s_block_hitting_15(indices);
  std::vector<float> ours(256);
  std::string error;
  ASSERT_TRUE(ggml_dequantize(kGgmlIQ3_S, block, ours, error)) << error;
  auto old = dequant_iq3s_old(block, old_iq3xs_grid());
  ASSERT_EQ(old.size(), 256u);
  int top = 0, mismatches_tight = 0, mismatches_loose = 0;
  for (int k = 0; k < 256; ++k) {
    const int idx = indices[k / 4];
    const uint32_t level = (iq3s_grid[idx] >> (8 * (k % 4))) & 0xFF;
    ASSERT_NE(ours[k], 0.0f);
    if (level == 15) {
      ++top;
      // Over-scaled by exactly 62/60 (compared in double, where both products are exact).
      EXPECT_EQ(static_cast<double>(old[k]) * 30.0, static_cast<double>(ours[k]) * 31.0) << k;
    } else {
      EXPECT_EQ(old[k], ours[k]) << k;  // the formulas agree below the top level
    }
    const float diff = std::fabs(old[k] - ours[k]);
    mismatches_tight += diff > 1e-4f * std::fabs(ours[k]);
    mismatches_loose += diff > 4e-2f * std::fabs(ours[k]);
  }
  EXPECT_GE(top, 64);                  // every grid word used holds at least one 15
  EXPECT_EQ(mismatches_tight, top);    // rtol ≪ 1e-3 flags each top-level value
  EXPECT_EQ(mismatches_loose, 0);      // rtol = 4e-2 (vllm-gguf-plugin's tests) hides all of them
}

}  // namespace
}  // namespace ckpt

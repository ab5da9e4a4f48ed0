#include "numerics/ggml_block_scan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "formats/gguf.h"
#include "test_util.h"

namespace ckpt {
namespace {

struct Loaded {
  MappedFile file;
  std::optional<GgufFile> g;
};

void load(Loaded& l, const std::string& rel) {
  IoError err;
  ASSERT_TRUE(l.file.open(test::fixture(rel), err)) << err.message;
  Findings f;
  l.g = read_gguf(l.file, rel, f);
  ASSERT_TRUE(l.g.has_value());
  ASSERT_FALSE(f.has_errors());
}

// A writable copy of one tensor's bytes.
std::vector<uint8_t> tensor_bytes(const Loaded& l, const std::string& name, int32_t expect_type) {
  const GgufTensorInfo* t = l.g->find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  EXPECT_EQ(t->type, expect_type) << name;
  auto s = l.file.read_bytes(l.g->data_start + t->offset, t->nbytes);
  return {s.begin(), s.end()};
}

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

BlockScanResult scan(int32_t type, const std::vector<uint8_t>& b, uint64_t base = 0) {
  BlockScanResult r;
  scan_ggml_blocks(type, b, base, r);
  return r;
}

TEST(GgmlBlockScan, CleanFixtureTensorsReportZero) {
  for (const char* rel : {"ggml/qwen3next-tiny.gguf", "external/gguf/llama-2-tiny-random.gguf",
                          "external/gguf/llama-gguf-example-dummy.gguf"}) {
    Loaded l;
    load(l, rel);
    for (const GgufTensorInfo& t : l.g->tensors) {
      BlockScanResult r;
      scan_ggml_blocks(t.type, l.file.read_bytes(l.g->data_start + t.offset, t.nbytes), 0, r);
      EXPECT_EQ(r.total_bad(), 0u) << rel << " " << t.name;
      EXPECT_FALSE(r.first_bad_byte.has_value());
    }
  }
}

TEST(GgmlBlockScan, Q8_0NanScale) {
  Loaded l;
  load(l, "ggml/qwen3next-tiny.gguf");
  auto b = tensor_bytes(l, "token_embd.weight", kGgmlQ8_0);
  put16(b, 3 * 34, 0x7E00);  // block 3's d = NaN
  BlockScanResult r = scan(kGgmlQ8_0, b, 1000);
  EXPECT_EQ(r.bad_scales, 1u);
  EXPECT_EQ(r.first_bad_byte, 1000u + 3 * 34);
}

TEST(GgmlBlockScan, Q4_KNanDAndInfDmin) {
  Loaded l;
  load(l, "ggml/qwen3next-tiny.gguf");
  auto b = tensor_bytes(l, "blk.1.ffn_down_exps.weight", kGgmlQ4_K);
  put16(b, 2 * 144 + 2, 0x7C00);  // block 2 dmin = +Inf
  put16(b, 5 * 144, 0xFE00);      // block 5 d = NaN
  BlockScanResult r = scan(kGgmlQ4_K, b);
  EXPECT_EQ(r.bad_scales, 2u);
  EXPECT_EQ(r.first_bad_byte, 2u * 144 + 2);
}

TEST(GgmlBlockScan, IQ3_SNanScale) {
  Loaded l;
  load(l, "ggml/qwen3next-tiny.gguf");
  auto b = tensor_bytes(l, "blk.0.ffn_gate_exps.weight", kGgmlIQ3_S);
  put16(b, 7 * 110, 0x7C01);
  BlockScanResult r = scan(kGgmlIQ3_S, b);
  EXPECT_EQ(r.bad_scales, 1u);
  EXPECT_EQ(r.first_bad_byte, 7u * 110);
}

TEST(GgmlBlockScan, Q6_KScaleIsTheLastField) {
  Loaded l;
  load(l, "ggml/qwen3next-tiny.gguf");
  auto b = tensor_bytes(l, "blk.2.ffn_down_exps.weight", kGgmlQ6_K);
  put16(b, 208, 0xFC00);  // -Inf in block 0's d (offset 208)
  BlockScanResult r = scan(kGgmlQ6_K, b);
  EXPECT_EQ(r.bad_scales, 1u);
  EXPECT_EQ(r.first_bad_byte, 208u);
}

TEST(GgmlBlockScan, Mxfp4ReservedExponent) {
  Loaded l;
  load(l, "ggml/qwen3next-tiny.gguf");
  auto b = tensor_bytes(l, "blk.3.ffn_down_exps.weight", kGgmlMXFP4);
  b[5 * 17] = 0xFF;
  b[9 * 17] = 0xFF;
  BlockScanResult r = scan(kGgmlMXFP4, b);
  EXPECT_EQ(r.bad_e8m0, 2u);
  EXPECT_EQ(r.bad_scales, 0u);
  EXPECT_EQ(r.first_bad_byte, 5u * 17);
}

std::vector<uint8_t> u16s(std::initializer_list<uint16_t> v) {
  std::vector<uint8_t> out(v.size() * 2);
  size_t i = 0;
  for (uint16_t x : v) { std::memcpy(out.data() + i, &x, 2); i += 2; }
  return out;
}

TEST(GgmlBlockScan, F16NanAndInf) {
  auto b = u16s({0x3C00, 0x7BFF, 0x0001, 0x7C00, 0x7E01, 0xFC00, 0x8000});
  BlockScanResult r = scan(kGgmlF16, b);
  EXPECT_EQ(r.nan, 1u);
  EXPECT_EQ(r.inf, 2u);
  EXPECT_EQ(r.first_bad_byte, 6u);
}

TEST(GgmlBlockScan, BF16NanAndInf) {
  auto b = u16s({0x3F80, 0x7F7F, 0x7FC0, 0x7F80, 0xFF80, 0xFF81});
  BlockScanResult r = scan(kGgmlBF16, b);
  EXPECT_EQ(r.nan, 2u);
  EXPECT_EQ(r.inf, 2u);
  EXPECT_EQ(r.first_bad_byte, 4u);
}

TEST(GgmlBlockScan, F32AcrossChunksAndStreaming) {
  std::vector<float> v(10000, 1.5f);
  v[5000] = std::numeric_limits<float>::quiet_NaN();
  v[9999] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  BlockScanResult r;
  // Two chunks, as a streaming caller would pass them; positions carry the chunk's base.
  scan_ggml_blocks(kGgmlF32, std::span<const uint8_t>(b).first(16000), 0, r);
  EXPECT_EQ(r.total_bad(), 0u);
  scan_ggml_blocks(kGgmlF32, std::span<const uint8_t>(b).subspan(16000), 16000, r);
  EXPECT_EQ(r.nan, 1u);
  EXPECT_EQ(r.inf, 1u);
  EXPECT_EQ(r.first_bad_byte, 20000u);
}

TEST(GgmlBlockScan, F64NanAndInf) {
  std::vector<double> v = {1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::max()};
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  BlockScanResult r = scan(kGgmlF64, b);
  EXPECT_EQ(r.nan, 1u);
  EXPECT_EQ(r.inf, 1u);
  EXPECT_EQ(r.first_bad_byte, 8u);
}

TEST(GgmlBlockScan, IQ1_MScaleFromScaleNibbles) {
  std::vector<uint8_t> b(56, 0);
  EXPECT_EQ(scan(kGgmlIQ1_M, b).total_bad(), 0u);
  b[48 + 5] = 0xC0;  // sc[2] >> 4 & 0x0F00 -> 0x0C00
  b[48 + 7] = 0x70;  // sc[3] & 0xF000 -> 0x7000: scale = 0x7C00 = +Inf
  BlockScanResult r = scan(kGgmlIQ1_M, b);
  EXPECT_EQ(r.bad_scales, 1u);
  EXPECT_EQ(r.first_bad_byte, 48u);
}

TEST(GgmlBlockScan, Q8_KFloatScale) {
  std::vector<uint8_t> b(292 * 2, 0);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(b.data() + 292, &inf, 4);
  BlockScanResult r = scan(kGgmlQ8_K, b);
  EXPECT_EQ(r.bad_scales, 1u);
  EXPECT_EQ(r.first_bad_byte, 292u);
}

// Every live type: a zero block is clean; an all-0xFF block is flagged exactly when the
// type has something to check (integers and NVFP4 have nothing).
TEST(GgmlBlockScan, EveryTypeZeroCleanOnesFlagged) {
  for (int32_t id = 0; id < kGgmlTypeCount; ++id) {
    const GgmlTypeInfo* t = ggml_type_info(id);
    if (t->removed) continue;
    SCOPED_TRACE(t->name);
    std::vector<uint8_t> zeros(t->type_size * 3, 0);
    EXPECT_EQ(scan(id, zeros).total_bad(), 0u);
    std::vector<uint8_t> ones(t->type_size * 3, 0xFF);
    const bool unchecked = id == kGgmlI8 || id == kGgmlI16 || id == kGgmlI32 || id == kGgmlI64 || id == kGgmlNVFP4;
    BlockScanResult r = scan(id, ones);
    if (unchecked) {
      EXPECT_EQ(r.total_bad(), 0u);
    } else {
      EXPECT_GE(r.total_bad(), 3u);
      EXPECT_EQ(r.first_bad_byte.has_value(), true);
    }
  }
}

TEST(GgmlBlockScan, PartialTrailingBlockIgnored) {
  std::vector<uint8_t> b(34 + 10, 0xFF);
  b[0] = 0;
  b[1] = 0x3C;
  EXPECT_EQ(scan(kGgmlQ8_0, b).total_bad(), 0u);
}

}  // namespace
}  // namespace ckpt

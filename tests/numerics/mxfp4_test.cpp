#include "numerics/mxfp4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace ckpt {
namespace {

// Independent reference: the value in double (exact: at most two significant bits times a
// power of two), then narrowed to binary32 (also exact in this range, fp32 subnormals
// included) whose upper half is the BF16 pattern when the lower half is zero. It shares
// nothing with the library's integer bit-field construction.
struct Reference {
  bool overflow = false;
  uint16_t bits = 0;
};

Reference reference(uint8_t code, uint8_t scale) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  double v = std::ldexp(kMag[code & 7], static_cast<int>(scale) - 127);
  if (code & 8) v = -v;
  // BF16's largest finite value is 255 · 2^120; anything at or above 2^128 is out of range
  // (with two significant bits nothing lands in between).
  if (std::fabs(v) >= std::ldexp(1.0, 128)) return {true, 0};
  const float f = static_cast<float>(v);
  EXPECT_EQ(static_cast<double>(f), v) << "code " << int(code) << " scale " << int(scale);
  const uint32_t u = std::bit_cast<uint32_t>(f);
  EXPECT_EQ(u & 0xFFFFu, 0u) << "not a BF16 value: code " << int(code) << " scale " << int(scale);
  return {false, static_cast<uint16_t>(u >> 16)};
}

TEST(Mxfp4, EveryCodeTimesEveryFiniteScaleIsExactBf16) {
  int overflows = 0, subnormals = 0, checked = 0;
  for (int s = 0; s <= 254; ++s) {
    for (int c = 0; c < 16; ++c) {
      const auto code = static_cast<uint8_t>(c), scale = static_cast<uint8_t>(s);
      const Reference want = reference(code, scale);
      ASSERT_EQ(mxfp4_bf16_overflows(code, scale), want.overflow) << "code " << c << " scale " << s;
      if (want.overflow) {
        ++overflows;
        continue;
      }
      ASSERT_EQ(mxfp4_bf16(code, scale), want.bits) << "code " << c << " scale " << s;
      if ((want.bits & 0x7F80) == 0 && (want.bits & 0x7F) != 0) ++subnormals;
      ++checked;
    }
  }
  // b = 254: magnitudes 2, 3, 4, 6 (x2 signs); b = 253: 4, 6 (x2 signs).
  EXPECT_EQ(overflows, 12);
  EXPECT_EQ(checked, 255 * 16 - 12);
  EXPECT_GT(subnormals, 0);  // the small exponents do reach BF16 subnormals
}

TEST(Mxfp4, ExtremesAndSignedZeros) {
  EXPECT_EQ(mxfp4_bf16(1, 0), 0x0020);    // 0.5 · 2^-127 = 2^-128 = 32 · 2^-133 (subnormal)
  EXPECT_EQ(mxfp4_bf16(9, 0), 0x8020);    // its negative
  EXPECT_EQ(mxfp4_bf16(3, 0), 0x0060);    // 1.5 · 2^-127 = 96 · 2^-133
  EXPECT_EQ(mxfp4_bf16(7, 0), 0x0140);    // 6 · 2^-127 = 1.5 · 2^-125, normal
  EXPECT_EQ(mxfp4_bf16(4, 0), 0x0080);    // 2 · 2^-127 = 2^-126: the smallest normal
  EXPECT_EQ(mxfp4_bf16(2, 127), 0x3F80);  // 1.0
  EXPECT_EQ(mxfp4_bf16(15, 127), 0xC0C0); // -6.0
  EXPECT_EQ(mxfp4_bf16(3, 254), 0x7F40);  // 1.5 · 2^127: the largest value an input reaches
  EXPECT_EQ(mxfp4_bf16(11, 254), 0xFF40);
  EXPECT_EQ(mxfp4_bf16(5, 253), 0x7F40);  // 3 · 2^126
  EXPECT_EQ(mxfp4_bf16(7, 252), 0x7F40);  // 6 · 2^125
  EXPECT_FALSE(mxfp4_bf16_overflows(7, 252));
  EXPECT_TRUE(mxfp4_bf16_overflows(4, 254));   // 2 · 2^127 = 2^128
  EXPECT_TRUE(mxfp4_bf16_overflows(14, 253));  // -4 · 2^126
  EXPECT_FALSE(mxfp4_bf16_overflows(5, 253));
  for (int s = 0; s <= 254; ++s) {
    EXPECT_EQ(mxfp4_bf16(0, static_cast<uint8_t>(s)), 0x0000);
    EXPECT_EQ(mxfp4_bf16(8, static_cast<uint8_t>(s)), 0x8000);  // -0 keeps its sign
  }
  EXPECT_EQ(mxfp4_bf16(2, 0xFF) & 0x7FC0, 0x7FC0);  // precondition broken: NaN, never a number
  EXPECT_EQ(e2m1_to_float(7), 6.0f);
  EXPECT_TRUE(std::signbit(e2m1_to_float(8)));
}

// Packs element values (codes) into rows of k/2 bytes, low nibble first.
std::vector<uint8_t> pack(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> out(codes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | codes[2 * i + 1] << 4);
  return out;
}

TEST(Mxfp4, RowsMatchTheElementwiseDefinition) {
  const uint64_t rows = 5, k = 96;  // three 32-blocks a row
  std::mt19937 rng(7);
  std::vector<uint8_t> codes(rows * k), scales(rows * k / 32);
  for (auto& c : codes) c = static_cast<uint8_t>(rng() & 0xF);
  for (auto& s : scales) s = static_cast<uint8_t>(rng() % 253);  // never overflows
  scales[0] = 0;
  scales[1] = 252;
  std::vector<uint8_t> packed = pack(codes), out(rows * k * 2, 0xAA);
  ASSERT_FALSE(dequant_mxfp4_rows(packed, scales, k, 0, out).has_value());
  for (uint64_t i = 0; i < rows * k; ++i) {
    const uint16_t got = static_cast<uint16_t>(out[2 * i] | out[2 * i + 1] << 8);
    ASSERT_EQ(got, mxfp4_bf16(codes[i], scales[i / 32])) << "element " << i;
  }
}

TEST(Mxfp4, ScaleNanAndOverflowAreFaultsNamingTheElement) {
  const uint64_t rows = 2, k = 64;
  std::vector<uint8_t> codes(rows * k, 1), scales(rows * k / 32, 127), out(rows * k * 2);
  scales[3] = 0xFF;  // row 1, block 1
  auto fault = dequant_mxfp4_rows(pack(codes), scales, k, 10, out);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->kind, Mxfp4Fault::scale_nan);
  EXPECT_EQ(fault->element, (10 + 1) * k + 32);  // rows are numbered from row_begin
  EXPECT_STREQ(mxfp4_fault_name(fault->kind), "scale_nan");

  scales[3] = 127;
  scales[2] = 254;    // row 1, block 0: magnitude 0.5 stays finite...
  codes[k + 5] = 12;  // ...but -2 · 2^127 does not
  fault = dequant_mxfp4_rows(pack(codes), scales, k, 0, out);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->kind, Mxfp4Fault::overflow);
  EXPECT_EQ(fault->element, k + 5);

  codes[k + 5] = 3;  // 1.5 · 2^127: the largest finite input, accepted
  EXPECT_FALSE(dequant_mxfp4_rows(pack(codes), scales, k, 0, out).has_value());
  EXPECT_EQ(out[2 * (k + 5)] | out[2 * (k + 5) + 1] << 8, 0x7F40);
}

TEST(Mxfp4, BadArgumentsAreRejected) {
  std::vector<uint8_t> packed(32), scales(2), out(128);  // one row of 64 elements
  EXPECT_FALSE(dequant_mxfp4_rows(packed, scales, 64, 0, out).has_value());
  auto bad = [&](std::span<const uint8_t> p, std::span<const uint8_t> s, uint64_t k, std::span<uint8_t> o) {
    auto f = dequant_mxfp4_rows(p, s, k, 0, o);
    return f && f->kind == Mxfp4Fault::bad_arguments;
  };
  EXPECT_TRUE(bad(packed, scales, 0, out));
  EXPECT_TRUE(bad(packed, scales, 48, out));                                          // k not a multiple of 32
  EXPECT_TRUE(bad(std::span(packed).first(31), scales, 64, out));                      // partial row
  EXPECT_TRUE(bad(packed, std::span(scales).first(1), 64, out));                       // short scale row
  EXPECT_TRUE(bad(packed, scales, 64, std::span(out).first(126)));                     // short output
  std::vector<uint8_t> empty;
  EXPECT_FALSE(dequant_mxfp4_rows(empty, empty, 64, 0, std::span<uint8_t>()).has_value());  // zero rows
}

}  // namespace
}  // namespace ckpt

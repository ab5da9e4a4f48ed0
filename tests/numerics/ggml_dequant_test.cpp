// Hand-built ggml blocks per type: each expected value worked out from gguf.md §5 at
// chosen positions (field offsets, nibble order, 5th/6th/9th bits, signs, negative and
// subnormal scales, the one rounding of d·q − m). The whole-tensor check against ggml's
// own output is tests/formats/tensor_dump_test.cpp.
#include "numerics/ggml_dequant.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/ggml_types.h"
#include "numerics/ggml_tables.h"

namespace ckpt {
namespace {

// Both paths (the scalar reference and, where the CPU has it, AVX2) must give these values:
// the scalar result is returned after checking the other one equals it bit for bit.
std::vector<float> dq(int32_t type, const std::vector<uint8_t>& blocks) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  std::vector<float> out(blocks.size() / info->type_size * info->block_size), fast(out.size());
  std::string error;
  EXPECT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, type, blocks, out, error)) << error;
  EXPECT_TRUE(ggml_dequantize_isa(DequantIsa::avx2, type, blocks, fast, error)) << error;
  EXPECT_EQ(std::memcmp(out.data(), fast.data(), out.size() * sizeof(float)), 0) << ggml_type_info(type)->name;
  return out;
}

std::vector<uint8_t> block(int32_t type) { return std::vector<uint8_t>(ggml_type_info(type)->type_size, 0); }
void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
float gbyte(uint64_t word, int j) { return static_cast<float>((word >> (8 * j)) & 0xFF); }
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(GgmlDequant, Fp16IsExactIncludingSubnormals) {
  EXPECT_EQ(ggml_fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(ggml_fp16_to_f32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(ggml_fp16_to_f32(0x8200), -0x1p-15f);
  EXPECT_EQ(ggml_fp16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(ggml_fp16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(ggml_fp16_to_f32(0x3555), 0x1.554p-2f);
  EXPECT_EQ(ggml_fp16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(bits(ggml_fp16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(ggml_fp16_to_f32(0xFC00), -INFINITY);
  EXPECT_EQ(bits(ggml_fp16_to_f32(0x7E01)), 0x7FC02000u);  // NaN payload kept
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // every finite positive half round-trips through double
    const double exact = std::ldexp(h < 0x400 ? h : (h & 0x3FF) | 0x400, h < 0x400 ? -24 : static_cast<int>(h >> 10) - 25);
    ASSERT_EQ(static_cast<double>(ggml_fp16_to_f32(static_cast<uint16_t>(h))), exact) << h;
  }
}

// ggml's F16 to_float (libggml-base, the real_client_llama reference) quiets a signalling
// NaN: its conversion multiplies. The payload stays; the sign too.
TEST(GgmlDequant, ASignallingNanHalfIsQuietedAsGgmlDoes) {
  EXPECT_EQ(bits(ggml_fp16_to_f32(0x7C01)), 0x7FC02000u);
  EXPECT_EQ(bits(ggml_fp16_to_f32(0xFC7B)), 0xFFCF6000u);
  EXPECT_EQ(bits(ggml_fp16_to_f32(0x7D00)), 0x7FE00000u);
  EXPECT_EQ(bits(ggml_fp16_to_f32(0x7C00)), 0x7F800000u);  // infinity is no NaN: unchanged
}

TEST(GgmlDequant, Bf16AndE8m0) {
  EXPECT_EQ(ggml_bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(ggml_bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(ggml_bf16_to_f32(0x0001), std::bit_cast<float>(0x00010000u));
  EXPECT_EQ(ggml_e8m0_to_f32_half(0), 0x1p-128f);  // fp32 denormals
  EXPECT_EQ(ggml_e8m0_to_f32_half(1), 0x1p-127f);
  EXPECT_EQ(ggml_e8m0_to_f32_half(2), 0x1p-126f);
  EXPECT_EQ(ggml_e8m0_to_f32_half(128), 1.0f);
  EXPECT_EQ(ggml_e8m0_to_f32_half(255), 0x1p127f);  // no NaN path
}

TEST(GgmlDequant, FloatTypesConvertElementwise) {
  auto f32 = dq(kGgmlF32, {0x00, 0x00, 0x80, 0x3F, 0x01, 0x00, 0xC0, 0x7F});
  EXPECT_EQ(f32[0], 1.0f);
  EXPECT_EQ(bits(f32[1]), 0x7FC00001u);  // bits pass through, NaN payload included
  EXPECT_EQ(dq(kGgmlF16, {0x01, 0x00, 0x00, 0xC0}), (std::vector<float>{0x1p-24f, -2.0f}));
  EXPECT_EQ(dq(kGgmlBF16, {0x80, 0x3F, 0x40, 0xC0}), (std::vector<float>{1.0f, -3.0f}));
}

TEST(GgmlDequant, Q8_0WithSubnormalAndNegativeScale) {
  auto b = block(kGgmlQ8_0);
  put16(b, 0, 0x8001);  // d = −2^−24
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(j * 8 - 128);
  auto y = dq(kGgmlQ8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], -static_cast<float>(j * 8 - 128) * 0x1p-24f) << j;
}

TEST(GgmlDequant, Q4_0AndQ4_1HalvesAreLowThenHighNibbles) {
  auto b = block(kGgmlQ4_0);
  put16(b, 0, 0x3800);  // 0.5
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto y = dq(kGgmlQ4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f);
  }
  auto c = block(kGgmlQ4_1);
  put16(c, 0, 0x3800);
  put16(c, 2, 0xBC00);  // m = −1
  for (int j = 0; j < 16; ++j) c[4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto z = dq(kGgmlQ4_1, c);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(z[j], j * 0.5f - 1.0f);
    EXPECT_EQ(z[j + 16], (15 - j) * 0.5f - 1.0f);
  }
}

TEST(GgmlDequant, Q5FifthBitsComeFromQh) {
  auto b = block(kGgmlQ5_0);
  put16(b, 0, 0x3C00);
  put32(b, 2, 0x80000001u);  // element 0 and element 31 get +16
  for (int j = 0; j < 16; ++j) b[6 + j] = 0x53;  // low 3, high 5
  auto y = dq(kGgmlQ5_0, b);
  EXPECT_EQ(y[0], 3.0f);          // (3|16) − 16
  EXPECT_EQ(y[1], -13.0f);        // 3 − 16
  EXPECT_EQ(y[16], -11.0f);       // 5 − 16
  EXPECT_EQ(y[31], 5.0f);         // (5|16) − 16
  auto c = block(kGgmlQ5_1);
  put16(c, 0, 0x4000);            // d = 2
  put16(c, 2, 0x3400);            // m = 0.25
  put32(c, 4, 0x00010000u);       // element 16 gets +16
  for (int j = 0; j < 16; ++j) c[8 + j] = 0x21;
  auto z = dq(kGgmlQ5_1, c);
  EXPECT_EQ(z[0], 2.25f);
  EXPECT_EQ(z[16], 36.25f);       // (2|16)·2 + 0.25
  EXPECT_EQ(z[17], 4.25f);
}

TEST(GgmlDequant, Q8_1IgnoresItsSum) {
  auto b = block(kGgmlQ8_1);
  put16(b, 0, 0x3400);  // 0.25
  put16(b, 2, 0x7C00);  // s (even Inf) does not enter the values
  b[4] = 0x80;
  b[35] = 0x7F;
  auto y = dq(kGgmlQ8_1, b);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 31.75f);
}

TEST(GgmlDequant, Q4_KScalesMinsAndTheOneRounding) {
  auto b = block(kGgmlQ4_K);
  put16(b, 0, 0x3C00);  // d = 1
  put16(b, 2, 0x0001);  // dmin = 2^−24 (subnormal): d·q − m needs a rounding
  uint8_t* s = &b[4];
  s[0] = 1;     // sc0 = 1
  s[4] = 63;    // m0 = 63
  s[1] = 0xC2;  // sc1 = 2; top bits → sc5 high = 3
  s[5] = 0x47;  // m1 = 7; top bit → m5 high = 1
  s[9] = 0x5A;  // sc5 = 0xA | 3<<4 = 58, m5 = 5 | 1<<4 = 21
  s[8] = 0x34;  // sc4 = 4, m4 = 3
  for (int i = 0; i < 128; ++i) b[16 + i] = 0xF7;  // low 7, high 15
  auto y = dq(kGgmlQ4_K, b);
  EXPECT_EQ(y[0], static_cast<float>(7.0 - 63 * 0x1p-24));  // exact value, rounded once
  EXPECT_NE(y[0], 7.0f);
  EXPECT_EQ(y[32], static_cast<float>(30.0 - 7 * 0x1p-24));
  EXPECT_EQ(y[131], static_cast<float>(28.0 - 3 * 0x1p-24));
  EXPECT_EQ(y[165], static_cast<float>(58.0 * 15 - 21 * 0x1p-24));
}

TEST(GgmlDequant, Q5_K) {
  auto b = block(kGgmlQ5_K);
  put16(b, 0, 0x3C00);
  put16(b, 2, 0x3400);  // dmin 0.25
  uint8_t* s = &b[4];
  s[0] = 3, s[4] = 4, s[1] = 2, s[10] = 0x21;  // (3,4) (2,0) ... sub-block 6: (1,2)
  b[48 + 0] = 0x0F, b[16 + 0] = 0x01;          // element 0: 15 + 16
  b[48 + 1] = 0xA0, b[16 + 1] = 0x02;          // element 33: 10 + 16
  b[48 + 96 + 2] = 0x07, b[16 + 2] = 0x40;     // element 194: 7 + 16
  auto y = dq(kGgmlQ5_K, b);
  EXPECT_EQ(y[0], 3.0f * 31 - 1.0f);
  EXPECT_EQ(y[33], 2.0f * 26);
  EXPECT_EQ(y[194], 23.0f - 0.5f);
}

TEST(GgmlDequant, Q6_KScaleSignsAndTrailingD) {
  auto b = block(kGgmlQ6_K);
  put16(b, 208, 0x3800);  // d = 0.5, the LAST field
  auto* sc = reinterpret_cast<int8_t*>(&b[192]);
  sc[0] = -3, sc[2] = 5, sc[4] = 127, sc[6] = -128, sc[9] = 2;
  b[0] = 0x21, b[32] = 0x43, b[128] = 0xE4;  // ql / qh for l = 0 of half 0
  b[64 + 20] = 0x0F;                         // half 1, l = 20 (qh 0, scale index 8+1)
  auto y = dq(kGgmlQ6_K, b);
  EXPECT_EQ(y[0], 46.5f);     // 0.5·−3·(1 − 32)
  EXPECT_EQ(y[32], -32.5f);   // 0.5·5·((3|1<<4) − 32)
  EXPECT_EQ(y[64], 127.0f);   // 0.5·127·((2|2<<4) − 32)
  EXPECT_EQ(y[96], -1280.0f); // 0.5·−128·((4|3<<4) − 32)
  EXPECT_EQ(y[148], -17.0f);  // 0.5·2·(15 − 32)
}

TEST(GgmlDequant, Q2_KAndQ3_K) {
  auto b = block(kGgmlQ2_K);
  put16(b, 80, 0x3C00);  // d = 1
  put16(b, 82, 0x3800);  // dmin = 0.5
  b[0] = 0x21, b[2] = 0x13, b[15] = 0xF5;
  b[16 + 0] = 0xE4, b[16 + 53] = 0xC0;
  auto y = dq(kGgmlQ2_K, b);
  EXPECT_EQ(y[0], -1.0f);   // 1·0 − 2·0.5
  EXPECT_EQ(y[32], 2.5f);   // 3·1 − 0.5
  EXPECT_EQ(y[245], 7.5f);  // 5·3 − 7.5

  auto c = block(kGgmlQ3_K);
  put16(c, 108, 0x3C00);
  uint8_t* s = &c[96];
  s[0] = 0x05, s[8] = 0x02;  // scale 0 = (5 | 2<<4) − 32 = 5; scale 8 = −32
  s[7] = 0xA0, s[11] = 0xC0; // scale 15 = (10 | 3<<4) − 32 = 26
  c[0] = 0x01;               // hmask: element 0 has its high bit
  c[32 + 0] = 0x03, c[32 + 53] = 0x40;
  auto z = dq(kGgmlQ3_K, c);
  EXPECT_EQ(z[0], 15.0f);    // 5·3
  EXPECT_EQ(z[1], -20.0f);   // 5·(0 − 4)
  EXPECT_EQ(z[128], 128.0f); // −32·(0 − 4)
  EXPECT_EQ(z[245], -78.0f); // 26·(1 − 4)
}

TEST(GgmlDequant, Q8_KRoundsItsF32Product) {
  auto b = block(kGgmlQ8_K);
  put32(b, 0, bits(0.1f));
  b[4] = static_cast<uint8_t>(-3);
  auto y = dq(kGgmlQ8_K, b);
  EXPECT_EQ(y[0], 0.1f * -3.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(GgmlDequant, Iq4NlAndIq4XsWithNegativeScale) {
  auto b = block(kGgmlIQ4_NL);
  put16(b, 0, 0xC000);  // d = −2
  b[2] = 0xF0;
  auto y = dq(kGgmlIQ4_NL, b);
  EXPECT_EQ(y[0], 254.0f);
  EXPECT_EQ(y[16], -226.0f);
  EXPECT_EQ(y[1], 254.0f);  // qs 0 → kv[0] = −127
  auto c = block(kGgmlIQ4_XS);
  put16(c, 0, 0xBC00);      // d = −1
  put16(c, 2, 0x0002);      // scales_h: ib 0 high bits 2
  c[4] = 0x01;              // ib 0 low 1 → ls = 33 → dl = −1; ib 1 low 0 → dl = 32
  c[8] = 0xF0;
  c[8 + 112] = 0x08;
  auto z = dq(kGgmlIQ4_XS, c);
  EXPECT_EQ(z[0], 127.0f);
  EXPECT_EQ(z[16], -113.0f);
  EXPECT_EQ(z[224], 32.0f);     // ls 0: −1·(0 − 32)·kv[8] (= 1)
  EXPECT_EQ(z[32], 32.0f * -127);
}

TEST(GgmlDequant, Mxfp4DenormalAndHugeScales) {
  auto b = block(kGgmlMXFP4);
  b[0] = 0;
  b[1] = 0x7F, b[2] = 0x91;
  auto y = dq(kGgmlMXFP4, b);
  EXPECT_EQ(y[0], -12 * 0x1p-128f);
  EXPECT_EQ(y[16], 12 * 0x1p-128f);
  EXPECT_EQ(y[1], 0x1p-128f);  // an fp32 denormal, exact
  EXPECT_EQ(y[17], -0x1p-128f);
  b[0] = 255;
  b[1] = 0x22;
  auto z = dq(kGgmlMXFP4, b);
  EXPECT_EQ(z[0], INFINITY);  // 2·2^127 overflows in ggml too
}

TEST(GgmlDequant, Iq2XxsAndIq2XsSigns) {
  auto b = block(kGgmlIQ2_XXS);
  put16(b, 0, 0x3C00);
  b[2] = 5;  // ib 0, l 0 → grid 5
  b[3] = 200;
  put32(b, 6, 3u << 28 | 1u | 127u << 7);  // db = 0.875; l0 signs ksigns[1], l1 ksigns[127]
  auto y = dq(kGgmlIQ2_XXS, b);
  const float db = 0.875f;
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], db * gbyte(iq2xxs_grid[5], j) * ((ksigns_iq2xs[1] >> j) & 1 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[8 + j], -db * gbyte(iq2xxs_grid[200], j)) << j;  // ksigns[127] = 0xFF: all negative
  }
  EXPECT_LT(y[0], 0.0f);
  EXPECT_LT(y[7], 0.0f);
  EXPECT_GT(y[1], 0.0f);

  auto c = block(kGgmlIQ2_XS);
  put16(c, 0, 0x3C00);
  put16(c, 2, 300 | 3 << 9);
  put16(c, 6, 511 | 127 << 9);  // l = 2 uses db1
  c[66] = 0x52;                 // db0 = 2.5·0.25, db1 = 5.5·0.25
  auto z = dq(kGgmlIQ2_XS, c);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(z[j], 0.625f * gbyte(iq2xs_grid[300], j) * (j < 2 ? -1.f : 1.f)) << j;
    EXPECT_EQ(z[16 + j], -1.375f * gbyte(iq2xs_grid[511], j)) << j;
  }
}

TEST(GgmlDequant, Iq2SNinthAndTenthIndexBits) {
  auto b = block(kGgmlIQ2_S);
  put16(b, 0, 0x0200);  // d = 2^−15 (subnormal)
  b[2 + 7] = 0x12;      // ib 1, l 3
  b[66 + 1] = 0xC0;     // qh bits 6,7 → index bits 8,9: 0x312
  b[2 + 32 + 7] = 0xA5;
  b[74 + 1] = 0x70;     // db1 = d·7.5·0.25
  auto y = dq(kGgmlIQ2_S, b);
  const float db = 0x1p-15f * 7.5f * 0.25f;
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[32 + 24 + j], db * gbyte(iq2s_grid[0x312], j) * ((0xA5 >> j) & 1 ? -1.f : 1.f)) << j;
}

TEST(GgmlDequant, Iq3XxsAndIq3S) {
  auto b = block(kGgmlIQ3_XXS);
  put16(b, 0, 0x3C00);
  b[2 + 16 + 2] = 200, b[2 + 16 + 3] = 17;  // ib 2, l 1
  put32(b, 66 + 8, 5u << 28 | 3u << 7);     // db = 2.75; l 1 signs ksigns[3] = 3
  auto y = dq(kGgmlIQ3_XXS, b);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[72 + j], 2.75f * gbyte(iq3xxs_grid[200], j) * (j < 2 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[76 + j], 2.75f * gbyte(iq3xxs_grid[17], j)) << j;
  }

  auto c = block(kGgmlIQ3_S);
  put16(c, 0, 0x3C00);
  c[2 + 24 + 4] = 40, c[2 + 24 + 5] = 41;  // ib 3, l 2
  c[66 + 3] = 0x20;                        // qh bit 5: the second index gets bit 8
  c[74 + 14] = 0x81;
  c[106 + 1] = 0x70;                       // ib 3 (odd) → high nibble 7 → db = 15
  auto z = dq(kGgmlIQ3_S, c);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(z[96 + 16 + j], 15.0f * gbyte(iq3s_grid[40], j) * (j == 0 ? -1.f : 1.f)) << j;
    EXPECT_EQ(z[96 + 20 + j], 15.0f * gbyte(iq3s_grid[41 + 256], j) * (j == 3 ? -1.f : 1.f)) << j;
  }
  EXPECT_EQ(z[0], 1.0f);  // ib 0: index 0 = 0x01010101, scale nibble 0 → db = 1
}

TEST(GgmlDequant, UnsupportedTypesAndSizeMismatchAreErrors) {
  std::vector<float> out(256);
  std::vector<uint8_t> in(56);
  std::string error;
  EXPECT_FALSE(ggml_dequantize(kGgmlIQ1_M, in, out, error));
  EXPECT_EQ(error, "unsupported type IQ1_M (id 29)");
  EXPECT_FALSE(ggml_dequant_supported(kGgmlIQ1_S));
  EXPECT_FALSE(ggml_dequant_supported(kGgmlI32));
  EXPECT_FALSE(ggml_dequantize(4, in, out, error));
  EXPECT_EQ(error, "unsupported type Q4_2 (id 4, removed)");
  EXPECT_FALSE(ggml_dequantize(99, in, out, error));
  EXPECT_EQ(error, "unsupported type id 99 (not a ggml type)");
  std::vector<uint8_t> q80(35);
  std::vector<float> o32(32);
  EXPECT_FALSE(ggml_dequantize(kGgmlQ8_0, q80, o32, error));  // 35 bytes: not whole blocks
  q80.resize(34);
  std::vector<float> o33(33);
  EXPECT_FALSE(ggml_dequantize(kGgmlQ8_0, q80, o33, error));  // output of the wrong size
  EXPECT_TRUE(ggml_dequantize(kGgmlQ8_0, q80, o32, error));
  for (int32_t t : {kGgmlF32, kGgmlF16, kGgmlBF16, kGgmlQ8_0, kGgmlQ4_0, kGgmlQ4_K, kGgmlQ6_K, kGgmlIQ4_NL,
                    kGgmlIQ3_XXS, kGgmlIQ3_S, kGgmlIQ2_S, kGgmlMXFP4})
    EXPECT_TRUE(ggml_dequant_supported(t)) << t;
}

}  // namespace
}  // namespace ckpt

// The kernels' fast arithmetic (kernels/decode.h, gpu_compat.h), compiled for the host,
// against the element functions and plain C++ it replaces: exhaustive over codes and
// scales where the domain allows. The device runs the same text (Kernels/Backend.* checks
// the kernels themselves on the GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "decode.h"
#include "numerics/ggml_tables.h"
#include "numerics/int8_shift.h"

namespace ckpt::kern {
namespace {

// The emulation decodes INT8-shift words by a table of two-nibble results
// (backend_emulate.cpp); that is exact because each output byte depends on its own nibble
// only. Every 16-bit input, every shift.
TEST(KernelArith, Int8ShiftNibblesDecodeByteByByte) {
  for (unsigned shift = 0; shift < 4; ++shift)
    for (uint32_t x = 0; x < 65536; ++x) {
      const uint32_t split = (decode_nibbles4(x & 0xFF, shift) & 0xFFFFu) | ((decode_nibbles4(x >> 8, shift) & 0xFFFFu) << 16);
      ASSERT_EQ(decode_nibbles4(x, shift), split) << x << " shift " << shift;
    }
}

TEST(KernelArith, FastDivEqualsIntegerDivision) {
  std::mt19937_64 rng(3);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 2048; ++d) divisors.push_back(d);
  for (int k = 1; k < 31; ++k)
    for (int64_t delta : {-1, 0, 1}) divisors.push_back(static_cast<uint32_t>((int64_t{1} << k) + delta));
  for (int i = 0; i < 2000; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % 0x7FFFFFFFu));
  divisors.push_back(0x7FFFFFFFu);
  for (uint32_t d : divisors) {
    const FastDiv f(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 0x7FFFFFFFu, 0x7FFFFFFEu};
    for (uint32_t m : {2u, 3u, 1000u, 0x7FFFFFFFu / d}) {
      const uint64_t x = uint64_t{d} * m;
      for (uint64_t v : {x - 1, x, x + 1})
        if (v < 0x80000000u) ns.push_back(static_cast<uint32_t>(v));
    }
    for (int i = 0; i < 64; ++i) ns.push_back(static_cast<uint32_t>(rng() % 0x80000000u));
    for (uint32_t n : ns) {
      if (n >= 0x80000000u) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

TEST(KernelArith, FunnelShiftReadsAWordAtAnyByteOffset) {
  const uint32_t words[2] = {0x44332211u, 0x88776655u};
  EXPECT_EQ(funnel_shift_r(words[0], words[1], 0), 0x44332211u);
  EXPECT_EQ(funnel_shift_r(words[0], words[1], 8), 0x55443322u);
  EXPECT_EQ(funnel_shift_r(words[0], words[1], 16), 0x66554433u);
  EXPECT_EQ(funnel_shift_r(words[0], words[1], 24), 0x77665544u);
}

// Eight codes of a group from a cyclic list, starting at `first`.
void group_words(const std::vector<uint8_t>& codes, size_t first, uint32_t& lo, uint32_t& hi) {
  lo = hi = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t c = codes[(first + i) % codes.size()];
    (i < 4 ? lo : hi) |= c << (8 * (i % 4));
  }
}

// Every code at every position of a group times every E8M0 byte: groups of non-NaN codes
// take the fast path, groups holding a NaN code (or scale 0xFF) the element path; all must
// equal the element function.
TEST(KernelArith, Fp8E8m0GroupPathEqualsTheElementFunctionForEveryCodeAndScale) {
  std::vector<uint8_t> all(256), non_nan;
  for (int c = 0; c < 256; ++c) {
    all[c] = static_cast<uint8_t>(c);
    if ((c & 0x7F) != 0x7F) non_nan.push_back(static_cast<uint8_t>(c));
  }
  for (const auto* codes : {&non_nan, &all}) {
    for (int s = 0; s < 256; ++s) {
      for (size_t first = 0; first < codes->size(); ++first) {
        uint32_t lo, hi;
        group_words(*codes, first, lo, hi);
        const Bf16x8 r = fp8_group8_to_bf16(lo, hi, static_cast<uint8_t>(s));
        const uint32_t* out = r.w;
        for (int i = 0; i < 8; ++i) {
          const uint8_t code = (*codes)[(first + i) % codes->size()];
          ASSERT_EQ(static_cast<uint16_t>(out[i / 2] >> (16 * (i % 2))), fp8_e8m0_to_bf16(code, static_cast<uint8_t>(s)))
              << "code " << int(code) << " scale " << s << " position " << i;
        }
      }
    }
  }
}

// Every code times F32 scales of every kind: random normal, denormal, zero, huge
// (overflow), infinite and NaN.
TEST(KernelArith, Fp8F32GroupPathEqualsTheElementFunction) {
  std::vector<float> scales = {0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1.234p-135f, 0x1p-126f, 0x1.fffffcp-127f,
                               1.0f, -1.5f, 0x1p120f, 0x1.fffffep127f, -0x1.8p100f, INFINITY, -INFINITY, NAN};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &u, 4);
    scales.push_back(f);  // any bit pattern, NaNs included
  }
  std::vector<uint8_t> non_nan;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) non_nan.push_back(static_cast<uint8_t>(c));
  for (float s : scales) {
    for (size_t first = 0; first < non_nan.size(); first += 3) {
      uint32_t lo, hi;
      group_words(non_nan, first, lo, hi);
      const Bf16x8 r = fp8_group8_to_bf16(lo, hi, s);
      const uint32_t* out = r.w;
      for (int i = 0; i < 8; ++i) {
        const uint8_t code = non_nan[(first + i) % non_nan.size()];
        ASSERT_EQ(static_cast<uint16_t>(out[i / 2] >> (16 * (i % 2))), fp8_f32_to_bf16(code, s))
            << "code " << int(code) << " scale " << s;
      }
    }
  }
}

// Every ql byte with every qh byte in every quarter: y = dsc * (q - 32) with q the
// reference's 6-bit value.
TEST(KernelArith, Q6kFourValuesEqualTheReferenceFormula) {
  for (float dsc : {1.0f, -0.375f, 0x1p-20f, 65504.0f * -128.0f}) {
    for (unsigned quarter = 0; quarter < 4; ++quarter) {
      for (uint32_t ql = 0; ql < 256; ++ql) {
        for (uint32_t qh = 0; qh < 256; ++qh) {
          // Byte j of the words: ql rotated so four different bytes are decoded at once.
          const uint32_t qlw = ql | ((ql ^ 0x5A) << 8) | ((ql + 77) & 0xFF) << 16 | (255 - ql) << 24;
          const uint32_t qhw = qh | ((qh ^ 0xC3) << 8) | ((qh + 13) & 0xFF) << 16 | (255 - qh) << 24;
          float y[4];
          q6k_values4(qlw, qhw, quarter, dsc, y);
          for (int j = 0; j < 4; ++j) {
            const int lb = (qlw >> (8 * j)) & 0xFF, hb = (qhw >> (8 * j)) & 0xFF;
            const int q = ((quarter < 2 ? lb & 0xF : lb >> 4) | (((hb >> (2 * quarter)) & 3) << 4)) - 32;
            ASSERT_EQ(y[j], dsc * static_cast<float>(q)) << quarter << " " << ql << " " << qh << " " << j;
          }
        }
      }
    }
  }
}

// ggml's kvalues_mxfp4 table (the ggml MXFP4 kernel's) and decode_nibbles4 (the INT8-shift
// kernels') are the same E2M1 x 2 values, code for code, in every nibble position.
TEST(KernelArith, GgmlMxfp4TableIsTheE2m1NibbleDecode) {
  for (unsigned c = 0; c < 16; ++c) {
    EXPECT_EQ(kvalues_fp4[c], kE2m1LutX2[c]) << c;
    for (int pos = 0; pos < 4; ++pos)
      EXPECT_EQ(static_cast<int8_t>(decode_nibbles4(c << (4 * pos), 0) >> (8 * pos)), kvalues_fp4[c]) << c << " " << pos;
  }
}

// decode.h's X86Arith spells out what this (x86) host's own binary32 multiply and
// subtract return, NaN payloads, signs and invalid operations included: the CPU reference's
// arithmetic, which the kernels reproduce for blocks with a NaN or infinite scale.
TEST(KernelArith, X86ArithIsTheHostsMultiplyAndSubtract) {
#if defined(__x86_64__) || defined(__i386__)
  std::vector<float> v;
  for (uint32_t w : {0x00000000u, 0x80000000u, 0x3F800000u, 0xBF800000u, 0x00000001u, 0x7F7FFFFFu, 0x7F800000u,
                     0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFA5A5A5u, 0x7FFFFFFFu, 0x41200000u,
                     0xC2F60000u, 0x3E800000u})
    v.push_back(bits_to_float(w));
  for (float a : v) {
    for (float b : v) {
      volatile float va = a, vb = b;  // computed at run time by the host's SSE unit
      const float prod = va * vb, diff = va - vb;
      // Two NaN operands: x86 returns the first, but a compiler may swap a product's operands
      // (the reference never multiplies two NaNs; its subtraction of two keeps the order).
      if (!(f32_is_nan(a) && f32_is_nan(b))) {
        EXPECT_EQ(float_to_bits(X86Arith::mul(a, b)), float_to_bits(prod))
            << std::hex << float_to_bits(a) << " * " << float_to_bits(b);
      }
      EXPECT_EQ(float_to_bits(X86Arith::sub(a, b)), float_to_bits(diff)) << std::hex << float_to_bits(a) << " - " << float_to_bits(b);
    }
  }
#else
  GTEST_SKIP() << "not an x86 host";
#endif
}

}  // namespace
}  // namespace ckpt::kern

namespace ckpt::kern {
namespace {

// The device's digest (the per-element terms the kernel and the emulation sum) equals the
// CPU's block-wise one (numerics/f32_digest.cpp), at any first index.
TEST(KernelArith, DigestTermsSumToTheCpuDigest) {
  const DigestWeights w(0xABCDEF);
  const DigestTables t{w.inner_a.data(), w.inner_b.data(), w.outer_a.data(), w.outer_b.data()};
  std::mt19937 rng(5);
  std::vector<float> x(3 * kDigestSpan + 17);
  for (auto& v : x) v = bits_to_float(static_cast<uint32_t>(rng()));
  for (uint64_t first : {uint64_t{0}, uint64_t{4095}, kDigestMaxElems - x.size()}) {
    uint64_t a = 0, b = 0;
    for (uint64_t i = 0; i < x.size(); ++i) {
      const DigestTerms d = digest_terms(float_to_bits(x[i]), first + i, t);
      a += d.a;
      b += d.b;
    }
    const F32Digest cpu = f32_digest(x, first, w);
    EXPECT_EQ(a, cpu.a) << first;
    EXPECT_EQ(b, cpu.b) << first;
  }
}

}  // namespace
}  // namespace ckpt::kern

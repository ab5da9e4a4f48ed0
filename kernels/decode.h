// The decode arithmetic of every GPU kernel, written once as host+device functions so the
// same text runs in the CUDA/HIP kernels and, compiled by g++, in the host emulation that
// CI tests against libconvert's independent CPU reference (numerics/). Each function
// decodes a small fixed unit (one element, one 8-element group, one 32-bit MMA fragment
// word) so kernels map threads to units and stay coalesced.
//
// Exactness (docs/spec/): every product here is exact in binary32 (at most 23 significant
// bits) or is the spec's own single rounding, and kernels are built with FMA contraction
// off, so results are bit-identical to the CPU reference.
#pragma once

#include <cstdint>

#include "gpu_compat.h"
#include "numerics/f32_digest.h"

namespace ckpt::kern {

// ---- scalar conversions ------------------------------------------------------------

// IEEE binary16 -> binary32, exact (subnormals, infinities, NaN payloads); a NaN comes out
// quiet (bit 22 set), as ggml's conversion makes it.
CKPT_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return bits_to_float(sign | 0x7F800000u | (man << 13) | (man != 0 ? 0x00400000u : 0u));
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal: man * 2^-24, exact in binary32.
  const float mag = static_cast<float>(man) * bits_to_float(0x33800000u);  // 2^-24
  return sign ? -mag : mag;
}

CKPT_HD float bf16_to_f32(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// binary32 -> bfloat16, round to nearest even; NaN kept (forced quiet), overflow -> inf.
CKPT_HD uint16_t f32_to_bf16_rne(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// 2^e as binary32 for e in [-149, 127], exact (subnormal below -126).
CKPT_HD float exp2i(int e) {
  if (e >= -126) return bits_to_float(static_cast<uint32_t>(e + 127) << 23);
  return bits_to_float(1u << (e + 149));
}

// E4M3FN decode: e = 0 -> m * 2^-9, else (8 + m) * 2^(e - 10); 0x7F/0xFF are NaN. Built
// from bits and selects (no branches): the FP8 kernels are bound by these instructions.
CKPT_HD float e4m3_to_f32(uint8_t code) {
  const uint32_t e = (code >> 3) & 0xFu, m = code & 7u, sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t normal = sign | ((e + 120u) << 23) | (m << 20);
  const uint32_t subnormal = sign | float_to_bits(static_cast<float>(m) * 0.001953125f);  // m * 2^-9, exact
  const uint32_t bits = (code & 0x7F) == 0x7F ? (sign | 0x7FC00000u) : (e == 0 ? subnormal : normal);
  return bits_to_float(bits);
}

// FP8 x E8M0 block scale -> BF16 (deepseek-v4.md §7): the product of a 4-bit significand and
// a power of two is exact in binary32 (smallest 2^-136), then one RNE to BF16.
CKPT_HD_NOINLINE uint16_t fp8_e8m0_to_bf16_general(uint8_t code, uint8_t scale) {
  const uint16_t sign = (code & 0x80) ? 0x8000 : 0;
  if ((code & 0x7F) == 0x7F || scale == 0xFF) return sign | 0x7FC0;
  const float mag = mul_rn(e4m3_to_f32(code & 0x7F), exp2i(static_cast<int>(scale) - 127));
  return f32_to_bf16_rne(sign ? -mag : mag);
}

// The same in integer arithmetic whenever the result is a normal BF16: the E4M3 value as a
// BF16 exponent/mantissa pair (exact: 3 mantissa bits; a subnormal code m * 2^-9 normalizes
// by its highest set bit), the scale added to the exponent. Zero codes keep their sign.
// Results that would be BF16 subnormals or overflow, and NaN codes/scales, take the general
// path. No branch on the common path, so warps do not diverge on real weights.
CKPT_HD uint16_t fp8_e8m0_to_bf16(uint8_t code, uint8_t scale) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const int hb = m >= 4 ? 2 : (m >= 2 ? 1 : 0);                   // highest set bit of a subnormal m
  const int exp = e != 0 ? e + 120 : 118 + hb;                      // BF16 biased exponent of e4m3(code)
  const int man = e != 0 ? m << 4 : (m << (7 - hb)) & 0x7F;         // BF16 mantissa bits
  const int biased = exp + static_cast<int>(scale) - 127;
  const uint16_t sign = static_cast<uint16_t>((code & 0x80) << 8);
  if ((code & 0x7F) == 0 && scale != 0xFF) return sign;  // +-0 (a NaN scale stays NaN below)
  if ((code & 0x7F) != 0x7F && scale != 0xFF && biased >= 1 && biased <= 254) {
    return static_cast<uint16_t>(sign | (biased << 7) | man);
  }
  return fp8_e8m0_to_bf16_general(code, scale);
}

// FP8 x F32 multiplier -> BF16: DeepSeek-V3's one binary32 multiply, then RNE.
CKPT_HD uint16_t fp8_f32_to_bf16(uint8_t code, float scale) {
  return f32_to_bf16_rne(mul_rn(e4m3_to_f32(code), scale));
}

// ---- FP8 groups of eight codes sharing one scale (the FP8 kernels' unit) -----------------
//
// The element functions above cost ~25 integer instructions per code, which bounds the
// kernels below copy speed. A group whose codes are not NaN and whose scale is an ordinary
// number takes this path instead, bit-identical to them:
//   v = (mag * 2^120) * m, then RNE to BF16, then the code's sign bit XORed in,
// where mag is the code's 7 magnitude bits placed at bit 20 of a binary32 (exponent field
// = e, mantissa = m: the E4M3 value times 2^-120, a denormal for e = 0 subnormal codes, so
// mag * 2^120 is the exact E4M3 value) and m the scale as a binary32 (2^(s-127) for E8M0,
// exact down to 2^-127). E8M0: the product is exact (>= 2^-136, 4 significant bits), so one
// RNE to BF16 is the spec's result. F32: (|x| * m) rounds like x * m with the sign taken out,
// RNE being symmetric; a zero code gives the IEEE zero sign (code sign XOR scale sign).

// Byte i (0..3) of a little-endian word of codes: its magnitude bits at bit 20.
CKPT_HD float fp8_magnitude_x2m120(uint32_t codes, int i) {
  const uint32_t at20 = i < 3 ? codes << (20 - 8 * i) : codes >> 4;
  return bits_to_float(at20 & 0x07F00000u);
}

// Two binary32 -> a BF16 pair (lo in the low half), each rounded to nearest even. Not for
// NaN inputs (the callers route NaN to the element functions).
CKPT_HD uint32_t bf16x2_rne(float lo, float hi) {
#if CKPT_HAS_CVT_BF16X2
  return cvt_rn_bf16x2(lo, hi);
#else
  return static_cast<uint32_t>(f32_to_bf16_rne(lo)) | (static_cast<uint32_t>(f32_to_bf16_rne(hi)) << 16);
#endif
}

// Four codes (one little-endian word) times the finite multiplier m -> four BF16 as two
// words, the first code in the low half of out[0]. No code may be NaN.
CKPT_HD void fp8x4_times(uint32_t codes, float m, uint32_t* out) {
  float v[4];
  for (int i = 0; i < 4; ++i) v[i] = mul_rn(mul_rn(fp8_magnitude_x2m120(codes, i), 0x1p120f), m);
  const uint32_t signs01 = ((codes << 8) & 0x00008000u) | ((codes << 16) & 0x80000000u);
  const uint32_t signs23 = ((codes >> 8) & 0x00008000u) | (codes & 0x80000000u);
  out[0] = bf16x2_rne(v[0], v[1]) ^ signs01;
  out[1] = bf16x2_rne(v[2], v[3]) ^ signs23;
}

// True when a byte of either word is an E4M3 NaN code (0x7F or 0xFF).
CKPT_HD bool fp8_words_have_nan(uint32_t lo, uint32_t hi) {
  const uint32_t a = (lo & 0x7F7F7F7Fu) + 0x01010101u, b = (hi & 0x7F7F7F7Fu) + 0x01010101u;
  return ((a | b) & 0x80808080u) != 0;
}

// The group multiplier, or false for a scale that takes the element path: E8M0 0xFF (NaN)
// and F32 infinities and NaNs.
CKPT_HD bool fp8_group_multiplier(uint8_t e8m0, float& m) {
  if (e8m0 == 0xFF) return false;
  m = exp2i(static_cast<int>(e8m0) - 127);
  return true;
}
CKPT_HD bool fp8_group_multiplier(float f32, float& m) {
  if ((float_to_bits(f32) & 0x7F800000u) == 0x7F800000u) return false;
  m = f32;
  return true;
}

CKPT_HD uint16_t fp8_code_to_bf16(uint8_t code, uint8_t e8m0) { return fp8_e8m0_to_bf16(code, e8m0); }
CKPT_HD uint16_t fp8_code_to_bf16(uint8_t code, float f32) { return fp8_f32_to_bf16(code, f32); }

// Eight BF16 as four words, the first element in the low half of w[0]. Returned by value
// (never through a pointer) so the hot path keeps it in registers.
struct Bf16x8 {
  uint32_t w[4];
};

// The rare groups: element by element (kept out of line so the hot loop stays small).
template <class Scale>
CKPT_HD_NOINLINE Bf16x8 fp8_group8_elementwise(uint32_t lo, uint32_t hi, Scale scale) {
  Bf16x8 r{};
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = static_cast<uint8_t>((i < 4 ? lo : hi) >> (8 * (i % 4)));
    r.w[i / 2] |= static_cast<uint32_t>(fp8_code_to_bf16(code, scale)) << (16 * (i % 2));
  }
  return r;
}

// Eight FP8 codes (words lo, hi) sharing `scale` (uint8_t E8M0 or float F32) -> eight BF16,
// identical to the element functions for every code and scale.
template <class Scale>
CKPT_HD Bf16x8 fp8_group8_to_bf16(uint32_t lo, uint32_t hi, Scale scale) {
  float m = 0;
  if (!fp8_group_multiplier(scale, m) || fp8_words_have_nan(lo, hi)) return fp8_group8_elementwise(lo, hi, scale);
  Bf16x8 r;
  fp8x4_times(lo, m, r.w);
  fp8x4_times(hi, m, r.w + 2);
  return r;
}

// Doubled signed E2M1 values (code 8, -0, is 0): kE2m1LutX2 of numerics/int8_shift.h.
CKPT_HD int e2m1_x2(unsigned code) {
  const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int v = mag[code & 7];
  return (code & 8) ? -v : v;
}

// DeepSeek MXFP4 element -> f32: E2M1 x 2^(b - 127) = lut_x2[c] * 2^(b - 128)
// (mxfp4-int8-shift.md §1), code 8 being -0 (the sign is kept on zero, as E2M1 defines it).
// Exact for every byte b (the largest, 12 * 2^127, is finite in binary32).
CKPT_HD float mxfp4_to_f32(unsigned code, uint8_t scale) {
  const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const float v = mul_rn(static_cast<float>(mag[code & 7]), exp2i(static_cast<int>(scale) - 128));
  return (code & 8) ? -v : v;
}

// ---- INT8-shift decode (mxfp4-int8-shift.md §4-§5) ----------------------------------

// One lane's 32-bit word of a 128-byte mxfp4 tile holds 8 codes of one row; it decodes to
// the two int8x4 registers of the m16n8k32 B fragment: lo = k 4*tid..+3, hi = k 16+4*tid..+3.
// `shift` is the row's 2-bit shift for this 32-block.
struct Int8x8 {
  uint32_t lo, hi;
};

// Four nibbles (low nibble first) -> four int8 lut_x2[c] << shift, packed little-endian.
CKPT_HD uint32_t decode_nibbles4(uint32_t nibbles16, unsigned shift) {
#if defined(__CUDA_ARCH__)
  // The spec's in-register decode: magnitude bytes by byte permute from the constant words
  // 0x03020100 / 0x0c080604 indexed by the low 3 bits; shift (no carry, <= 96); negate the
  // bytes whose sign bit is set as (0x80808080 - m) ^ 0x80808080.
  uint32_t idx = 0, sign = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t c = (nibbles16 >> (4 * i)) & 0xF;
    idx |= (c & 7) << (4 * i);
    sign |= ((c >> 3) & 1) ? (0xFFu << (8 * i)) : 0u;
  }
  uint32_t mag = __byte_perm(0x03020100u, 0x0c080604u, idx) << shift;
  const uint32_t neg = (0x80808080u - mag) ^ 0x80808080u;
  return (mag & ~sign) | (neg & sign);
#else
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const int v = e2m1_x2((nibbles16 >> (4 * i)) & 0xF) * (1 << shift);
    out |= (static_cast<uint32_t>(v) & 0xFFu) << (8 * i);
  }
  return out;
#endif
}

CKPT_HD Int8x8 decode_int8_shift_word(uint32_t word, unsigned shift) {
  // Bytes 0,1 carry k 4tid..4tid+3 (two nibbles each, low first), bytes 2,3 carry k + 16.
  return Int8x8{decode_nibbles4(word & 0xFFFFu, shift), decode_nibbles4(word >> 16, shift)};
}

// Row n's shift for 32-block kb from the shift2 slab [S, G, 8].
CKPT_HD unsigned int8_shift_of(const uint8_t* shift2, uint64_t groups, uint64_t n, uint64_t kb) {
  return (shift2[((kb / 4) * groups + n / 8) * 8 + n % 8] >> (2 * (kb % 4))) & 3u;
}

// ---- ggml blocks (gguf.md §5) ------------------------------------------------------

enum GgmlGpuType : int32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kIQ3_XXS = 18,
  kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kBF16 = 30, kMXFP4 = 39,
};

struct GgmlBlockShape {
  uint32_t elems = 0, bytes = 0;  // 0: not supported by the kernels
};

CKPT_HD constexpr GgmlBlockShape ggml_gpu_block(int32_t type) {
  switch (type) {
    case kF32: return {1, 4};
    case kF16: return {1, 2};
    case kBF16: return {1, 2};
    case kQ4_0: return {32, 18};
    case kQ8_0: return {32, 34};
    case kIQ4_NL: return {32, 18};
    case kMXFP4: return {32, 17};
    case kQ4_K: return {256, 144};
    case kQ6_K: return {256, 210};
    case kIQ3_XXS: return {256, 98};
    case kIQ3_S: return {256, 110};
    case kIQ2_S: return {256, 82};
    default: return {0, 0};
  }
}

// Elements one decode unit produces: 8 (a group of a block) or 1 (plain types).
CKPT_HD constexpr uint32_t ggml_gpu_unit(int32_t type) { return ggml_gpu_block(type).elems >= 8 ? 8 : 1; }

// ggml's lookup tables, wherever they live (device global memory or host arrays).
struct GgmlTables {
  const uint8_t* ksigns_iq2xs;  // 128
  const uint32_t* iq3xxs_grid;  // 256
  const uint32_t* iq3s_grid;    // 512
  const uint64_t* iq2s_grid;    // 1024
  const int8_t* kvalues_iq4nl;  // 16
  const int8_t* kvalues_fp4;    // 16
};

CKPT_HD uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
CKPT_HD uint32_t ld32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// ---- NaN and infinite block scales: the CPU reference's bits ------------------------
//
// The reference (numerics/ggml_dequant, x86 SSE/AVX) returns for a product or difference
// with a NaN operand that operand quieted (bit 22 set; the first operand when both are),
// for an invalid operation (inf x 0, inf - inf) the x86 default NaN 0xFFC00000, and the
// i-quant sign as a flip of the sign bit (-v). An NVIDIA GPU returns its canonical NaN
// 0x7FFFFFFF in all these cases (and x (-1) keeps it). So the kernels never let the
// hardware make a NaN: a block whose f16 scale(s) are finite takes FiniteArith (plain IEEE
// multiplies: a finite f16 scale times the formats' small integers is neither NaN nor
// infinite), any other block X86Arith, which spells the reference's NaN results in bits.
// The sign of the i-quants is an XOR of the sign bit in both.
CKPT_HD bool f32_is_nan(float f) { return (float_to_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }
CKPT_HD bool f32_is_inf(float f) { return (float_to_bits(f) & 0x7FFFFFFFu) == 0x7F800000u; }
CKPT_HD bool f16_is_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }
constexpr uint32_t kX86DefaultNan = 0xFFC00000u;

struct FiniteArith {
  static CKPT_HD float mul(float a, float b) { return mul_rn(a, b); }
  static CKPT_HD float sub(float a, float b) { return sub_rn(a, b); }
};
struct X86Arith {
  static CKPT_HD float nan_of(float a, float b) {
    return bits_to_float((f32_is_nan(a) ? float_to_bits(a) : float_to_bits(b)) | 0x00400000u);
  }
  static CKPT_HD float mul(float a, float b) {
    if (f32_is_nan(a) || f32_is_nan(b)) return nan_of(a, b);
    if ((f32_is_inf(a) && b == 0.0f) || (f32_is_inf(b) && a == 0.0f)) return bits_to_float(kX86DefaultNan);
    return mul_rn(a, b);
  }
  static CKPT_HD float sub(float a, float b) {
    if (f32_is_nan(a) || f32_is_nan(b)) return nan_of(a, b);
    if (f32_is_inf(a) && float_to_bits(a) == float_to_bits(b)) return bits_to_float(kX86DefaultNan);  // inf - inf
    return sub_rn(a, b);
  }
};

// v with its sign bit flipped where bit j of `bits` is 1 (the reference's -v).
CKPT_HD float negate_if(float v, unsigned bits, int j) {
  return bits_to_float(float_to_bits(v) ^ (((bits >> j) & 1u) << 31));
}

// Q4_K's 6-bit sub-block scale and min (get_scale_min_k4).
CKPT_HD void q4k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q6_K, four consecutive elements l0..l0+3 (l0 % 4 == 0) of quarter `quarter` of a half:
// `ql` is the little-endian word of ql bytes [l0, l0+4) of that quarter's ql row (ql + 32
// for quarters 1 and 3), `qh` the word of qh bytes [l0, l0+4), dsc = d * sc[is + 2*quarter].
// Four 6-bit values at once in the bytes of one word, each y = dsc * (q - 32), the
// reference's (d * sc) * q; q - 32 is made exact by the 2^23 trick (no int->float convert).
template <class A = FiniteArith>
CKPT_HD void q6k_values4(uint32_t ql, uint32_t qh, unsigned quarter, float dsc, float* y) {
  const uint32_t low4 = (ql >> (4 * (quarter >> 1))) & 0x0F0F0F0Fu;
  const uint32_t high2 = ((qh >> (2 * quarter)) & 0x03030303u) << 4;
  const uint32_t q = low4 | high2;  // bytes: the 6-bit values, 0..63
  for (int j = 0; j < 4; ++j) {
    const float v = bits_to_float(0x4B000000u | ((q >> (8 * j)) & 0xFFu)) - 8388640.0f;  // (2^23 + q) - (2^23 + 32)
    y[j] = A::mul(dsc, v);
  }
}

// Decodes unit `u` of block `b` (8 elements u*8..u*8+7 for block types, element 0 for
// plain types) into y with the arithmetic A. Precondition: ggml_gpu_block(type).elems != 0.
template <class A>
CKPT_HD void ggml_decode_unit_as(int32_t type, const uint8_t* b, unsigned u, float* y, const GgmlTables& t) {
  switch (type) {
    case kF32: y[0] = bits_to_float(ld32(b)); return;
    case kF16: y[0] = f16_to_f32(ld16(b)); return;
    case kBF16: y[0] = bf16_to_f32(ld16(b)); return;
    case kQ8_0: {
      const float d = f16_to_f32(ld16(b));
      for (int j = 0; j < 8; ++j) y[j] = A::mul(static_cast<float>(static_cast<int8_t>(b[2 + 8 * u + j])), d);
      return;
    }
    case kMXFP4: {
      // 32 elements: bytes qs[0..15]; low nibbles are elements 0..15, high nibbles 16..31.
      // By table (kvalues_fp4): decoding four nibbles at a time in registers
      // (decode_nibbles4) measured 0.56x of a device copy on an H200 against 0.80.
      const uint8_t* qs = b + 1;
      const unsigned first = (u & 1) * 8, high = u >> 1;
      const float d = exp2i(static_cast<int>(b[0]) - 128);  // E8M0_TO_FP32_HALF; e < 2: binary32 subnormals
      for (int j = 0; j < 8; ++j) {
        const unsigned nib = high ? (qs[first + j] >> 4) : (qs[first + j] & 0xF);
        y[j] = A::mul(d, static_cast<float>(t.kvalues_fp4[nib]));
      }
      return;
    }
    case kQ4_0:
    case kIQ4_NL: {
      // 32 elements: bytes qs[0..15]; low nibbles are elements 0..15, high nibbles 16..31.
      const uint8_t* qs = b + 2;
      const unsigned first = (u & 1) * 8, high = u >> 1;
      for (int j = 0; j < 8; ++j) {
        const unsigned nib = high ? (qs[first + j] >> 4) : (qs[first + j] & 0xF);
        if (type == kQ4_0) {
          y[j] = A::mul(static_cast<float>(static_cast<int>(nib) - 8), f16_to_f32(ld16(b)));
        } else {
          y[j] = A::mul(f16_to_f32(ld16(b)), static_cast<float>(t.kvalues_iq4nl[nib]));
        }
      }
      return;
    }
    case kQ4_K: {
      const float d = f16_to_f32(ld16(b)), dmin = f16_to_f32(ld16(b + 2));
      const unsigned c = u / 8, e = (u % 8) * 8;  // 64-element chunk, offset inside it
      const bool high = e >= 32;
      int sc = 0, m = 0;
      q4k_scale_min(b + 4, static_cast<int>(2 * c + (high ? 1 : 0)), sc, m);
      const float d1 = A::mul(d, static_cast<float>(sc)), m1 = A::mul(dmin, static_cast<float>(m));
      const uint8_t* q = b + 16 + 32 * c + (e % 32);
      for (int j = 0; j < 8; ++j) {
        const int v = high ? (q[j] >> 4) : (q[j] & 0xF);
        y[j] = A::sub(A::mul(d1, static_cast<float>(v)), m1);  // the format's one rounding
      }
      return;
    }
    case kQ6_K: {
      const float d = f16_to_f32(ld16(b + 208));
      const unsigned half = u / 16, r = (u % 16) * 8, quarter = r / 32, l0 = r % 32;
      const uint8_t* ql = b + 64 * half + 32 * (quarter & 1);
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t sc = static_cast<int8_t>(b[192 + 8 * half + l0 / 16 + 2 * quarter]);
      const float dsc = A::mul(d, static_cast<float>(sc));
      q6k_values4<A>(ld32(ql + l0), ld32(qh + l0), quarter, dsc, y);
      q6k_values4<A>(ld32(ql + l0 + 4), ld32(qh + l0 + 4), quarter, dsc, y + 4);
      return;
    }
    case kIQ3_XXS: {
      const float d = f16_to_f32(ld16(b));
      const uint8_t* qs = b + 2;
      const unsigned ib = u / 4, l = u % 4;
      const uint32_t aux = ld32(qs + 64 + 4 * ib);
      const float db = A::mul(A::mul(d, 0.5f + static_cast<float>(aux >> 28)), 0.5f);
      const unsigned signs = t.ksigns_iq2xs[(aux >> (7 * l)) & 127];
      const uint32_t g1 = t.iq3xxs_grid[qs[8 * ib + 2 * l]], g2 = t.iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
      for (int j = 0; j < 4; ++j) {
        y[j] = negate_if(A::mul(db, static_cast<float>((g1 >> (8 * j)) & 0xFF)), signs, j);
        y[j + 4] = negate_if(A::mul(db, static_cast<float>((g2 >> (8 * j)) & 0xFF)), signs, j + 4);
      }
      return;
    }
    case kIQ3_S: {
      const float d = f16_to_f32(ld16(b));
      const uint8_t* qs = b + 2;
      const uint8_t* qh = b + 66;
      const uint8_t* signs = b + 74;
      const uint8_t* scales = b + 106;
      const unsigned ib = u / 4, l = u % 4;
      const unsigned nib = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = A::mul(d, static_cast<float>(1 + 2 * nib));
      const unsigned i1 = qs[8 * ib + 2 * l] | ((static_cast<unsigned>(qh[ib]) << (8 - 2 * l)) & 256);
      const unsigned i2 = qs[8 * ib + 2 * l + 1] | ((static_cast<unsigned>(qh[ib]) << (7 - 2 * l)) & 256);
      const unsigned s = signs[4 * ib + l];
      const uint32_t g1 = t.iq3s_grid[i1], g2 = t.iq3s_grid[i2];
      for (int j = 0; j < 4; ++j) {
        y[j] = negate_if(A::mul(db, static_cast<float>((g1 >> (8 * j)) & 0xFF)), s, j);
        y[j + 4] = negate_if(A::mul(db, static_cast<float>((g2 >> (8 * j)) & 0xFF)), s, j + 4);
      }
      return;
    }
    case kIQ2_S: {
      const float d = f16_to_f32(ld16(b));
      const uint8_t* qs = b + 2;
      const uint8_t* qh = b + 66;
      const uint8_t* scales = b + 74;
      const unsigned ib = u / 4, l = u % 4;
      const unsigned nib = (l < 2) ? (scales[ib] & 0xF) : (scales[ib] >> 4);
      const float db = A::mul(A::mul(d, 0.5f + static_cast<float>(nib)), 0.25f);
      const unsigned idx = qs[4 * ib + l] | ((static_cast<unsigned>(qh[ib]) << (8 - 2 * l)) & 0x300);
      const uint64_t g = t.iq2s_grid[idx];
      const unsigned s = qs[32 + 4 * ib + l];
      for (int j = 0; j < 8; ++j) {
        y[j] = negate_if(A::mul(db, static_cast<float>((g >> (8 * j)) & 0xFF)), s, j);
      }
      return;
    }
    default: return;
  }
}

// True when every f16 scale of the block is finite (types without one: always).
CKPT_HD bool ggml_block_scales_finite(int32_t type, const uint8_t* b) {
  switch (type) {
    case kQ8_0: case kQ4_0: case kIQ4_NL: case kIQ3_XXS: case kIQ3_S: case kIQ2_S: return f16_is_finite(ld16(b));
    case kQ4_K: return f16_is_finite(ld16(b)) && f16_is_finite(ld16(b + 2));
    case kQ6_K: return f16_is_finite(ld16(b + 208));
    default: return true;  // F32, F16, BF16: no arithmetic on NaN; MXFP4: an E8M0 power of two, always finite
  }
}

// Unit `u` of block `b` as the CPU reference computes it, NaN and infinite scales included.
// (With `type` a constant, as in the per-type kernels, the switches fold away.)
CKPT_HD void ggml_decode_unit(int32_t type, const uint8_t* b, unsigned u, float* y, const GgmlTables& t) {
  if (ggml_block_scales_finite(type, b)) {
    ggml_decode_unit_as<FiniteArith>(type, b, u, y, t);
  } else {
    ggml_decode_unit_as<X86Arith>(type, b, u, y, t);
  }
}

// One element's terms of the verify digest (numerics/f32_digest.h defines it; the CPU sums
// the same terms block by block): bits * inner[i mod span] * outer[i div span], mod 2^64.
struct DigestTables {
  const uint32_t *inner_a, *inner_b;
  const uint64_t *outer_a, *outer_b;
};
struct DigestTerms {
  uint64_t a, b;
};
CKPT_HD DigestTerms digest_terms(uint32_t bits, uint64_t i, const DigestTables& t) {
  const uint64_t j = i % kDigestSpan, block = i / kDigestSpan;
  return DigestTerms{bits * (t.inner_a[j] * t.outer_a[block]), bits * (t.inner_b[j] * t.outer_b[block])};
}

}  // namespace ckpt::kern

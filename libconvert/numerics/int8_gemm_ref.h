// CPU reference of the INT8-shift runtime math (docs/spec/mxfp4-int8-shift.md §5-§6): per-token
// activation quantization, decode of the remapped weight, and the INT8 GEMM with its FP32
// epilogue and BF16 rounding. Bit-exact with the GPU path by construction (same three roundings
// in the same order), so tests and the GPU runner can compare outputs byte for byte.
//
// Every function is pure and never throws; a size mismatch returns false and writes nothing.
//
// The decode, the GEMM and the double-precision product have AVX2 loops (int8_gemm_avx2.cpp) picked at
// run time by the process's one ISA choice, ggml_dequant_isa() (numerics/ggml_dequant.h:
// AVX2 when the CPU has it, CKPT_DEQUANT_ISA=scalar forces the scalar loops); both ISAs give
// the same bits (tests/numerics/int8_gemm_ref_test.cpp, Int8GemmIsa.*).
#pragma once

#include <cstdint>
#include <span>

#include "numerics/f32_digest.h"
#include "numerics/ggml_dequant.h"
#include "numerics/int8_shift.h"

namespace ckpt {

// Per-token activation quantization of x [m, k] (fp32):
//   optional clamp to [−clamp_abs, clamp_abs] (clamp_abs <= 0: off);
//   a_scale[r] = max|x[r]| / 127 (fp32 division; NaNs are skipped by the max); an all-zero row
//   gets 1.0; a_i8[r][c] = clamp(rne(x / a_scale[r]), −127, 127) (fp32 division, ties to even).
// A NaN quotient quantizes to 0 (cvt.rni.s32.f32 of NaN is 0 on the GPU). Needs x.size() ==
// a_i8.size() == m·k and a_scale.size() == m.
bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a_i8,
                          std::span<float> a_scale, float clamp_abs = 0);

// Decodes one expert's remapped weight (its mxfp4 and shift2 slabs, spec §4) to
// q[n][k] = lut_x2[code] << shift2, row-major [p.rows, p.k]. False when p is invalid or a span
// has the wrong size.
bool decode_int8_shift(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                       const RemapParams& p, std::span<int8_t> q_out);
bool decode_int8_shift_isa(DequantIsa isa, std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                           const RemapParams& p, std::span<int8_t> q_out);

// int8_digest (f32_digest.h) of that decode, q's words numbered from 0, computed piece by
// piece in cache without the whole q: what the verifier compares with a device's digest of
// its decode. False as decode_int8_shift is, or when q has more than kDigestMaxElems words.
bool int8_shift_digest(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab, const RemapParams& p,
                       const DigestWeights& w, F32Digest& out);
bool int8_shift_digest_isa(DequantIsa isa, std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                           const RemapParams& p, const DigestWeights& w, F32Digest& out);

// acc[r][c] = Σ_k a[r][k]·q[c][k] in int32 (a [m, k], q [n, k]);
// out_bf16[r][c] = bf16_rne((float(acc) · a_scale[r]) · channel_scale[c]) in fp32, left to right.
// acc_out may be empty (not wanted), else m·n. False on a size mismatch or when k is so large
// that the int32 accumulator could overflow (k > INT32_MAX / 128²).
bool int8_gemm_bf16(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const int8_t> q,
                    std::span<const float> channel_scale, uint64_t m, uint64_t n, uint64_t k,
                    std::span<int32_t> acc_out, std::span<uint16_t> out_bf16);
// The same on an explicit ISA (clamped to what the CPU runs): the tests compare the two.
bool int8_gemm_bf16_isa(DequantIsa isa, std::span<const int8_t> a, std::span<const float> a_scale,
                        std::span<const int8_t> q, std::span<const float> channel_scale, uint64_t m, uint64_t n,
                        uint64_t k, std::span<int32_t> acc_out, std::span<uint16_t> out_bf16);

// y[r][c] = Σ_i x[r][i]·w[c][i] in double (x [m, k], w [n, k] fp32; every product exact),
// summed in one fixed order, whatever the ISA or the caller's split of rows and columns:
// four lanes, lane j (0..3) the terms i ≡ j (mod 4) added in rising i to 0.0 (each product
// exact in double, one IEEE add each: a fused multiply-add, as the AVX2 loop uses, gives the
// same bits), then y = (lane0 + lane1) + (lane2 + lane3).
// False on a size mismatch.
bool gemm_f64(std::span<const float> x, std::span<const float> w, uint64_t m, uint64_t n, uint64_t k,
              std::span<double> y);
bool gemm_f64_isa(DequantIsa isa, std::span<const float> x, std::span<const float> w, uint64_t m, uint64_t n,
                  uint64_t k, std::span<double> y);

}  // namespace ckpt

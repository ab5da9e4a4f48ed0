// FP8 (E4M3FN) → BF16 with the exact arithmetic of docs/spec/deepseek-v4.md §7.
//
// Two scale kinds exist in the wild:
//   * E8M0 (official V4 `.scale`): w = e4m3(code) · 2^(b−127), rounded once (RNE) to BF16.
//     The product is exact in BF16 except for BF16-subnormal underflow (b ≤ 2) and
//     overflow to ±inf (b ≥ 247).
//   * F32 (V3 `.weight_scale_inv`): DeepSeek-V3's kernel, bf16_rne(fp32(x) ⊗ s) with ⊗ ONE
//     binary32 multiply. Its double rounding is kept on purpose to match DeepSeek bit for bit.
//
// Every function here is pure and allocation-free; none throws.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace ckpt {

// E4M3FN decode, exact: e = 0 → m·2^−9 (±0 kept), else (8+m)·2^(e−10); 0x7F/0xFF → quiet NaN.
float e4m3_to_float(uint8_t code);
// 0x7F and 0xFF are E4M3FN's only NaNs (it has no infinity).
inline bool e4m3_is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }
// E8M0 0xFF is NaN/reserved; every other byte b is 2^(b−127).
inline bool e8m0_is_nan(uint8_t scale) { return scale == 0xFF; }
// E8M0 decode, exact: 2^(b−127) (b = 0 is the fp32 subnormal 2^−127); 0xFF → quiet NaN.
// The one E8M0 decoder of the library (dump, hash --dequant, diff, MXFP4 values).
float e8m0_to_float(uint8_t b);

// e4m3(code) · scale as ONE binary32 multiply: the f32 value behind every FP8 × scale
// decode (scale = e8m0_to_float(b) for an E8M0 scale, where the product is exact, or
// the F32/BF16/F16 multiplier widened to f32). bf16_from_float_rne of it is what convert
// writes. NaN codes give NaN; callers check e4m3_is_nan first.
inline float fp8_scaled_f32(uint8_t code, float scale);

// FP32 → BF16, round to nearest even; NaN stays NaN (forced quiet), overflow becomes ±inf.
uint16_t bf16_from_float_rne(float f);

// The exact product e4m3(code)·2^(scale−127) rounded once (RNE) to BF16.
// Precondition: !e4m3_is_nan(code) && !e8m0_is_nan(scale) (else the result is a NaN).
uint16_t fp8_e8m0_product_bf16(uint8_t code, uint8_t scale);

// DeepSeek-V3's fp8_cast_bf16: bf16_rne(fp32(x) * scale), one binary32 multiply.
uint16_t fp8_f32_product_bf16(uint8_t code, float scale);

inline float fp8_scaled_f32(uint8_t code, float scale) { return e4m3_to_float(code) * scale; }

// A 2-D FP8 weight [rows, cols] quantized in blocks [block_rows, block_cols]. Its scale
// grid is row-major [ceil(rows/block_rows), ceil(cols/block_cols)]; element (i, j) uses
// scale[i/block_rows][j/block_cols], so partial last blocks share their block's scale.
// The block size comes from config (weight_block_size), never from rows / scale_rows.
struct Fp8Grid {
  uint64_t rows = 0, cols = 0, block_rows = 0, block_cols = 0;
};
uint64_t fp8_scale_rows(const Fp8Grid& g);  // ceil(rows / block_rows); 0 when block_rows == 0
uint64_t fp8_scale_cols(const Fp8Grid& g);  // ceil(cols / block_cols); 0 when block_cols == 0

struct Fp8Fault {
  enum Kind { weight_nan, scale_nan, overflow, bad_arguments };
  // weight_nan / scale_nan / overflow: row-major index in the whole weight of the first
  // element that cannot be converted (for scale_nan, the first element that uses the bad
  // scale; for overflow, the first whose product is beyond BF16's largest finite value,
  // which would be written as ±inf). bad_arguments: 0.
  uint64_t element = 0;
  Kind kind = bad_arguments;
};
const char* fp8_fault_name(Fp8Fault::Kind k);  // "weight_nan", "scale_nan", "overflow", "bad_arguments"

// Converts whole rows [row_begin, row_begin + weight_rows.size()/cols) of the weight to BF16
// (little-endian, 2 bytes per element, same order). `scale_grid_*` is the WHOLE scale grid.
// Returns std::nullopt on success. Otherwise returns the first fault in row-major order
// (at an element whose scale and code are both NaN, scale_nan) and leaves `out` untouched;
// a product that overflows BF16 is a fault too (the conversion never writes ±inf, as the
// MXFP4 path never does; real weights never reach it: E8M0 needs b >= 247);
// bad_arguments when: block_rows or block_cols is 0; weight_rows.size() is not a multiple of
// cols (cols == 0 requires it empty); the rows run past g.rows; out.size() != 2 ×
// weight_rows.size(); or the scale grid does not hold exactly scale_rows × scale_cols entries.
// `out` must not overlap the inputs.
std::optional<Fp8Fault> dequant_fp8_rows_e8m0(std::span<const uint8_t> weight_rows, uint64_t row_begin,
                                              const Fp8Grid& g, std::span<const uint8_t> scale_grid_e8m0,
                                              std::span<uint8_t> out_bf16_le);
// Same with F32 scales; a NaN or ±inf scale is a scale_nan fault.
std::optional<Fp8Fault> dequant_fp8_rows_f32(std::span<const uint8_t> weight_rows, uint64_t row_begin,
                                             const Fp8Grid& g, std::span<const float> scale_grid_f32,
                                             std::span<uint8_t> out_bf16_le);

}  // namespace ckpt

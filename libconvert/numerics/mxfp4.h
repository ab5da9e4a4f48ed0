// MXFP4 (E2M1 codes, one UE8M0 scale per 32 elements) → BF16, exactly
// (docs/spec/mxfp4-int8-shift.md §1, deepseek-v4.md §7.2 last line).
//
// w = e2m1(c) · 2^(b−127) = lut_x2[c] · 2^(b−128). Every E2M1 magnitude has at most two
// significant bits, so w is a BF16 value whenever it is finite in BF16: the smallest,
// 0.5 · 2^−127 = 2^−128, is the BF16 subnormal 32 · 2^−133, and nothing ever rounds. The
// only inputs without an exact BF16 result are
//   * E8M0 0xFF (NaN/reserved): a fault, never written;
//   * b = 254 with |e2m1| ≥ 2 and b = 253 with |e2m1| ≥ 4: |w| ≥ 2^128, beyond BF16's
//     largest finite value (255 · 2^120 ≈ 3.39e38). Rounding would give ±inf, silently
//     wrong output, so it is a fault (overflow) naming the element.
// Code 8 (−0) gives BF16 −0 (0x8000), as transformers' Fp8Dequantize and torch do.
//
// Every function here is pure, thread-safe and allocation-free; none throws.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ckpt {

// e2m1(c) as a float (exact), c in 0..15; code 8 is −0.0.
float e2m1_to_float(uint8_t code);

// True when e2m1(code) · 2^(scale−127) is beyond BF16's finite range (scale 253 or 254 with a
// large magnitude). Precondition: scale != 0xFF.
bool mxfp4_bf16_overflows(uint8_t code, uint8_t scale);

// The exact BF16 bits of e2m1(code) · 2^(scale−127). Preconditions: code < 16, scale != 0xFF
// and !mxfp4_bf16_overflows(code, scale); otherwise the result is a quiet NaN (0x7FC0 | sign).
uint16_t mxfp4_bf16(uint8_t code, uint8_t scale);

struct Mxfp4Fault {
  enum Kind { scale_nan, overflow, bad_arguments };
  Kind kind = bad_arguments;
  // Row-major element index in the whole [rows, k] weight (scale_nan: the first element of
  // the block whose scale is 0xFF; overflow: the first element that overflows). 0 for
  // bad_arguments.
  uint64_t element = 0;
};
const char* mxfp4_fault_name(Mxfp4Fault::Kind k);  // "scale_nan", "overflow", "bad_arguments"

// Converts whole rows [row_begin, row_begin + n) of an MXFP4 weight with k elements per row:
// `packed` holds n rows of k/2 bytes (byte j: element 2j in the low nibble, 2j+1 in the high
// one), `scales` the same n rows of k/32 E8M0 bytes, `out_bf16_le` n·k little-endian BF16
// values. Returns nullopt on success; otherwise the first fault in row-major order, and `out`
// is then unspecified. bad_arguments when k is 0 or not a multiple of 32, packed.size() is not
// a multiple of k/2, scales.size() != n·k/32, or out.size() != 2·n·k. `out` must not overlap
// the inputs. `row_begin` only numbers the elements named in faults.
std::optional<Mxfp4Fault> dequant_mxfp4_rows(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                             uint64_t k, uint64_t row_begin, std::span<uint8_t> out_bf16_le);

// The same for one whole [rows, k] matrix written transposed: out is [k, rows] (element (r, c)
// at out[c * rows + r]), the BF16 layout of gpt-oss experts (X_blocks [R, K/32, 16] ->
// X [K, R]). `scratch` holds the row-major result on the way (resized, reused by callers).
// Faults name row-major elements of the input, as dequant_mxfp4_rows does.
std::optional<Mxfp4Fault> dequant_mxfp4_transposed(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                   uint64_t rows, uint64_t k, uint64_t row_begin,
                                                   std::vector<uint8_t>& scratch, std::span<uint8_t> out_bf16_le);

}  // namespace ckpt

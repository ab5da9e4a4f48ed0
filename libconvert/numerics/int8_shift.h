// MXFP4 → INT8-shift remap (docs/spec/mxfp4-int8-shift.md §3-§4, §8), bit for bit.
//
// One expert's fused matrix [rows, k] (w13 = w1 rows then w3 rows; w2 alone) is turned into
// three slabs: remapped E2M1 codes in MMA tile order, one 2-bit shift per (row, 32-block), and
// one F32 scale per row. The output must equal the deployment repository's Triton repack
// (RemapRounding::half_away) or its torch fallback (half_even) byte for byte.
//
// Every function here is pure, thread-safe and never throws; faults are returned as values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "numerics/ggml_dequant.h"

namespace ckpt {

// How a folded target (block more than `headroom` exponents below its row's maximum) is
// rounded to an integer. The two disagree only where the target is exactly 0.5.
enum class RemapRounding {
  half_away,  // Triton, production default: floor(|t| + 0.5)
  half_even,  // torch.round
};
const char* remap_rounding_name(RemapRounding r);  // "half-away", "half-even"

struct RemapParams {
  uint64_t rows = 0;      // N: total output rows of the fused matrix for ONE expert
  uint64_t k = 0;         // K elements per row, a nonzero multiple of 32
  unsigned headroom = 3;  // 0..3 (production: 3)
  RemapRounding rounding = RemapRounding::half_away;
};

// One expert's rows come from one or more stacked parts (w13 = w1 rows then w3 rows; w2 = one).
struct RemapPart {
  std::span<const uint8_t> weight;  // rows x k/2 packed E2M1, low nibble = even element
  std::span<const uint8_t> scale;   // rows x k/32 UE8M0
  uint64_t rows = 0;
};

struct RemapFault {
  enum Kind { e8m0_nan, bad_arguments, overflow } kind;
  uint64_t row = 0;    // row within the expert's fused matrix (e8m0_nan, overflow)
  uint64_t block = 0;  // 32-block within that row
};
const char* remap_fault_name(RemapFault::Kind k);  // "e8m0_nan", "bad_arguments", "overflow"

// Spec §8, accumulated over the weights of one or more experts. "w" is the original value
// lut_x2[c]·2^(b−128), "w'" the decoded (lut_x2[code] << shift2)·channel_scale.
struct RemapStats {
  uint64_t num_weights = 0, nonzero = 0, exact_all = 0, exact_nonzero = 0, overflow = 0;
  uint64_t blocks = 0;
  uint64_t blocks_folded = 0;     // delta > headroom (delta >= 4 in production): re-encoded, loss possible
  uint64_t vanished_nonzero = 0;  // nonzero weight decoded to 0
  double max_rel_err_nonzero = 0, sum_rel_err_nonzero = 0;  // |w'−w|/|w| over w != 0
  // Absolute errors (real units) for spec §8's mae / rmse / max_abs_err, and Σw² so that the
  // relative Frobenius error sqrt(sum_sq_err / sum_sq_weight) is available to error budgets.
  double sum_abs_err = 0, sum_sq_err = 0, max_abs_err = 0, sum_sq_weight = 0;
  std::array<uint64_t, 17> row_span_hist{};  // index = row span (max exp − min exp), 16 = 16+
  int row_span_max = 0;

  void merge(const RemapStats& o);
  double exact_rate_all() const { return num_weights ? double(exact_all) / double(num_weights) : 1.0; }
  double exact_rate_nonzero() const { return nonzero ? double(exact_nonzero) / double(nonzero) : 1.0; }
  double mean_rel_err_nonzero() const { return nonzero ? sum_rel_err_nonzero / double(nonzero) : 0.0; }
};

// Bytes of ONE expert's slab of each output tensor (spec §4).
uint64_t remap_mxfp4_bytes(const RemapParams& p);          // (k/32) * ceil(rows/8) * 128
uint64_t remap_shift2_bytes(const RemapParams& p);         // ceil((k/32)/4) * ceil(rows/8) * 8
uint64_t remap_channel_scale_bytes(const RemapParams& p);  // rows * 4

// Each writes exactly one expert's slab in the byte layout of spec §4: mxfp4 tiles [KB, G, 128],
// shift2 [S, G, 8], channel_scale F32 little-endian [rows]. Rows n >= rows inside the last group
// of 8 and unused 2-bit fields are written as zero. Returns nullopt on success, else the first
// fault, and then `out` is left untouched:
//   bad_arguments: k == 0 or k % 32 != 0, rows == 0, headroom > 3, the parts' rows do not sum
//                  to p.rows, a part's weight/scale span has the wrong size, or out.size() is
//                  not exactly the slab size;
//   e8m0_nan:      the first (row-major) scale byte 0xFF, naming its row and block;
//   overflow:      a target outside [−128, 127] (impossible at headroom <= 3; checked anyway).
// `out` must not overlap the inputs. remap_expert_shift2 / _channel_scale read only the scales
// (a part's weight span may then be empty). `stats` may be null; it is only accumulated into
// (never reset), and only on success.
std::optional<RemapFault> remap_expert_mxfp4(const std::vector<RemapPart>& parts, const RemapParams& p,
                                             std::span<uint8_t> out, RemapStats* stats);
std::optional<RemapFault> remap_expert_shift2(const std::vector<RemapPart>& parts, const RemapParams& p,
                                              std::span<uint8_t> out);
std::optional<RemapFault> remap_expert_channel_scale(const std::vector<RemapPart>& parts,
                                                     const RemapParams& p, std::span<uint8_t> out);

// The same on an explicit ISA (clamped to what the CPU runs); the functions above use the
// process's one choice, ggml_dequant_isa() (AVX2 when the CPU has it, CKPT_DEQUANT_ISA=scalar
// forces the scalar loops). Both ISAs give the same bytes, faults and stats
// (tests/numerics/int8_shift_isa_test.cpp): the AVX2 loops (int8_shift_avx2.cpp) only look up
// tables built here from remap_code_nibble / remap_shift2_for, the scalar loops' reference.
std::optional<RemapFault> remap_expert_mxfp4_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                 const RemapParams& p, std::span<uint8_t> out, RemapStats* stats);
std::optional<RemapFault> remap_expert_shift2_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                  const RemapParams& p, std::span<uint8_t> out);
std::optional<RemapFault> remap_expert_channel_scale_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                         const RemapParams& p, std::span<uint8_t> out);

// ---- Building blocks, exposed for tests and for the runtime reference ---------------------

// Signed doubled E2M1 values: lut_x2[c] = 2·e2m1(c); code 8 (−0) is 0.
inline constexpr std::array<int8_t, 16> kE2m1LutX2 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The 16 bytes of one (row, 32-block) occupy 16 consecutive bytes of a 128-byte mxfp4 tile, at
// tile offset row8·16; tile byte i holds source byte kTileSourceByte[i] of the block (§4 table).
inline constexpr std::array<uint8_t, 16> kTileSourceByte = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};

// Nearest E2M1 magnitude index (0..7) of |v| by the spec's thresholds (ties to the smaller).
int e2m1_nearest_magnitude_index(double v);
// The rounding step applied to a non-negative target.
double remap_round_target(double target, RemapRounding r);
// shift2 of a block whose exponent is `delta` below its row's maximum.
inline unsigned remap_shift2_for(unsigned headroom, uint64_t delta) {
  return delta >= headroom ? 0u : headroom - static_cast<unsigned>(delta);
}
// The output nibble for source code `code` (0..15) in a block with that delta (§3 step 4).
// Precondition: headroom <= 3.
uint8_t remap_code_nibble(uint8_t code, uint64_t delta, unsigned headroom, RemapRounding r);

}  // namespace ckpt

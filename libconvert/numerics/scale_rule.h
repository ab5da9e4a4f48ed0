// The one scale-validity rule: which stored scale values a conversion may multiply by.
// validate --deep (validate/deep_scan), convert (convert/shard_writer, before any weight is
// read) and verify apply this function, so none of them passes a scale another refuses.
//
// A scale is refused when some weight code of its block could not be converted exactly or
// at all (deepseek-v4.md §7.1-7.3, mxfp4-int8-shift.md §1):
//   * NaN: E8M0 0xFF (F8_E8M0 or an E8M0 exponent stored as U8), a NaN multiplier;
//   * not finite: a ±inf multiplier;
//   * not positive: a multiplier ≤ 0 (−0 included). No producer writes one (quantizers clamp
//     amax away from 0): a zero scale erases its block, a negative one flips its signs;
//   * overflows BF16: the largest code of the format times the scale is beyond BF16's largest
//     finite value, so the block's products may be ±inf: E8M0 b >= 247 under FP8 (448 · 2^120),
//     b >= 253 under MXFP4 (6 · 2^126), a multiplier s with bf16_rne(448 ⊗ s) = inf.
// One problem is reported but not refused: an FP8 E8M0 exponent b <= 2, whose products are
// rounded (once, RNE) onto BF16's subnormal grid instead of being exact; convert writes what
// torch and the reference converters write, validate --deep reports it (FP8_SCALE_RANGE).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace ckpt {

// How the scale's bytes are read: an E8M0 exponent of an F8_E4M3 weight, a linear multiplier
// (F32/BF16/F16) of an F8_E4M3 weight, or the E8M0 exponent of an MXFP4 (E2M1) block.
enum class ScaleEncoding : uint8_t { fp8_e8m0, fp8_multiplier, mxfp4_e8m0 };

enum class ScaleProblem : uint8_t { none, nan, not_finite, not_positive, overflows_bf16, inexact_bf16 };

// True for the problems every job refuses (all but none and inexact_bf16).
inline bool scale_problem_refused(ScaleProblem p) { return p != ScaleProblem::none && p != ScaleProblem::inexact_bf16; }

// The scales of a span, tallied by problem. Element indices are absolute within the scale
// tensor (`first_index` + position).
struct ScaleCheck {
  struct Tally {
    uint64_t count = 0;
    uint64_t first = 0;  // element index of the first value with this problem
    double value = 0;    // that value (E8M0: the byte)
  };
  std::array<Tally, 6> by_problem{};  // indexed by ScaleProblem
  const Tally& of(ScaleProblem p) const { return by_problem[static_cast<size_t>(p)]; }
  uint64_t refused() const;
  // The refused problem met first (lowest element index); none when nothing is refused.
  ScaleProblem first_refused() const;
  void merge(const ScaleCheck& later);  // `later` covers later elements of the same tensor
};

// Applies the rule to whole elements of `bytes` (little-endian, `dtype`'s size each; a
// trailing partial element is ignored). An encoding/dtype pair the rule does not know
// (e.g. an fp8_multiplier in U8) counts every element as refused (nan).
void check_scale_values(ScaleEncoding encoding, Dtype dtype, std::span<const uint8_t> bytes, uint64_t first_index,
                        ScaleCheck& into);

// The verdict for one value (an E8M0 byte, or a multiplier widened to f32).
ScaleProblem e8m0_scale_problem(ScaleEncoding encoding, uint8_t b);
ScaleProblem multiplier_scale_problem(float s);

// "is -0.5, not a positive multiplier" / "is E8M0 250 (2^123): 448 x 2^123 is beyond BF16's
// largest finite value" — what is wrong with `value`, for messages (no tensor named).
std::string scale_problem_text(ScaleEncoding encoding, ScaleProblem problem, double value);

// The one refusal line for a scale tensor the rule refuses (convert, and verify when it checks
// a scale): "FILE: scale NAME at row R, block C (byte B), used by WEIGHT, is ...; refusing to
// convert (N such scale values in the tensor)". `shape` is the scale's (2-D and more: row and
// block of its first refused element, else its index), `element_bytes` its dtype's size, `offset`
// its first byte in FILE. Empty when `check` refuses nothing.
std::string scale_refusal_text(ScaleEncoding encoding, const ScaleCheck& check, std::string_view file,
                               std::string_view scale_name, uint64_t offset, uint64_t element_bytes,
                               std::span<const uint64_t> shape, std::string_view used_by);

}  // namespace ckpt

// The one scale-validity rule (scale_rule.h).
#include "numerics/scale_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "numerics/fp8.h"
#include "numerics/ggml_dequant.h"

namespace ckpt {
namespace {

constexpr uint8_t kE4m3Largest = 0x7E;  // 448
// E8M0 exponents whose largest product is still finite in BF16: FP8 448 · 2^(b−127) < 2^128
// needs b <= 246; MXFP4 6 · 2^(b−127) needs b <= 252. FP8 products are exact for b >= 3.
constexpr uint8_t kFp8E8m0Max = 246, kFp8E8m0ExactMin = 3, kMxfp4E8m0Max = 252;

std::optional<float> multiplier_at(Dtype dtype, const uint8_t* p) {
  switch (dtype) {
    case Dtype::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case Dtype::BF16: return ggml_bf16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8));
    case Dtype::F16: return ggml_fp16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8));
    default: return std::nullopt;
  }
}

void note(ScaleCheck& c, uint64_t index, ScaleProblem p, double value) {
  if (p == ScaleProblem::none) return;
  ScaleCheck::Tally& t = c.by_problem[static_cast<size_t>(p)];
  if (t.count++ == 0) {
    t.first = index;
    t.value = value;
  }
}

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

uint64_t ScaleCheck::refused() const {
  uint64_t n = 0;
  for (size_t p = 0; p < by_problem.size(); ++p)
    if (scale_problem_refused(static_cast<ScaleProblem>(p))) n += by_problem[p].count;
  return n;
}

ScaleProblem ScaleCheck::first_refused() const {
  ScaleProblem best = ScaleProblem::none;
  for (size_t p = 0; p < by_problem.size(); ++p) {
    const auto problem = static_cast<ScaleProblem>(p);
    if (!scale_problem_refused(problem) || !by_problem[p].count) continue;
    if (best == ScaleProblem::none || by_problem[p].first < of(best).first) best = problem;
  }
  return best;
}

void ScaleCheck::merge(const ScaleCheck& later) {
  for (size_t p = 0; p < by_problem.size(); ++p) {
    Tally& t = by_problem[p];
    const Tally& l = later.by_problem[p];
    if (!l.count) continue;
    if (!t.count) {
      t.first = l.first;
      t.value = l.value;
    }
    t.count += l.count;
  }
}

ScaleProblem e8m0_scale_problem(ScaleEncoding encoding, uint8_t b) {
  if (e8m0_is_nan(b)) return ScaleProblem::nan;
  if (encoding == ScaleEncoding::mxfp4_e8m0) return b > kMxfp4E8m0Max ? ScaleProblem::overflows_bf16 : ScaleProblem::none;
  if (b > kFp8E8m0Max) return ScaleProblem::overflows_bf16;
  return b < kFp8E8m0ExactMin ? ScaleProblem::inexact_bf16 : ScaleProblem::none;
}

ScaleProblem multiplier_scale_problem(float s) {
  if (std::isnan(s)) return ScaleProblem::nan;
  if (std::isinf(s)) return ScaleProblem::not_finite;
  if (!(s > 0.0f)) return ScaleProblem::not_positive;
  if ((fp8_f32_product_bf16(kE4m3Largest, s) & 0x7FFF) == 0x7F80) return ScaleProblem::overflows_bf16;
  return ScaleProblem::none;
}

void check_scale_values(ScaleEncoding encoding, Dtype dtype, std::span<const uint8_t> bytes, uint64_t first_index,
                        ScaleCheck& into) {
  if (encoding != ScaleEncoding::fp8_multiplier) {
    const bool e8m0 = dtype == Dtype::F8_E8M0 || dtype == Dtype::U8;
    for (size_t i = 0; i < bytes.size(); ++i)
      note(into, first_index + i, e8m0 ? e8m0_scale_problem(encoding, bytes[i]) : ScaleProblem::nan, bytes[i]);
    return;
  }
  const size_t size = std::max<uint32_t>(1, dtype_bits(dtype) / 8);
  for (size_t i = 0; i + size <= bytes.size(); i += size) {
    const auto s = multiplier_at(dtype, bytes.data() + i);
    note(into, first_index + i / size, s ? multiplier_scale_problem(*s) : ScaleProblem::nan, s ? *s : NAN);
  }
}

std::string scale_problem_text(ScaleEncoding encoding, ScaleProblem problem, double value) {
  const bool e8m0 = encoding != ScaleEncoding::fp8_multiplier;
  // An E8M0 value is its byte (0-255); a multiplier may be any double (no int conversion).
  const int b = e8m0 ? static_cast<int>(value) : 0;
  const std::string what =
      e8m0 ? "E8M0 " + std::to_string(b) + (b == 0xFF ? std::string(" (NaN)") : " (2^" + std::to_string(b - 127) + ")")
           : number_text(value);
  const std::string largest = encoding == ScaleEncoding::mxfp4_e8m0 ? "6 (the largest E2M1 value)"
                                                                     : "448 (the largest E4M3 value)";
  switch (problem) {
    case ScaleProblem::nan: return "is " + what + ", not a number";
    case ScaleProblem::not_finite: return "is " + what + ", not a finite multiplier";
    case ScaleProblem::not_positive: return "is " + what + ", not a positive multiplier";
    case ScaleProblem::overflows_bf16:
      return "is " + what + ": " + largest + " times it is beyond BF16's largest finite value (3.39e38)";
    case ScaleProblem::inexact_bf16:
      return "is " + what + ": its products fall on BF16's subnormal grid and are rounded, not exact";
    case ScaleProblem::none: break;
  }
  return "is " + what;
}

std::string scale_refusal_text(ScaleEncoding encoding, const ScaleCheck& check, std::string_view file,
                               std::string_view scale_name, uint64_t offset, uint64_t element_bytes,
                               std::span<const uint64_t> shape, std::string_view used_by) {
  const ScaleProblem problem = check.first_refused();
  if (problem == ScaleProblem::none) return {};
  const ScaleCheck::Tally& first = check.of(problem);
  const uint64_t cols = shape.empty() ? 1 : std::max<uint64_t>(1, shape.back());
  const std::string where = shape.size() >= 2 ? "row " + std::to_string(first.first / cols) + ", block " +
                                                    std::to_string(first.first % cols)
                                              : "element " + std::to_string(first.first);
  return std::string(file) + ": scale " + std::string(scale_name) + " at " + where + " (byte " +
         std::to_string(offset + first.first * std::max<uint64_t>(1, element_bytes)) + "), used by " +
         std::string(used_by) + ", " + scale_problem_text(encoding, problem, first.value) + "; refusing to convert (" +
         std::to_string(check.refused()) + " such scale values in the tensor)";
}

}  // namespace ckpt

// `ckpt validate OUT --reference IN`: checks a converted checkpoint against the
// conversion plan of its input: the same tensor set minus consumed scales, BF16 where
// FP8 pairs were, same shapes and shard assignment, the config rewrite, the totals.
// With --deep, every tensor's bytes: copied ones equal the input's, converted ones
// equal a fresh dequantization of the input.
#pragma once

#include <string>

#include "core/findings.h"
#include "plan/plan.h"
#include "formats/loader.h"

namespace ckpt {

// What conversion produced OUT, from its tensors and config record: INT8-shift experts
// (with the recorded headroom and rounding) when fused expert tensors are present, else keep.
ExpertMode detect_conversion_mode(const LoadedModel& out, RemapOptions& remap);

void check_against_reference(const LoadedModel& out, const std::string& reference_path, bool deep,
                             Findings& findings);

}  // namespace ckpt

// `ckpt validate OUT --reference IN`: checks a converted checkpoint against the
// conversion plan of its input: the same tensor set minus consumed scales, BF16 where
// FP8 pairs were, same shapes and shard assignment, the config rewrite, the totals.
// Every file beside the tensors too (compare_model_files). With --deep, every tensor's
// bytes: copied ones equal the input's, converted ones equal a fresh dequantization of the
// input.
#pragma once

#include <string>

#include "core/findings.h"
#include "plan/plan.h"
#include "formats/loader.h"

namespace ckpt {

// What conversion produced OUT, from its tensors and config record: INT8-shift experts
// (with the recorded headroom and rounding) when fused expert tensors are present, else keep.
ExpertMode detect_conversion_mode(const LoadedModel& out, RemapOptions& remap);

// The files of OUT other than the tensors against the conversion of IN (`plan`, planned
// from IN): config.json and a rewritten params.json member by member, where only what the
// documented rewrite (plan/config_rewrite.h) changes may differ (REF_CONFIG naming the
// member); every copied side file (generation_config.json, tokenizer files, ...) byte for
// byte (REF_SIDE_FILE, at the first differing byte); a file the conversion does not write
// (REF_EXTRA_FILE) and a copied or written file that is absent (REF_MISSING_FILE). Hidden
// entries (.ckptkit/) are no part of the model (formats/model_files.h). Used by
// check_against_reference and by the verifier.
void compare_model_files(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out,
                         Findings& findings);

void check_against_reference(const LoadedModel& out, const std::string& reference_path, bool deep,
                             Findings& findings);

// The plan OUT is checked against: a ckpt relayout output (config.json's ckptkit_relayout)
// against plan_regrid of IN with the block and BF16 modules it records (relayout/relayout_config.h),
// any other output against plan_conversion of IN in the mode detect_conversion_mode finds.
bool reference_plan(const LoadedModel& in, const LoadedModel& out, ConversionPlan& plan, Findings& findings);

}  // namespace ckpt

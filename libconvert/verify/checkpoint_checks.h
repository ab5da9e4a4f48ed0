// The verifier's safetensors checkpoint checks (verify/checkpoint_checks.cpp): a converted
// checkpoint against the conversion plan of its input, and a checkpoint alone.
#pragma once

#include <vector>

#include "formats/loader.h"
#include "plan/plan.h"
#include "verify/jobs.h"

namespace ckpt {

// OUT against the conversion plan of IN: one job per tensor (FP8, MXFP4, copies), one per
// expert of a fused INT8-shift matrix or of a gpt-oss expert tensor.
void plan_converted_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                           const ConversionPlan& plan, std::vector<Job>& jobs);

// A checkpoint alone: the FP8 pairs and MXFP4 expert weights of `plan` (none when null),
// device against the CPU's exact BF16 of the same bytes, and its INT8-shift experts.
void plan_checkpoint_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model,
                            const ConversionPlan* plan, std::vector<Job>& jobs);

}  // namespace ckpt

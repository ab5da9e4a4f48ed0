// The verifier's INT8-shift expert and GEMM checks: an expert of a fused INT8-shift matrix
// against the CPU remap of IN's MXFP4 experts, its device decode against the CPU's, the
// device INT8 GEMM on random activations against the CPU reference (and, against IN, its
// error with respect to the original weights).
#pragma once

#include <vector>

#include "formats/loader.h"
#include "plan/plan.h"
#include "verify/jobs.h"

namespace ckpt {

// One job per expert of fused matrix `fm` of OUT (tensors mx, sh, cs) against IN's experts.
void plan_fused_expert_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                              const FusedMatrix& fm, const ModelTensor& mx, const ModelTensor& sh,
                              const ModelTensor& cs, std::vector<Job>& jobs);

// A checkpoint alone: every expert of its INT8-shift tensors, device decode and GEMM against
// the CPU's of the same slabs; tensors without their .shift2 / .channel_scale, or of
// disagreeing sizes, are VERIFY_LAYOUT errors.
void plan_int8_experts_alone(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model,
                             std::vector<Job>& jobs);

}  // namespace ckpt

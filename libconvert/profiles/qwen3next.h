// The qwen3next profile (gguf.md §7): checks a GGUF header that passed read_gguf against
// the Qwen3-Next tensor set. The names and keys it uses are data in
// schemas/profiles/qwen3next.json (embedded at build time).
//
// Rules: every recurrent (gated-DeltaNet) block il, i.e. (il + 1) % full_attention_interval != 0,
// has an F32 `blk.il.ssm_a` whose elements are all finite and strictly negative (it stores
// -exp(A_log); ckptkit recovers A_log = log(-ssm_a)); expert tensors are 3-D with
// ne[2] == expert_count, gate and up share a shape, and down is {n_ff, n_embd, n_expert}
// against gate's {n_embd, n_ff, n_expert} (fused gate_up: ne1 = 2 * n_ff).
// Codes: Q3N_KV_MISSING, Q3N_KV_INVALID, Q3N_SSM_A_MISSING, Q3N_SSM_A_TYPE,
// Q3N_SSM_A_NOT_NEGATIVE, Q3N_EXPERT_SHAPE, Q3N_EXPERT_COUNT, Q3N_PROFILE_INVALID.
#pragma once

#include <string>

#include "core/findings.h"
#include "formats/gguf.h"
#include "io/mapped_file.h"

namespace ckpt {

// True when the header's general.architecture is the profile's ("qwen3next").
bool is_qwen3next(const GgufFile& g);

// `file` is the mapped GGUF that `g` was read from (ssm_a values are read from it,
// after a bounds check).
void check_qwen3next(const GgufFile& g, const MappedFile& file, const std::string& display, Findings& f);

}  // namespace ckpt

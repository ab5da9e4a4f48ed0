// FP8 and MXFP4 scale pairing (deepseek-v4.md §7.4).
//
// An FP8 weight is never cast without its scale, so every F8_E4M3 tensor must find
// its multiplier by name anywhere in the checkpoint (scales in another shard are
// allowed and reported as a warning), and every scale must belong to a weight.
// The grid is checked against the configured block size, never inferred from the
// scale's own shape (a ceil grid that happens to divide would give a wrong block).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/findings.h"
#include "formats/model_view.h"

namespace ckpt {

struct PairingOptions {
  uint64_t block_rows = 128;  // quantization_config.weight_block_size[0]
  uint64_t block_cols = 128;  // quantization_config.weight_block_size[1]
  // DeepSeek-V4 stores some FP8 tensors without a ".weight" suffix (P pairs with P.scale).
  bool allow_bare_fp8_names = false;
};

// Pairs P.weight (F8_E4M3) with P.scale (F8_E8M0) or P.weight_scale_inv (F32), bare P with
// P.scale when allowed, and MXFP4 experts *.ffn.experts.N.w{1,2,3}.weight (I8) with their
// .scale (F8_E8M0 [o, 2*i_half/32]). Codes: FP8_UNPAIRED, FP8_NOT_2D, SCALE_GRID_MISMATCH,
// SCALE_DTYPE, SCALE_STRAY, SCALE_CROSS_SHARD (warning), MXFP4_SCALE_MISSING,
// MXFP4_SCALE_SHAPE.
// "<block>.ffn.experts.<N>.w{1,2,3}.weight": the routed MXFP4 expert naming.
bool is_mxfp4_expert_name(std::string_view name);

// An FP8 weight whose scale was found with the right dtype and grid (view indices).
struct Fp8Pair {
  size_t weight = 0;
  size_t scale = 0;
  bool f32_scale = false;  // X.weight_scale_inv (F32 multiplier) rather than X.scale (E8M0)
};

// Checks pairing; when `pairs` is given, appends every FP8 weight that can be converted
// (the converter uses the same rules as the validator, so they cannot disagree).
void check_fp8_pairing(const ModelView& view, const PairingOptions& o, Findings& f,
                       std::vector<Fp8Pair>* pairs = nullptr);

}  // namespace ckpt

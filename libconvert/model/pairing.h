// FP8 and MXFP4 scale pairing (deepseek-v4.md §7.4), by the rules of the detected
// quantization profile (model/quant_scheme.h, schemas/quant/*.json).
//
// An FP8 weight is never cast without its scale, so every F8_E4M3 tensor must find
// its scale by name anywhere in the checkpoint (scales in another shard are
// allowed and reported as a warning), and every scale must belong to a weight.
// The grid is checked against the configured block size (or the profile's per-channel /
// per-tensor / 4-D rule), never inferred from the scale's own shape (a ceil grid that
// happens to divide would give a wrong block).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/findings.h"
#include "formats/model_view.h"
#include "model/quant_scheme.h"

namespace ckpt {

struct PairingOptions {
  uint64_t block_rows = 128;  // quantization_config.weight_block_size[0]
  uint64_t block_cols = 128;  // quantization_config.weight_block_size[1]
  // DeepSeek-V4 stores some FP8 tensors without a ".weight" suffix (P pairs with P.scale).
  bool allow_bare_fp8_names = false;
  // Scale names, dtypes, meanings and shape rule; the legacy rules unless a profile applies.
  QuantScheme scheme = legacy_quant_scheme();
};

// Pairs P.weight (F8_E4M3) with its scale by the scheme's rules (legacy: P.scale F8_E8M0 or
// P.weight_scale_inv F32), bare P with P.scale when allowed, MXFP4 experts
// *.ffn.experts.N.w{1,2,3}.weight (I8) with their .scale (F8_E8M0 [o, 2*i_half/32]) and, under
// the mxfp4 profile, gpt-oss X_blocks with X_scales. Codes: FP8_UNPAIRED, FP8_NOT_2D,
// SCALE_GRID_MISMATCH, SCALE_DTYPE, SCALE_STRAY, SCALE_CROSS_SHARD (warning),
// QUANT_WEIGHT_DTYPE, MXFP4_SCALE_MISSING, MXFP4_SCALE_SHAPE.
// "<block>.ffn.experts.<N>.w{1,2,3}.weight": the routed MXFP4 expert naming.
bool is_mxfp4_expert_name(std::string_view name);

// An FP8 weight whose scale was found with the right dtype and grid (view indices).
struct Fp8Pair {
  size_t weight = 0;
  size_t scale = 0;
  bool f32_scale = false;  // a multiplier (F32/BF16/F16) rather than an E8M0 exponent
  Dtype scale_dtype = Dtype::F8_E8M0;
  // The weight's effective block: element (i, j) uses scale[i / block_rows][j / block_cols]
  // of the scale read as a row-major 2-D grid (per channel: [1, cols]; per tensor: [rows, cols]).
  uint64_t block_rows = 128, block_cols = 128;
  std::vector<size_t> dropped;  // activation scales dropped with the weight
};

// gpt-oss MXFP4 experts: X_blocks U8 [E, R, K/32, 16] with X_scales [E, R, K/32] (E8M0).
struct Mxfp4BlocksPair {
  size_t blocks = 0, scales = 0;
  uint64_t experts = 1, rows = 0, k = 0;  // R and K of one expert
};

// Checks pairing; when `pairs` is given, appends every FP8 weight that can be converted
// (the converter uses the same rules as the validator, so they cannot disagree); `blocks`
// likewise for gpt-oss MXFP4 experts.
void check_fp8_pairing(const ModelView& view, const PairingOptions& o, Findings& f,
                       std::vector<Fp8Pair>* pairs = nullptr, std::vector<Mxfp4BlocksPair>* blocks = nullptr);

// The scale of one FP8 weight by the same rules (dump, single-tensor decoders): the pair, or
// nullopt with `problem` set to the first finding's message ("... has no scale ..." when none).
std::optional<Fp8Pair> pair_fp8_weight(const ModelView& view, const PairingOptions& o, const ModelTensor& weight,
                                       std::string& problem, std::string* code = nullptr);

// A scale grid as f32 multipliers (F32 copied; BF16/F16 widened exactly). E8M0 and U8 are not
// multipliers: false.
bool scale_grid_to_f32(Dtype dtype, std::span<const uint8_t> bytes, std::vector<float>& out);

}  // namespace ckpt

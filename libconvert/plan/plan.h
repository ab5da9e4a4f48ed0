// The conversion plan, computed from headers alone before any data moves: per
// output shard the tensors written (copied byte for byte, or FP8 dequantized to
// BF16), the scales consumed, the exact output header and file size. `--dry-run`
// prints it; the executor follows it; `validate --reference` checks against it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/findings.h"
#include "formats/loader.h"
#include "formats/safetensors_writer.h"
#include "numerics/fp8.h"
#include "numerics/int8_shift.h"
#include "model/pairing.h"

namespace ckpt {

enum class ExpertMode { keep, int8_shift, bf16 };

const char* expert_mode_name(ExpertMode m);        // "keep", "int8-shift", "bf16"

struct RemapOptions {
  unsigned headroom = 3;
  RemapRounding rounding = RemapRounding::half_away;
};

// One fused expert matrix of one block (mxfp4-int8-shift.md §2): w13 stacks each
// expert's w1 rows then w3 rows; w2 is one part.
struct FusedMatrix {
  std::string block;   // "layers.0", "mtp.1"
  std::string matrix;  // "w13" or "w2"
  uint64_t experts = 0;
  RemapParams params;  // rows N and k K of one expert
  // parts[e] = the (weight, scale) input view indices stacked for expert e.
  std::vector<std::vector<std::pair<size_t, size_t>>> parts;
};

enum class TensorAction : uint8_t {
  copy,          // bytes unchanged
  dequant_e8m0,  // F8_E4M3 weight x E8M0 block scale -> BF16 (exact, one RNE)
  dequant_f32,   // F8_E4M3 weight x F32/BF16/F16 block multiplier -> BF16 (one binary32 multiply, one RNE)
  dequant_mxfp4, // MXFP4 expert I8 [N, K/2] x E8M0 [N, K/32] -> BF16 [N, K] (exact; --experts bf16)
  remap_mxfp4,          // fused INT8-shift tensors, written expert by expert from the
  remap_shift2,         // per-expert MXFP4 weights and scales of FusedMatrix `fused`
  remap_channel_scale,
  // gpt-oss X_blocks U8 [E, R, K/32, 16] x X_scales E8M0 [E, R, K/32] -> BF16 X [E, K, R]:
  // each expert dequantized (exact) then transposed, the layout of the BF16 release.
  dequant_mxfp4_blocks,
  // ckpt relayout: a block-FP8 scale grid re-gridded to the plan's regrid block, each old
  // scale repeated for its sub-blocks (numerics/scale_regrid.h); input = the old scale,
  // rows x k = its weight's shape, block_rows x block_cols = the weight's old block.
  regrid_scale,
};

inline bool is_remap(TensorAction a) {
  return a == TensorAction::remap_mxfp4 || a == TensorAction::remap_shift2 || a == TensorAction::remap_channel_scale;
}

struct PlannedTensor {
  size_t input = SIZE_MAX;      // index into the input view (copy, dequant)
  TensorAction action = TensorAction::copy;
  size_t scale = SIZE_MAX;      // input view index of the scale (dequant only)
  size_t fused = SIZE_MAX;      // index into ConversionPlan::fused (remap only)
  // FP8 dequant: the weight's effective block (per channel [1, cols], per tensor [rows, cols]);
  // 0 = the plan's pairing block. dequant_mxfp4_blocks: experts and R, K of one expert.
  uint64_t block_rows = 0, block_cols = 0;
  uint64_t experts = 0, rows = 0, k = 0;
};


struct PlannedShard {
  std::string name;     // output file name = input shard name
  uint32_t input_file = 0;
  // In output order (the reference writer's: dtype descending, then name); entry i
  // describes writer_tensors[i].
  std::vector<WriterTensor> writer_tensors;
  std::vector<PlannedTensor> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;  // input __metadata__, kept
  std::string header;   // exact output header text (padded)
  uint64_t payload_bytes = 0;
  uint64_t file_bytes = 0;  // 8 + header + payload
  uint64_t input_bytes = 0;
  uint64_t converted = 0, copied = 0, dropped_scales = 0;
  uint64_t consumed_expert_tensors = 0;  // per-expert MXFP4 tensors folded into fused INT8-shift ones
  uint64_t dequantized_experts = 0;      // --experts bf16: MXFP4 expert weights written as BF16 (in `converted`)
  uint64_t regridded_scales = 0;         // ckpt relayout: scale grids re-gridded (neither converted nor copied)
};

struct ConversionPlan {
  ExpertMode experts = ExpertMode::keep;
  RemapOptions remap;
  std::vector<FusedMatrix> fused;
  PairingOptions pairing;
  std::string profile;                 // profile whose pairing rules applied
  std::string quant_profile;           // quantization profile (schemas/quant) detected; "" = none
  // Input tensors dequantized (FP8 weights and MXFP4 experts), for --dry-run.
  std::vector<std::string> dequantized_tensors;
  uint64_t dropped_activation_scales = 0;
  std::vector<PlannedShard> shards;
  std::vector<std::string> side_files;  // relative paths of non-tensor files to copy
  // Side files not copied because the output no longer has their quantization
  // (hf_quant_config.json of a dequantized ModelOpt checkpoint: QuantScheme::quant_only_files).
  std::vector<std::string> dropped_side_files;
  // Mistral native layout: params.json holds the quantization and is rewritten (not copied).
  bool rewrites_params_json = false;
  uint64_t side_bytes = 0;
  std::vector<std::string> extra_bf16_modules;  // main_proj / e_proj / h_proj when present
  bool output_has_fp8 = false;
  bool output_has_mxfp4_experts = false;
  std::string source_structure_sha256;
  // Totals.
  uint64_t tensors_out = 0, payload_out = 0, converted = 0, copied = 0, dropped_scales = 0;
  uint64_t consumed_expert_tensors = 0;
  uint64_t expert_weight_tensors = 0, mtp_tensors = 0, remapped_expert_tensors = 0;
  uint64_t bytes_in = 0, shard_bytes_out = 0;
  // --experts bf16: MXFP4 expert weights dequantized, the input bytes they and their scales
  // take, and the BF16 bytes they become (4x the packed weights: the dry run says so).
  uint64_t dequantized_experts = 0, expert_bytes_in = 0, expert_bytes_out = 0;
  // ckpt relayout (plan_regrid): the one new block of every FP8 weight kept (0: not a
  // relayout), and the scale grids re-gridded to it.
  uint64_t regrid_rows = 0, regrid_cols = 0;
  uint64_t regridded_scales = 0;
};

// Plans the conversion of a loaded (and structurally valid) input checkpoint. Returns
// false with error findings when the input cannot be converted safely: an FP8 tensor
// without a usable scale, a stray scale, a wrong grid, or a structural error; gpt-oss MXFP4
// experts under --experts int8-shift (the remap reads the per-expert w1/w2/w3 layout).
bool plan_conversion(const LoadedModel& in, ExpertMode experts, const RemapOptions& remap, ConversionPlan& plan,
                     Findings& findings);

// ckpt relayout's conversion (relayout/relayout.h): every FP8 weight and its activation
// scales copied byte for byte, its block scale re-gridded to [block_rows, block_cols]
// (regrid_scale), except the weights named in `promoted`, which are dequantized to BF16 as
// convert does (their scales dropped); every other tensor copied. The same shards, side
// files (a quantization-only file stays: FP8 is left) and checks as plan_conversion.
struct RegridRequest {
  uint64_t block_rows = 0, block_cols = 0;
  std::vector<std::string> promoted;  // weight tensor names, sorted
};
bool plan_regrid(const LoadedModel& in, const RegridRequest& request, ConversionPlan& plan, Findings& findings);

// Every input view tensor whose bytes the output tensor `t` is computed from: its input,
// its scale, the weights and scales of its fused matrix. The resume identity of a shard
// (convert/records.h) is derived from this list, so a field added to PlannedTensor that
// makes the writer read another tensor must be listed here too.
std::vector<size_t> tensor_inputs(const ConversionPlan& plan, const PlannedTensor& t);

// The FP8 grid a planned dequantization uses for `weight` [rows, cols].
Fp8Grid planned_fp8_grid(const ConversionPlan& plan, const PlannedTensor& t, const ModelTensor& weight);

}  // namespace ckpt

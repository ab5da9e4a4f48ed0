// ckpt relayout's plan: which block-FP8 modules are re-blocked and which promoted to BF16
// so that a checkpoint loads at a TP / EP degree, from ckpt preflight's analysis of that
// deployment (the one partition model: PreflightReport::block_weights), never a second one.
// Preflight's fix text prints the same plan (relayout_summary).
//
// Re-blocking: one new block [block_n, block_k] for the whole model (the FP8 config format
// has one weight_block_size) dividing the old block and every per-rank size an engine needs
// on the grid; each old scale is repeated for its sub-blocks, so every dequantized value
// stays the same and the FP8 bytes do not change. block_k is changed only when a row-split
// module needs it (it changes the engine's per-token activation groups: the plan says so).
// BF16 promotion: a module class (routed experts as one: FusedMoE quantizes w13 and w2
// alike) whose sizes would need a block below --min-block, or that --bf16 names (that class
// in the layers named), is dequantized exactly and listed in the config's exclusion list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deploy/preflight.h"

namespace ckpt {

struct RelayoutRequest {
  uint64_t min_n = 0, min_k = 0;      // --min-block (0: the engines' own, engines.json block_sizes)
  uint64_t block_n = 0, block_k = 0;  // --block (0: chosen)
  std::vector<std::string> bf16;      // --bf16 module patterns (model/module_pattern.h)
};

enum class RelayoutAction { reblock, bf16 };
const char* relayout_action_name(RelayoutAction a);  // "reblock", "bf16"

// One module class (or, for --bf16, one class in the layers named) and what is done to it.
struct RelayoutChoice {
  std::string unit;   // module class ("FusedMoE w13 (routed experts)" / "routed experts")
  std::string names;  // its modules' last components, "gate_proj, up_proj"
  RelayoutAction action = RelayoutAction::reblock;
  std::string why;    // "per-rank rows 96: block_n 32" / "--bf16 PATTERN" / "... below --min-block"
  std::vector<int64_t> layers;
  uint64_t tensors = 0;
  int64_t bytes = 0;  // what the choice adds to the checkpoint (scales; or BF16 minus FP8 and scales)
};

struct RelayoutPlan {
  uint64_t old_n = 0, old_k = 0;      // the checkpoint's weight_block_size
  uint64_t block_n = 0, block_k = 0;  // the new one (the old when nothing is re-blocked)
  uint64_t min_n = 0, min_k = 0;      // the --min-block applied
  bool needed = false;                // some module fails at the deployment (or --bf16 / --block asked)
  std::vector<RelayoutChoice> choices;
  std::vector<std::string> promoted;  // weight tensor names dequantized to BF16, sorted
  std::vector<std::string> excluded;  // the exclusion-list entries for them (module names; experts' container)
  uint64_t regridded = 0;             // FP8 weights whose scales are re-gridded
  int64_t scale_bytes = 0;            // bytes re-gridding adds to the scales (every kept FP8 weight)
  int64_t bf16_bytes = 0;             // bytes promotion adds (BF16 weights minus FP8 weights and scales)
  std::vector<std::string> notes;     // block_k changes; the kernels a block falls back to
  std::string problem;                // non-empty: no plan (an unknown module pattern, a bad --block, ...)
  bool changes_block() const { return block_n != old_n || block_k != old_k; }
};

// The plan for the deployment `r` was made for (r.options, r.engines, r.block_weights).
RelayoutPlan plan_relayout(const PreflightReport& r, const RelayoutRequest& request);

// "re-block to 64x64 (+N bytes of scales, FP8 bytes unchanged); BF16 for X (+M bytes)"
std::string relayout_summary(const RelayoutPlan& plan);

}  // namespace ckpt

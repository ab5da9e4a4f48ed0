// The one model of how a serving engine partitions a checkpoint's tensors across a
// deployment (tensor, expert and pipeline parallel degrees): ckpt preflight checks it,
// ckpt relayout plans from it. The module classes per model family are data
// (schemas/deploy/partitions.json); this file turns a tensor's name and shape into the
// engine's split and each rank's share.
//
// Column-parallel modules split their output rows by TP, row-parallel ones their input
// columns; merged layers (QKV, gate/up) split each part; KV heads are replicated when there
// are fewer than TP; routed experts stay whole per rank under EP (E / EP experts a rank)
// and are split by intermediate size over TP / EP otherwise; replicated modules are whole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deploy/citation.h"

namespace ckpt {

enum class Split : uint8_t {
  column,               // output rows / TP
  column_kv,            // output rows / TP, or one head per rank when KV heads < TP
  row,                  // input columns / TP
  replicated,           // whole on every rank
  vocab,                // vocabulary rows / TP (embedding, LM head)
  expert_column,        // one expert's rows / (TP / EP); E / EP experts per rank
  expert_row,           // one expert's columns / (TP / EP)
  expert_fused_column,  // [E, rows, ...]: every expert in one tensor
  expert_fused_row,     // [E, rows, cols...]
  fused_qkv,            // one checkpoint tensor holding q | k | v, each part split
  fused_gate_up,        // one checkpoint tensor holding gate | up, each part split
  none,                 // not a linear module the rules know (norms, biases, ...)
};
const char* split_name(Split s);
bool split_is_expert(Split s);
bool split_cuts_rows(Split s);  // the engine cuts output rows (else input columns, or nothing)

struct Deployment {
  uint32_t tp = 1, ep = 1, pp = 1;
  // Experts are split over TP / EP (1: whole experts per rank); at least 1 whatever the
  // degrees (EP must divide TP: preflight refuses other requests as usage mistakes).
  uint32_t expert_tp() const { return ep > 1 ? (ep <= tp ? tp / ep : 1) : (tp ? tp : 1); }
};

struct ModuleRule {
  std::string match;   // trailing dotted components, '*' = one component
  std::string cls;     // the engine's module class, for messages
  Split split = Split::none;
  std::string merged;  // "qkv", "gate_up", "w13": one part of a merged layer ("" = alone)
  bool whole_groups = false;  // MXFP4 input columns split by whole 32-column groups
};

struct ArchitectureRules {
  std::string family;  // "deepseek_v3", "qwen3_moe", ...
  std::string source;  // the engine files the rules mirror, in words
  std::vector<Citation> citations;  // the engine code, file and lines
  std::vector<std::string> model_types;
  std::vector<ModuleRule> modules;
};

// The rules of config.json's model_type; nullptr for a model type no family lists.
const ArchitectureRules* architecture_for(std::string_view model_type);
// Every family's rules (the data, parsed once).
const std::vector<ArchitectureRules>& architecture_families();
// The first rule whose pattern matches the module name's trailing components; nullptr if none.
const ModuleRule* classify_module(const ArchitectureRules& arch, std::string_view module);

// The module name of a tensor: its name without the weight / scale / bias suffix
// (".weight", ".weight_scale_inv", ".scale", "_blocks", "_scales", ...); `role` receives
// "weight", "scale", "bias" or "" (a tensor that is no part of a linear module).
std::string module_of(std::string_view tensor, std::string* role = nullptr);

// Head geometry the KV and fused-QKV splits need (from config.json).
struct HeadGeometry {
  uint64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// One part of a tensor as the engine cuts it: rows [begin, end) of the tensor (or of one
// expert) go, divided, to the ranks.
struct PartSlice {
  std::string part;       // "q", "k", "v", "gate", "up", "" (the whole tensor)
  uint64_t begin = 0, size = 0;  // in the split dimension of the checkpoint tensor
  uint64_t per_rank = 0;  // each rank's share of this part
  uint64_t replicas = 1;  // ranks holding the same share (KV heads < TP)
};

// How one 2-D (or expert-stacked) linear weight is laid out on the ranks.
struct TensorPartition {
  Split split = Split::none;
  uint64_t rows = 0, cols = 0;     // one expert's (or the tensor's) output rows, input columns
  uint64_t rank_rows = 0, rank_cols = 0;  // what one rank holds of them
  uint32_t degree = 1;             // the TP degree this tensor is split by (TP, TP / EP, or 1)
  std::vector<PartSlice> parts;    // in the split dimension; one part unless fused / KV
  uint64_t experts = 0, experts_per_rank = 0;  // fused or per-expert tensors (0 otherwise)
  std::string problem;             // non-empty: the split itself is impossible (rows % TP)
};

// The partition of a weight of `shape` (rows first; fused experts [E, rows, ...]).
TensorPartition partition_tensor(Split split, const std::vector<uint64_t>& shape, const Deployment& d,
                                 const HeadGeometry& heads, uint64_t fused_gate_up_intermediate = 0);

// The layer number of a tensor ("model.layers.12.mlp..." -> 12), or -1.
int64_t layer_of(std::string_view tensor);

}  // namespace ckpt

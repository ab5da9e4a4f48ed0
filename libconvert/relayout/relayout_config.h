// config.json of a relayout output: the input's text member by member (indent 2, its key
// order) with quantization_config.weight_block_size set to the new block, the promoted
// modules appended to the family's exclusion list (ignored_layers and/or
// modules_to_not_convert, whichever the input has; both when it has neither: vLLM and SGLang
// read ignored_layers, transformers modules_to_not_convert), and the ckptkit_relayout record
// (replaced in place on a re-run). Nothing else changes: torch_dtype stays, FP8 is left.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "deploy/relayout_plan.h"

namespace ckpt {

struct RelayoutTarget {
  uint32_t tp = 1, ep = 1;
  std::vector<std::string> engines;
};

bool rewrite_relayout_config(std::string_view input_json, const RelayoutPlan& plan, const RelayoutTarget& target,
                             const std::string& source_structure_sha256, std::string& output_json, std::string& error);

// What a relayout output's config records (read back by validate --reference and verify):
// the new block and the exclusion entries relayout added. False when `config` has no
// ckptkit_relayout member or it is malformed (`error` says which).
struct RelayoutRecord {
  uint64_t block_n = 0, block_k = 0, old_n = 0, old_k = 0;
  std::vector<std::string> bf16_modules;
};
bool read_relayout_record(simdjson::dom::element config, RelayoutRecord& record, std::string& error);

// The weights of `fp8_weights` a record's bf16_modules name (a module equal to an entry, or
// inside it: "model.layers.0.mlp.experts" holds every expert of layer 0), sorted.
std::vector<std::string> promoted_weights(const RelayoutRecord& record, const std::vector<std::string>& fp8_weights);

}  // namespace ckpt

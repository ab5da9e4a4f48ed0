// DeepSeek-V4-Flash / V4-Flash-0731 model profile (deepseek-v4.md §3, §6, §10).
//
// The tensor catalogue is data: schemas/profiles/deepseek-v4-flash.json names every
// tensor with shapes written as expressions over config.json values. This module
// checks config.json (§6 "Validator checks"), expands the profile into the exact list
// of expected tensors, and compares a checkpoint against it. synth uses the same
// expansion, so the generator and the validator cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <simdjson.h>

#include "core/findings.h"
#include "formats/model_view.h"

namespace ckpt {

struct ExpectedTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
};

// Checks `config` (§6) and expands the profile into `out` (order: globals, then every
// block in profile order). Findings name `config_display`. Returns false when the
// config is too broken to derive a catalogue (missing keys, inconsistent
// compress_ratios or DSpark keys, unreadable weight_block_size, a profile error);
// rule violations that still leave the structure defined are reported and return true.
bool dsv4_expected_catalogue(simdjson::dom::element config, const std::string& config_display, Findings& f,
                             std::vector<ExpectedTensor>& out);

// Full tensor-contract check of a safetensors checkpoint against the catalogue derived
// from view.config, the dtype policy, and FP8/MXFP4 scale pairing. Accepts the
// converted form (a BF16 P.weight where the catalogue has an FP8 pair, without P.scale).
void check_deepseek_v4(const ModelView& view, Findings& f);

}  // namespace ckpt

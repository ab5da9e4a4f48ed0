// Every tensor of a checkpoint derived from its config.json alone (name, dtype, shape), for
// DeepSeek-V3/R1, DeepSeek-V4, Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE, gpt-oss and Llama/Mistral/Qwen dense
// models, in the family's released layout and quantization (block FP8, MXFP4 experts, or
// none). It answers a deployment question before anything but a 10 KB file is downloaded;
// when the headers are present they are the truth and this list is compared with them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <simdjson.h>

#include "core/findings.h"

namespace ckpt {

struct QuantScheme;

struct DeployTensor {
  std::string name;
  std::string dtype;            // safetensors dtype name
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
};

uint64_t deploy_tensor_bytes(const std::string& dtype, const std::vector<uint64_t>& shape);

// The config of the language model: `text_config` when config.json nests it (Qwen3.5's
// multimodal releases: dimensions, layer types and model_type "qwen3_5_moe_text" live there),
// else the config itself. Every function below reads the language model's config.
simdjson::dom::element language_config(simdjson::dom::element config);

// Appends the model's tensors (the main model: MTP / next-token-prediction layers, which the
// engines load only for speculative decoding, are left out) to `out`. False with an error
// finding naming config.json and the key when the family is unknown or a key it needs is
// missing or not a positive integer; a quantization the family's release never used (e.g. an
// FP8 gpt-oss) is refused the same way, never guessed.
bool tensors_from_config(simdjson::dom::element config, const QuantScheme& scheme, Findings& f,
                         std::vector<DeployTensor>& out);

// An upper estimate of how many tensors `config` describes, from its layer count and its
// largest expert count before any tensor is made: (layers + 1) * (3 * experts + 32).
// tensors_from_config refuses a config above kMaxDerivedTensors (2^18, over 3x the largest
// real checkpoint: DeepSeek-V4-Flash has 72,317 tensors) by this estimate, at once.
uint64_t derived_tensor_estimate(simdjson::dom::element config);
inline constexpr uint64_t kMaxDerivedTensors = uint64_t{1} << 18;

// Which of the `layers` layers of a hybrid (Qwen3-Next, Qwen3.5) are full attention:
// config.json's `layer_types` when it lists every layer, else every
// `full_attention_interval`-th (default 4). One pass over the list.
std::vector<bool> full_attention_layers(simdjson::dom::element config, uint64_t layers);

// True for a tensor of an MTP / next-token-prediction layer (layers.N with N >=
// num_hidden_layers, or DeepSeek-V4's mtp.N): not part of the served main model.
bool is_mtp_tensor(simdjson::dom::element config, const std::string& name);

}  // namespace ckpt

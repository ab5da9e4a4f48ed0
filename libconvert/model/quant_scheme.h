// Quantization formats as data (schemas/quant/*.json, schema schemas/quant-profile.schema.json).
//
// A scale's name does not tell its dtype or layout, so each format is a profile naming its
// config marker, its weight and scale tensor names, which scale dtypes it takes and what they
// mean (a multiplier, or an E8M0 exponent), the scale's shape rule and the tensors dropped with
// the weight. detect_quant_scheme() picks the profile from config.json and resolves its
// config-dependent parts (block size, strategy) into a QuantScheme that pairing
// (model/pairing.h) applies. A config that names a quantization method no profile knows is an
// error, never a guess.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ckpt {

class JsonDoc;

struct EmbeddedQuantProfile {
  std::string name;  // file stem, e.g. "fp8-block"
  std::string json;  // the file's text
};
const std::vector<EmbeddedQuantProfile>& embedded_quant_profiles();  // generated at build time

enum class ScaleMeaning : uint8_t { multiplier, e8m0 };
// block: [ceil(M/bm), ceil(N/bn)]; channel: [M, 1] or [M]; tensor: [] or [1];
// block4d: [ceil(M/bm), 1, ceil(N/bn), 1]; mxfp4_blocks: gpt-oss X_blocks / X_scales.
enum class ScaleShape : uint8_t { block, channel, tensor, block4d, mxfp4_blocks };
const char* scale_shape_name(ScaleShape s);

struct ScaleRule {
  std::string suffix;          // ".weight_scale_inv"
  std::vector<Dtype> dtypes;   // accepted scale dtypes
  ScaleMeaning meaning = ScaleMeaning::multiplier;
};

struct QuantScheme {
  std::string profile;          // the quantization profile's name; "" = none detected (legacy rules)
  std::string quant_method;     // quantization_config.quant_method as written ("" when absent)
  std::string weight_suffix = ".weight";
  bool bare_names = false;      // DeepSeek-V4: P pairs with P.scale
  std::vector<ScaleRule> scales;  // candidates, in order
  bool e8m0_declared = false;   // the config says E8M0 (scale_fmt: ue8m0): a U8 scale is an exponent
  ScaleShape shape = ScaleShape::block;
  bool block_given = false;     // the block came from the config (else 128 x 128 assumed)
  uint64_t block_rows = 128, block_cols = 128;
  std::vector<std::string> dropped;  // ".input_scale", ".activation_scale"
  std::string exclusion_key;         // "quantization_config.modules_to_not_convert"
  std::vector<std::string> excluded; // that list's entries, as written
};

// The legacy rules when no quantization profile applies (no config, or no quant_method):
// X.weight with X.scale (F8_E8M0) or X.weight_scale_inv (F32), 128 x 128 blocks.
QuantScheme legacy_quant_scheme();

// Picks the profile whose detect rule matches `config` (config.json; may be null) and resolves
// it. Returns false with `error` set when quantization_config names a quant_method (or format,
// strategy, quant_algo) that no profile describes, or a value the profile needs is malformed.
// A config without quantization_config, or one without quant_method, gives the legacy scheme.
bool detect_quant_scheme(const JsonDoc* config, QuantScheme& out, std::string& error);

// Names of every embedded quantization profile, sorted.
std::vector<std::string> quant_profile_names();

}  // namespace ckpt

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
#include <string_view>
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
  std::string exclusion_source;      // where that list was read, for messages ("hf_quant_config.json quantization.exclude_modules")
  // The file(s) the profile was read from: "config.json", "hf_quant_config.json" (ModelOpt),
  // "params.json" (Mistral native), or "config.json and hf_quant_config.json" (both, agreeing).
  std::string config_file = "config.json";
  // Side files that only describe the quantization (hf_quant_config.json): a dequantized
  // output does not carry them (convert leaves them out), since their quantization is gone.
  std::vector<std::string> quant_only_files;
};

// The configuration files of a checkpoint directory that may describe its quantization:
// config.json, and the side files some producers write instead of (or beside) its
// quantization_config: hf_quant_config.json (NVIDIA ModelOpt), params.json (Mistral's native
// layout). A side file that is present but could not be read or parsed has doc == nullptr
// (the loader reported why); detection then refuses rather than treat it as unquantized.
struct QuantSideConfig {
  std::string file;
  const JsonDoc* doc = nullptr;
};
struct QuantConfigInputs {
  const JsonDoc* config = nullptr;  // config.json; may be null
  std::vector<QuantSideConfig> side;
};

struct QuantDetectError {
  std::string code = "QUANT_PROFILE_UNKNOWN";  // or QUANT_CONFIG_CONFLICT, QUANT_CONFIG_UNREADABLE
  std::string file = "config.json";            // the file (or "config.json and hf_quant_config.json")
  std::string message;
};

// The legacy rules when no quantization profile applies (no config, or no quant_method):
// X.weight with X.scale (F8_E8M0) or X.weight_scale_inv (F32), 128 x 128 blocks.
QuantScheme legacy_quant_scheme();

// Picks the profile whose detect rule matches `config` (config.json; may be null) and resolves
// it. Returns false with `error` set when quantization_config names a quant_method (or format,
// strategy, quant_algo) that no profile describes, or a value the profile needs is malformed.
// A config without quantization_config, or one without quant_method, gives the legacy scheme.
bool detect_quant_scheme(const JsonDoc* config, QuantScheme& out, std::string& error);

// The same over every configuration file of the directory. A side file (hf_quant_config.json,
// params.json) selects the profile whose `side_config` reads it (ModelOpt's producer.name
// "modelopt", params.json's quantization section); its values are read through the profile's
// key map, so an hf_quant_config.json's quantization.exclude_modules is the exclusion list as
// config.json's quantization_config.exclude_modules is. Refusals (false, `error` set):
//   QUANT_PROFILE_UNKNOWN   a value no profile describes (quant_algo NVFP4, an unknown
//                           producer, a params.json quantization section of another format),
//                           naming the file and the value;
//   QUANT_CONFIG_CONFLICT   config.json's quantization_config and the side file disagree (another
//                           profile, or a mapped value that differs), naming both files;
//   QUANT_CONFIG_UNREADABLE a side file present but unreadable.
bool detect_quant_scheme(const QuantConfigInputs& in, QuantScheme& out, QuantDetectError& error);

// The inputs of an opened checkpoint (its config.json and the side files it lists).
struct Checkpoint;
QuantConfigInputs quant_config_inputs(const Checkpoint& ck);
bool detect_quant_scheme(const Checkpoint& ck, QuantScheme& out, QuantDetectError& error);

// True when module `name` (a weight's name without its suffix) is one the exclusion list
// leaves unquantized, each entry matched as the tool that wrote it matches it
// (model/module_pattern.h: "re:" regexes, fnmatch globs, whole dotted components). An entry
// that cannot be evaluated is refused when the scheme is detected (QUANT_PROFILE_UNKNOWN).
bool module_excluded(const QuantScheme& s, std::string_view name);

// Names of every embedded quantization profile, sorted.
std::vector<std::string> quant_profile_names();

}  // namespace ckpt

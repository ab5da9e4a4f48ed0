#include "profiles/registry.h"

#include "formats/json.h"
#include "profiles/deepseek_v4.h"
#include "model/quant_config.h"
#include "profiles/embedded.h"
#include "profiles/qwen3next.h"

namespace ckpt {
namespace {

struct DetectRule {
  std::string format;  // "safetensors", "gguf" or "any"
  std::string key;     // config.json key or GGUF KV key
  std::string equals;
};

std::optional<DetectRule> read_detect_rule(const EmbeddedProfile& p) {
  JsonDoc doc;
  std::string error;
  if (!doc.parse(p.json, error)) return std::nullopt;
  auto detect = json_get(doc.root(), "detect");
  if (!detect) return std::nullopt;
  DetectRule r;
  r.format = json_string(doc.root(), "format").value_or("any");
  r.key = json_string(*detect, "key").value_or("");
  r.equals = json_string(*detect, "equals").value_or("");
  if (r.key.empty()) return std::nullopt;
  return r;
}

bool rule_matches(const DetectRule& r, const LoadedModel& m) {
  if (m.format == ModelFormat::gguf) {
    if (r.format == "safetensors" || !m.gguf) return false;
    return m.gguf->get_string(r.key) == r.equals;
  }
  if (r.format == "gguf" || !m.checkpoint.config) return false;
  return json_string(m.checkpoint.config->root(), r.key) == r.equals;
}

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> names{"generic"};
  for (const auto& p : embedded_profiles())
    if (p.name != "generic") names.push_back(p.name);
  return names;
}

PairingOptions pairing_options_for(const LoadedModel& m, const std::string& profile, Findings& f) {
  PairingOptions o;
  o.allow_bare_fp8_names = profile == "deepseek-v4-flash";
  const JsonDoc* cfg = m.checkpoint.config.get();
  const WeightBlockSize wbs = cfg ? read_weight_block_size(cfg->root()) : WeightBlockSize{};
  // The quantization profile (schemas/quant/*.json) names the scales, their dtypes and shapes.
  QuantDetectError error;
  const bool known = m.format != ModelFormat::safetensors || detect_quant_scheme(m.checkpoint, o.scheme, error);
  if (wbs.status == WeightBlockSize::invalid && !(known && quant_scheme_ignores_null_block(o.scheme, wbs))) {
    f.error("CFG_WEIGHT_BLOCK_SIZE", "config.json", "", std::nullopt, weight_block_size_problem(wbs));
    o.scheme = legacy_quant_scheme();
    return o;
  }
  if (!known) {
    f.error(error.code, error.file, "", std::nullopt, error.message);
    o.scheme = legacy_quant_scheme();
    return o;
  }
  if (o.scheme.block_given) {
    o.block_rows = o.scheme.block_rows;
    o.block_cols = o.scheme.block_cols;
    return o;
  }
  if (wbs.status == WeightBlockSize::valid) {
    o.block_rows = wbs.rows;
    o.block_cols = wbs.cols;
    return o;
  }
  const bool blocks = o.scheme.shape == ScaleShape::block || o.scheme.shape == ScaleShape::block4d;
  for (const auto& t : m.view.tensors)
    if (blocks && t.dtype == Dtype::F8_E4M3) {
      f.info("FP8_BLOCK_ASSUMED", "config.json", "", std::nullopt,
             "no quantization_config.weight_block_size: FP8 scale grids checked against 128 x 128 blocks");
      break;
    }
  return o;
}

bool is_known_profile(const std::string& name) {
  for (const auto& n : profile_names())
    if (n == name) return true;
  return false;
}

std::string detect_profile(const LoadedModel& model) {
  for (const auto& p : embedded_profiles()) {
    auto rule = read_detect_rule(p);
    if (rule && rule_matches(*rule, model)) return p.name;
  }
  return "generic";
}

void run_profile(const std::string& name, const LoadedModel& model, Findings& findings) {
  if (name == "deepseek-v4-flash") {
    if (model.format != ModelFormat::safetensors) {
      findings.error("PROFILE_FORMAT", model.path, "", std::nullopt,
                     "profile deepseek-v4-flash applies to safetensors checkpoints, not GGUF");
      return;
    }
    check_deepseek_v4(model.view, findings);
    return;
  }
  if (name == "qwen3next") {
    if (!model.gguf) {
      findings.error("PROFILE_FORMAT", model.path, "", std::nullopt,
                     "profile qwen3next applies to GGUF files");
      return;
    }
    check_qwen3next(*model.gguf, model.gguf_file, model.view.files[0], findings);
    return;
  }
  // generic: FP8 weight/scale pairing by the .weight naming convention only.
  if (model.format == ModelFormat::safetensors)
    check_fp8_pairing(model.view, pairing_options_for(model, name, findings), findings);
}

}  // namespace ckpt

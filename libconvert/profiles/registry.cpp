#include "profiles/registry.h"

#include "formats/json.h"
#include "profiles/deepseek_v4.h"
#include "profiles/embedded.h"
#include "profiles/qwen3next.h"
#include "validate/pairing.h"

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

// FP8 block size from config.json's quantization_config.weight_block_size, or
// DeepSeek's 128 x 128 when the checkpoint does not say.
PairingOptions generic_pairing_options(const LoadedModel& m, Findings& f) {
  PairingOptions o;
  const JsonDoc* cfg = m.checkpoint.config.get();
  auto q = cfg ? json_get(cfg->root(), "quantization_config") : std::nullopt;
  auto block = q ? json_int_array(*q, "weight_block_size") : std::nullopt;
  if (block && block->size() == 2 && (*block)[0] > 0 && (*block)[1] > 0) {
    o.block_rows = static_cast<uint64_t>((*block)[0]);
    o.block_cols = static_cast<uint64_t>((*block)[1]);
    return o;
  }
  for (const auto& t : m.view.tensors)
    if (t.dtype == Dtype::F8_E4M3) {
      f.info("FP8_BLOCK_ASSUMED", "config.json", "", std::nullopt,
             "no quantization_config.weight_block_size: FP8 scale grids checked against 128 x 128 blocks");
      break;
    }
  return o;
}

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> names{"generic"};
  for (const auto& p : embedded_profiles())
    if (p.name != "generic") names.push_back(p.name);
  return names;
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
    check_fp8_pairing(model.view, generic_pairing_options(model, findings), findings);
}

}  // namespace ckpt

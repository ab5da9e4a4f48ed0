#include "plan/config_rewrite.h"

#include <algorithm>
#include <array>
#include <optional>

#include "formats/json.h"
#include "formats/json_pretty.h"
#include "plan/quant_module_lists.h"

namespace ckpt {

namespace {

// quantization_config members the rewrite sets, in the order missing ones are appended: the
// two module lists (what this conversion left in BF16). Every other member is the input's,
// never invented: a default scale_fmt "ue8m0" or weight_block_size [128, 128] would tell
// loaders the checkpoint holds E8M0 block scales it never had.
constexpr std::array<std::string_view, 2> kQuantKeys = {kIgnoredLayers, kNotConvert};

void append_unique(std::vector<std::string>& list, std::string_view name) {
  if (std::find(list.begin(), list.end(), name) == list.end()) list.emplace_back(name);
}

// QW list, then the modules this conversion keeps in BF16, then what the input listed.
std::vector<std::string> module_list(const std::vector<std::string>& extra, const std::vector<std::string>& kept) {
  std::vector<std::string> out;
  for (const auto& m : qw_bf16_modules()) append_unique(out, m);
  for (const auto& m : extra) append_unique(out, m);
  for (const auto& m : kept) append_unique(out, m);
  return out;
}

struct QuantPlan {
  std::optional<simdjson::dom::element> input;  // the input's quantization_config object
  std::vector<std::string> ignored_layers;
  std::vector<std::string> not_convert;
};

bool plan_quant(simdjson::dom::element root, const ConfigRewriteInput& in, QuantPlan& plan, std::string& error) {
  plan.input = json_get(root, "quantization_config");
  std::vector<std::string> kept_ignored, kept_not_convert;
  if (plan.input) {
    if (!plan.input->is_object()) {
      error = "quantization_config is not an object";
      return false;
    }
    auto a = quant_module_list(*plan.input, kIgnoredLayers, error);
    if (!a) return false;
    auto b = quant_module_list(*plan.input, kNotConvert, error);
    if (!b) return false;
    kept_ignored = std::move(*a);
    kept_not_convert = std::move(*b);
  }
  plan.ignored_layers = module_list(in.extra_bf16_modules, kept_ignored);
  plan.not_convert = module_list(in.extra_bf16_modules, kept_not_convert);
  return true;
}

// The input's members in their order with the edited ones substituted, then the module
// lists it lacked. QW also defaults activation_scheme, fmt, scale_fmt and weight_block_size
// to V4's values when absent; ckptkit does not invent them (V4 inputs have all four).
void write_quant(JsonPrettyWriter& w, const QuantPlan& plan) {
  std::array<bool, kQuantKeys.size()> seen{};
  auto write_member = [&](std::string_view key, std::optional<simdjson::dom::element> value) {
    w.key(key);
    if (key == "quant_method") w.string("fp8");  // SGLang's entry point that routes MXFP4 experts
    else if (key == kIgnoredLayers) w.string_array(plan.ignored_layers);
    else if (key == kNotConvert) w.string_array(plan.not_convert);
    else if (value) w.element(*value);
  };
  w.begin_object();
  simdjson::dom::object obj;
  if (plan.input && !plan.input->get_object().get(obj)) {  // checked to be an object in plan_quant
    for (auto member : obj) {
      for (size_t i = 0; i < kQuantKeys.size(); ++i)
        if (member.key == kQuantKeys[i]) seen[i] = true;
      write_member(member.key, member.value);
    }
  }
  for (size_t i = 0; i < kQuantKeys.size(); ++i)
    if (!seen[i]) write_member(kQuantKeys[i], std::nullopt);
  w.end_object();
}

void write_conversion(JsonPrettyWriter& w, const ConfigRewriteInput& in) {
  std::vector<std::string> bf16_modules;
  for (const auto& m : in.extra_bf16_modules) append_unique(bf16_modules, m);
  w.begin_object();
  w.key("tool");
  w.string("ckptkit");
  w.key("version");
  w.string(in.tool_version);
  w.key("experts");
  w.string(in.experts_mode);
  if (!in.expert_rounding.empty()) {  // the INT8-shift form: what a loader must know to decode it
    w.key("expert_format");
    w.begin_object();
    w.key("format");
    w.string("int8-shift");
    w.key("headroom_bits");
    w.uint64(in.expert_headroom_bits);
    w.key("rounding");
    w.string(in.expert_rounding);
    w.key("tensors");
    w.string_array({"{block}.ffn.experts.{w13,w2}.mxfp4", "{block}.ffn.experts.{w13,w2}.shift2",
                    "{block}.ffn.experts.{w13,w2}.channel_scale"});
    w.end_object();
  }
  w.key("dense_fp8_to");
  w.string("bfloat16");
  w.key("converted_tensors");
  w.uint64(in.converted_tensors);
  w.key("dropped_scales");
  w.uint64(in.dropped_scales);
  w.key("bf16_modules");
  w.string_array(bf16_modules);
  w.key("source_structure_sha256");
  w.string(in.source_structure_sha256);
  w.end_object();
}

// Parses a model's JSON file whose top level must be an object; errors name the file.
bool parse_object(std::string_view json, const char* file, JsonDoc& doc, simdjson::dom::object& root,
                  std::string& error) {
  if (!doc.parse(json, error)) {
    error = std::string(file) + ": " + error;
    return false;
  }
  if (doc.root().get_object().get(root)) {
    error = std::string(file) + ": top-level value is not an object";
    return false;
  }
  return true;
}

// The end both model files share: the ckptkit_conversion record (appended when the input
// had none to replace in place), the object closed, the text with its final newline.
void finish_document(JsonPrettyWriter& w, bool has_conversion, const ConfigRewriteInput& in, std::string& output_json) {
  if (!has_conversion) {
    w.key("ckptkit_conversion");
    write_conversion(w, in);
  }
  w.end_object();
  output_json = w.text() + "\n";
}

}  // namespace

const std::vector<std::string>& qw_bf16_modules() {
  static const std::vector<std::string> kModules = {
      "embed_tokens",  "lm_head",      "norm",          "self_attn",    "input_layernorm",
      "post_attention_layernorm",      "gate",          "shared_experts", "hc_attn_fn",
      "hc_attn_base",  "hc_attn_scale", "hc_ffn_fn",    "hc_ffn_base",  "hc_ffn_scale",
      "hc_head_fn",    "hc_head_base", "hc_head_scale"};
  return kModules;
}

bool rewrite_params_json(std::string_view input_json, const ConfigRewriteInput& in, std::string& output_json,
                         std::string& error) {
  JsonDoc doc;
  simdjson::dom::object root;
  if (!parse_object(input_json, "params.json", doc, root, error)) return false;
  const bool keep_quant = in.output_has_fp8 || in.output_has_mxfp4_experts;
  JsonPrettyWriter w;
  bool has_conversion = false;
  w.begin_object();
  for (auto member : root) {
    if (member.key == "quantization" && !keep_quant) continue;
    w.key(member.key);
    if (member.key == "ckptkit_conversion") {
      has_conversion = true;
      write_conversion(w, in);
    } else {
      w.element(member.value);
    }
  }
  finish_document(w, has_conversion, in, output_json);
  return true;
}

bool rewrite_config(std::string_view input_json, const ConfigRewriteInput& in, std::string& output_json,
                    std::string& error) {
  JsonDoc doc;
  simdjson::dom::object root;
  if (!parse_object(input_json, "config.json", doc, root, error)) return false;
  QuantPlan plan;
  if (!plan_quant(doc.root(), in, plan, error)) {
    error = "config.json: " + error;
    return false;
  }
  // Quantized tensors left (kept MXFP4 experts or FP8) still need SGLang's FP8 loader;
  // with none left the section must go, or transformers would try to dequantise again.
  const bool keep_quant = in.output_has_fp8 || in.output_has_mxfp4_experts;

  JsonPrettyWriter w;
  bool has_dtype = false, has_conversion = false, has_expert_dtype = false;
  w.begin_object();
  for (auto member : root) {
    if (member.key == "expert_dtype" && !in.expert_dtype.empty()) {
      has_expert_dtype = true;
      w.key(member.key);
      w.string(in.expert_dtype);
    } else if (member.key == "torch_dtype") {
      has_dtype = true;
      w.key(member.key);
      w.string("bfloat16");
    } else if (member.key == "quantization_config") {
      if (!keep_quant) continue;
      w.key(member.key);
      if (in.keep_quant_config_verbatim)
        w.element(member.value);
      else
        write_quant(w, plan);
    } else if (member.key == "ckptkit_conversion") {  // a re-run replaces it in place
      has_conversion = true;
      w.key(member.key);
      write_conversion(w, in);
    } else {
      w.key(member.key);
      w.element(member.value);
    }
  }
  if (!has_dtype) {
    w.key("torch_dtype");
    w.string("bfloat16");
  }
  if (!in.expert_dtype.empty() && !has_expert_dtype) {
    w.key("expert_dtype");
    w.string(in.expert_dtype);
  }
  if (keep_quant && !plan.input) {
    // Quantized tensors left but nothing describing them: writing a quantization_config
    // would invent one (which method, which scale format, which block).
    error = "config.json: the output keeps quantized tensors (FP8 or MXFP4) but the input has no "
            "quantization_config to keep; refusing to invent one";
    return false;
  }
  finish_document(w, has_conversion, in, output_json);
  return true;
}

}  // namespace ckpt

// config.json rewrite for a converted checkpoint (deepseek-v4.md §9 "config rewrite").
// Reproduces the QW converter's update_config and extends it: DSpark/MTP projections
// that must stay BF16 are added to the ignore lists, the input's key order is kept
// (QW re-sorts), and a fully dequantised checkpoint loses quantization_config so
// transformers does not route it through its FP8 loader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

struct ConfigRewriteInput {
  std::string experts_mode = "keep";      // "keep" (MXFP4 experts kept), "int8-shift", "bf16"
  uint64_t converted_tensors = 0;         // FP8 weights now BF16
  uint64_t dropped_scales = 0;            // scales consumed
  bool output_has_fp8 = false;            // any F8_E4M3 left in the output
  bool output_has_mxfp4_experts = false;  // I8 experts + E8M0 scales kept
  std::vector<std::string> extra_bf16_modules;  // e.g. "main_proj", "e_proj", "h_proj" when those tensors exist
  std::string tool_version;               // ckptkit version
  std::string source_structure_sha256;    // of the input checkpoint
  // INT8-shift experts only: recorded under ckptkit_conversion.expert_format.
  uint64_t expert_headroom_bits = 3;
  std::string expert_rounding;            // "half-away" or "half-even"; empty for other modes
  std::string expert_dtype;               // when set ("bf16"), replaces or adds config.expert_dtype
  // Quantized tensors left in a format SGLang's FP8 entry point does not route (gpt-oss MXFP4
  // blocks kept): quantization_config is copied as it is rather than rewritten.
  bool keep_quant_config_verbatim = false;
};

// Mistral's native params.json of a dequantized checkpoint: the same text with its
// "quantization" section removed (no FP8 is left) and ckptkit_conversion recorded as in
// config.json (replaced in place on a re-run). Indent 2, input key order. False with `error`
// when the input is not a JSON object.
bool rewrite_params_json(std::string_view input_json, const ConfigRewriteInput& in, std::string& output_json,
                         std::string& error);

// SGLang module names QW lists in ignored_layers / modules_to_not_convert, in its order.
const std::vector<std::string>& qw_bf16_modules();

// Rewrites `input_json` (a config.json object) into `output_json`: indent 2, input key
// order, new keys appended, trailing newline. Idempotent: rewriting the output again
// with the same `in` gives the same text. Returns false with `error` set when the input
// is not a JSON object or a field it must edit has the wrong type.
bool rewrite_config(std::string_view input_json, const ConfigRewriteInput& in, std::string& output_json,
                    std::string& error);

}  // namespace ckpt

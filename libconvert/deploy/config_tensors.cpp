// Tensors from config.json (config_tensors.h). One builder per family; shapes as the
// family's transformers modeling file and released checkpoints have them.
#include "deploy/config_tensors.h"

#include <algorithm>
#include <optional>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "deploy/partition_model.h"
#include "formats/json.h"
#include "model/quant_scheme.h"
#include "profiles/deepseek_v4.h"

namespace ckpt {

uint64_t deploy_tensor_bytes(const std::string& dtype, const std::vector<uint64_t>& shape) {
  auto d = dtype_from_name(dtype);
  const uint64_t bits = d ? dtype_bits(*d) : 8;
  auto n = checked_product(shape);
  auto total_bits = n ? checked_mul(*n, bits) : std::nullopt;
  return total_bits ? ceil_div(*total_bits, 8) : UINT64_MAX;
}

namespace {

// Bounds on what a config may describe: every dimension, and the number of tensors (the
// largest released MoE checkpoints have about 150k).
constexpr int64_t kMaxConfigValue = int64_t{1} << 24;

class Builder {
 public:
  Builder(simdjson::dom::element config, const QuantScheme& scheme, Findings& f, std::vector<DeployTensor>& out)
      : config_(config), scheme_(scheme), f_(f), out_(out) {}

  // A positive integer key; records a finding and returns 0 when missing or invalid.
  uint64_t need(const char* key) {
    auto v = json_int(config_, key);
    if (v && *v > kMaxConfigValue) return too_large(key, *v);
    if (!v || *v <= 0) {
      if (ok_)
        f_.error("PREFLIGHT_CONFIG_KEY", "config.json", "", std::nullopt,
                 std::string("config.json has no positive integer ") + key +
                     ": the tensor shapes cannot be derived from it");
      ok_ = false;
      return 0;
    }
    return static_cast<uint64_t>(*v);
  }
  uint64_t opt(const char* key, uint64_t fallback) {
    auto v = json_int(config_, key);
    if (v && *v > kMaxConfigValue) return too_large(key, *v);
    return v && *v > 0 ? static_cast<uint64_t>(*v) : fallback;
  }
  bool ok() const { return ok_; }

  // A tensor of the model. A config whose model would exceed kMaxDerivedTensors tensors or
  // 2^64 bytes is refused (hostile or broken: no real model comes near), never allocated.
  void plain(const std::string& name, const std::vector<uint64_t>& shape, const std::string& dtype = "BF16") {
    if (!ok_) return;
    const uint64_t bytes = deploy_tensor_bytes(dtype, shape);
    auto total = checked_add(total_, bytes);
    if (out_.size() >= kMaxDerivedTensors || bytes == UINT64_MAX || !total) {
      f_.error("PREFLIGHT_CONFIG_KEY", "config.json", "", std::nullopt,
               "config.json describes a model of more than " + std::to_string(kMaxDerivedTensors) +
                   " tensors or 2^64 bytes: refused, no model comes near it");
      ok_ = false;
      return;
    }
    total_ = *total;
    out_.push_back({name, dtype, shape, bytes});
  }
  // A linear weight [rows, cols]: block FP8 (with its scale) unless the config leaves it
  // unquantized; `quantizable` false for routers, embeddings and the LM head.
  void linear(const std::string& module, uint64_t rows, uint64_t cols, bool quantizable = true,
              const std::string& scale_dtype = "F32") {
    const bool fp8 = quantizable && scheme_.profile == "fp8-block" && !module_excluded(scheme_, module);
    if (!fp8) return plain(module + ".weight", {rows, cols});
    plain(module + ".weight", {rows, cols}, "F8_E4M3");
    plain(module + ".weight_scale_inv", {ceil_div(rows, scheme_.block_rows), ceil_div(cols, scheme_.block_cols)},
          scale_dtype);
  }

  simdjson::dom::element config() const { return config_; }
  const QuantScheme& scheme() const { return scheme_; }
  Findings& findings() { return f_; }

 private:
  simdjson::dom::element config_;
  const QuantScheme& scheme_;
  Findings& f_;
  std::vector<DeployTensor>& out_;
  bool ok_ = true;
  uint64_t total_ = 0;

  uint64_t too_large(const char* key, int64_t v) {
    if (ok_)
      f_.error("PREFLIGHT_CONFIG_KEY", "config.json", "", std::nullopt,
               std::string("config.json's ") + key + " " + std::to_string(v) + " is larger than " +
                   std::to_string(kMaxConfigValue) + ": no model has such a dimension");
    ok_ = false;
    return 0;
  }
};

std::string layer(uint64_t l) { return "model.layers." + std::to_string(l) + "."; }

bool tied(simdjson::dom::element c) {
  bool b = false;
  auto e = json_get(c, "tie_word_embeddings");
  return e && e->get(b) == simdjson::SUCCESS && b;
}

void globals(Builder& b, uint64_t vocab, uint64_t hidden) {
  b.plain("model.embed_tokens.weight", {vocab, hidden});
  b.plain("model.norm.weight", {hidden});
  if (!tied(b.config())) b.plain("lm_head.weight", {vocab, hidden});
}

void mlp(Builder& b, const std::string& prefix, uint64_t inter, uint64_t hidden, const std::string& scale = "F32") {
  b.linear(prefix + "gate_proj", inter, hidden, true, scale);
  b.linear(prefix + "up_proj", inter, hidden, true, scale);
  b.linear(prefix + "down_proj", hidden, inter, true, scale);
}

void experts(Builder& b, const std::string& prefix, uint64_t count, uint64_t inter, uint64_t hidden,
             const std::string& scale = "F32") {
  for (uint64_t e = 0; e < count && b.ok(); ++e) mlp(b, prefix + "experts." + std::to_string(e) + ".", inter, hidden, scale);
}

bool deepseek_v3(Builder& b) {
  const uint64_t H = b.need("hidden_size"), L = b.need("num_hidden_layers"), V = b.need("vocab_size");
  const uint64_t nh = b.need("num_attention_heads"), I = b.need("intermediate_size");
  const uint64_t kv_rank = b.need("kv_lora_rank"), nope = b.need("qk_nope_head_dim");
  const uint64_t rope = b.need("qk_rope_head_dim"), vdim = b.need("v_head_dim");
  const uint64_t E = b.opt("n_routed_experts", 0), moe_i = E ? b.need("moe_intermediate_size") : 0;
  const uint64_t shared = b.opt("n_shared_experts", 0), dense = b.opt("first_k_dense_replace", 0);
  const uint64_t freq = b.opt("moe_layer_freq", 1);
  const uint64_t q_rank = b.opt("q_lora_rank", 0);
  if (!b.ok()) return false;
  globals(b, V, H);
  for (uint64_t l = 0; l < L && b.ok(); ++l) {
    const std::string p = layer(l);
    b.plain(p + "input_layernorm.weight", {H});
    b.plain(p + "post_attention_layernorm.weight", {H});
    if (q_rank) {
      b.linear(p + "self_attn.q_a_proj", q_rank, H);
      b.plain(p + "self_attn.q_a_layernorm.weight", {q_rank});
      b.linear(p + "self_attn.q_b_proj", nh * (nope + rope), q_rank);
    } else {
      b.linear(p + "self_attn.q_proj", nh * (nope + rope), H);
    }
    b.linear(p + "self_attn.kv_a_proj_with_mqa", kv_rank + rope, H);
    b.plain(p + "self_attn.kv_a_layernorm.weight", {kv_rank});
    b.linear(p + "self_attn.kv_b_proj", nh * (nope + vdim), kv_rank);
    b.linear(p + "self_attn.o_proj", H, nh * vdim);
    if (E && l >= dense && l % freq == 0) {
      experts(b, p + "mlp.", E, moe_i, H);
      b.linear(p + "mlp.gate", E, H, false);
      if (json_get(b.config(), "topk_method").has_value() || json_get(b.config(), "n_group").has_value())
        b.plain(p + "mlp.gate.e_score_correction_bias", {E}, "F32");
      if (shared) mlp(b, p + "mlp.shared_experts.", shared * moe_i, H);
    } else {
      mlp(b, p + "mlp.", I, H);
    }
  }
  return b.ok();
}

uint64_t head_dim(Builder& b, uint64_t hidden, uint64_t heads) {
  return b.opt("head_dim", heads ? hidden / heads : 0);
}

bool in_list(simdjson::dom::element c, const char* key, uint64_t v) {
  auto list = json_int_array(c, key);
  if (!list) return false;
  for (int64_t x : *list)
    if (x >= 0 && static_cast<uint64_t>(x) == v) return true;
  return false;
}

void attention(Builder& b, const std::string& p, uint64_t H, uint64_t nh, uint64_t nkv, uint64_t hd,
               const std::string& scale, bool qk_norm, bool gated_q = false) {
  b.linear(p + "self_attn.q_proj", nh * hd * (gated_q ? 2 : 1), H, true, scale);
  b.linear(p + "self_attn.k_proj", nkv * hd, H, true, scale);
  b.linear(p + "self_attn.v_proj", nkv * hd, H, true, scale);
  b.linear(p + "self_attn.o_proj", H, nh * hd, true, scale);
  if (qk_norm) {
    b.plain(p + "self_attn.q_norm.weight", {hd});
    b.plain(p + "self_attn.k_norm.weight", {hd});
  }
}

// The released Qwen3 FP8 checkpoints keep their block scales in BF16.
constexpr const char* kQwenScale = "BF16";

bool qwen3_moe(Builder& b) {
  const uint64_t H = b.need("hidden_size"), L = b.need("num_hidden_layers"), V = b.need("vocab_size");
  const uint64_t nh = b.need("num_attention_heads"), nkv = b.opt("num_key_value_heads", nh);
  const uint64_t E = b.opt("num_experts", b.opt("num_local_experts", 0));
  const uint64_t moe_i = E ? b.need("moe_intermediate_size") : 0, step = b.opt("decoder_sparse_step", 1);
  if (!b.ok()) return false;
  const uint64_t hd = head_dim(b, H, nh);
  globals(b, V, H);
  for (uint64_t l = 0; l < L && b.ok(); ++l) {
    const std::string p = layer(l);
    b.plain(p + "input_layernorm.weight", {H});
    b.plain(p + "post_attention_layernorm.weight", {H});
    attention(b, p, H, nh, nkv, hd, kQwenScale, true);
    if (E && !in_list(b.config(), "mlp_only_layers", l) && (l + 1) % step == 0) {
      experts(b, p + "mlp.", E, moe_i, H, kQwenScale);
      b.linear(p + "mlp.gate", E, H, false);
    } else {
      mlp(b, p + "mlp.", b.need("intermediate_size"), H, kQwenScale);
    }
  }
  return b.ok();
}

std::vector<bool> layer_kinds(simdjson::dom::element c, uint64_t layers, uint64_t interval) {
  std::vector<bool> full(layers, false);
  simdjson::dom::array types;
  auto e = json_get(c, "layer_types");
  if (e && e->get(types) == simdjson::SUCCESS && types.size() == layers) {
    size_t l = 0;
    for (auto t : types) {
      std::string_view s;
      full[l++] = t.get(s) == simdjson::SUCCESS && s == "full_attention";
    }
    return full;
  }
  for (uint64_t l = 0; l < layers; ++l) full[l] = (l + 1) % interval == 0;
  return full;
}

// Qwen3-Next and Qwen3.5-MoE: GatedDeltaNet layers with one full-attention layer in every
// few, routed experts and a gated shared expert in each. Qwen3-Next's checkpoints fuse the
// GatedDeltaNet inputs (in_proj_qkvz, in_proj_ba); Qwen3.5's keep them apart (in_proj_qkv,
// in_proj_z, in_proj_b, in_proj_a), name the language model model.language_model.*, and
// keep unquantized routed experts fused ([E, 2 x moe_intermediate_size, hidden], [E,
// hidden, moe_intermediate_size]; per-expert tensors in the FP8 release).
bool qwen3_next(Builder& b, bool qwen3_5) {
  const uint64_t H = b.need("hidden_size"), L = b.need("num_hidden_layers"), V = b.need("vocab_size");
  const uint64_t nh = b.need("num_attention_heads"), nkv = b.opt("num_key_value_heads", nh);
  const uint64_t E = b.need("num_experts"), moe_i = b.need("moe_intermediate_size");
  const uint64_t shared_i = b.opt("shared_expert_intermediate_size", 0);
  const uint64_t kh = b.need("linear_num_key_heads"), vh = b.need("linear_num_value_heads");
  const uint64_t dk = b.need("linear_key_head_dim"), dv = b.need("linear_value_head_dim");
  const uint64_t conv = b.opt("linear_conv_kernel_dim", 4), interval = b.opt("full_attention_interval", 4);
  if (!b.ok()) return false;
  const uint64_t hd = head_dim(b, H, nh);
  const std::string root = qwen3_5 ? "model.language_model." : "model.";
  // The attention output gate doubles q_proj's rows (attn_output_gate, on unless false).
  bool output_gate = true;
  auto gate = json_get(b.config(), "attn_output_gate");
  if (gate && gate->get(output_gate) != simdjson::SUCCESS) output_gate = true;
  b.plain(root + "embed_tokens.weight", {V, H});
  b.plain(root + "norm.weight", {H});
  if (!tied(b.config())) b.plain("lm_head.weight", {V, H});
  const bool fused_experts = qwen3_5 && b.scheme().profile.empty();
  const std::vector<bool> full = layer_kinds(b.config(), L, interval);
  for (uint64_t l = 0; l < L && b.ok(); ++l) {
    const std::string p = root + "layers." + std::to_string(l) + ".";
    b.plain(p + "input_layernorm.weight", {H});
    b.plain(p + "post_attention_layernorm.weight", {H});
    const std::string g = p + "linear_attn.";
    if (full[l]) {
      attention(b, p, H, nh, nkv, hd, kQwenScale, true, output_gate);
    } else if (qwen3_5) {
      b.linear(g + "in_proj_qkv", 2 * kh * dk + vh * dv, H, true, kQwenScale);
      b.linear(g + "in_proj_z", vh * dv, H, true, kQwenScale);
      b.linear(g + "in_proj_b", vh, H, true, kQwenScale);
      b.linear(g + "in_proj_a", vh, H, true, kQwenScale);
    } else {
      b.linear(g + "in_proj_qkvz", 2 * kh * dk + 2 * vh * dv, H, true, kQwenScale);
      b.linear(g + "in_proj_ba", 2 * vh, H, true, kQwenScale);
    }
    if (!full[l]) {
      b.plain(g + "conv1d.weight", {2 * kh * dk + vh * dv, 1, conv});
      b.plain(g + "A_log", {vh});
      b.plain(g + "dt_bias", {vh});
      b.plain(g + "norm.weight", {dv});
      b.linear(g + "out_proj", H, vh * dv, true, kQwenScale);
    }
    if (fused_experts) {
      b.plain(p + "mlp.experts.gate_up_proj", {E, 2 * moe_i, H});
      b.plain(p + "mlp.experts.down_proj", {E, H, moe_i});
    } else {
      experts(b, p + "mlp.", E, moe_i, H, kQwenScale);
    }
    b.linear(p + "mlp.gate", E, H, false);
    if (shared_i) {
      mlp(b, p + "mlp.shared_expert.", shared_i, H, kQwenScale);
      b.linear(p + "mlp.shared_expert_gate", 1, H, false);
    }
  }
  return b.ok();
}

bool gpt_oss(Builder& b) {
  const uint64_t H = b.need("hidden_size"), L = b.need("num_hidden_layers"), V = b.need("vocab_size");
  const uint64_t nh = b.need("num_attention_heads"), nkv = b.opt("num_key_value_heads", nh);
  const uint64_t E = b.need("num_local_experts"), I = b.need("intermediate_size");
  if (!b.ok()) return false;
  const uint64_t hd = head_dim(b, H, nh);
  const bool mx = b.scheme().profile == "mxfp4";
  globals(b, V, H);
  for (uint64_t l = 0; l < L && b.ok(); ++l) {
    const std::string p = layer(l);
    b.plain(p + "input_layernorm.weight", {H});
    b.plain(p + "post_attention_layernorm.weight", {H});
    for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      const bool o = std::string(m) == "o_proj";
      const uint64_t rows = o ? H : (m[0] == 'q' ? nh * hd : nkv * hd);
      b.linear(p + "self_attn." + m, rows, o ? nh * hd : H, false);
      b.plain(p + "self_attn." + m + ".bias", {rows});
    }
    b.plain(p + "self_attn.sinks", {nh});
    b.linear(p + "mlp.router", E, H, false);
    b.plain(p + "mlp.router.bias", {E});
    const std::string x = p + "mlp.experts.";
    if (mx) {
      b.plain(x + "gate_up_proj_blocks", {E, 2 * I, H / 32, 16}, "U8");
      b.plain(x + "gate_up_proj_scales", {E, 2 * I, H / 32}, "U8");
      b.plain(x + "down_proj_blocks", {E, H, I / 32, 16}, "U8");
      b.plain(x + "down_proj_scales", {E, H, I / 32}, "U8");
    } else {
      b.plain(x + "gate_up_proj", {E, H, 2 * I});
      b.plain(x + "down_proj", {E, I, H});
    }
    b.plain(x + "gate_up_proj_bias", {E, 2 * I});
    b.plain(x + "down_proj_bias", {E, H});
  }
  return b.ok();
}

bool dense(Builder& b, const std::string& model_type) {
  const uint64_t H = b.need("hidden_size"), L = b.need("num_hidden_layers"), V = b.need("vocab_size");
  const uint64_t nh = b.need("num_attention_heads"), nkv = b.opt("num_key_value_heads", nh);
  const uint64_t I = b.need("intermediate_size");
  if (!b.ok()) return false;
  const uint64_t hd = head_dim(b, H, nh);
  globals(b, V, H);
  for (uint64_t l = 0; l < L && b.ok(); ++l) {
    const std::string p = layer(l);
    b.plain(p + "input_layernorm.weight", {H});
    b.plain(p + "post_attention_layernorm.weight", {H});
    if (model_type == "phi3") {
      b.linear(p + "self_attn.qkv_proj", (nh + 2 * nkv) * hd, H);
      b.linear(p + "self_attn.o_proj", H, nh * hd);
      b.linear(p + "mlp.gate_up_proj", 2 * I, H);
      b.linear(p + "mlp.down_proj", H, I);
      continue;
    }
    attention(b, p, H, nh, nkv, hd, "F32", model_type == "qwen3");
    if (model_type == "qwen2")
      for (const char* m : {"q_proj", "k_proj", "v_proj"})
        b.plain(p + "self_attn." + m + ".bias", {std::string(m) == "q_proj" ? nh * hd : nkv * hd});
    mlp(b, p + "mlp.", I, H);
  }
  return b.ok();
}

bool deepseek_v4(Builder& b) {
  std::vector<ExpectedTensor> expected;
  if (!dsv4_expected_catalogue(b.config(), "config.json", b.findings(), expected)) return false;
  for (auto& e : expected)
    if (e.name.rfind("mtp.", 0) != 0) b.plain(e.name, e.shape, e.dtype);
  return true;
}

// The quantizations each family was released in; anything else is refused, not guessed.
bool quant_known(const std::string& family, const QuantScheme& s) {
  if (s.profile.empty()) return true;
  if (family == "deepseek_v4") return s.profile == "deepseek-v4" || s.profile == "fp8-block";
  if (family == "gpt_oss") return s.profile == "mxfp4";
  return s.profile == "fp8-block";
}

}  // namespace

simdjson::dom::element language_config(simdjson::dom::element config) {
  auto text = json_get(config, "text_config");
  return text && text->is_object() ? *text : config;
}

bool tensors_from_config(simdjson::dom::element top, const QuantScheme& scheme, Findings& f,
                         std::vector<DeployTensor>& out) {
  const simdjson::dom::element config = language_config(top);
  // The release's model_type names the family (qwen3_5_moe); a text config given alone names
  // its own (qwen3_5_moe_text). A multimodal release of an unknown family is not taken for
  // the family of its text model.
  const std::string model_type =
      json_string(top, "model_type").value_or(json_string(config, "model_type").value_or(""));
  const ArchitectureRules* arch = architecture_for(model_type);
  if (!arch) {
    std::string known;
    for (const auto& a : architecture_families())
      for (const auto& t : a.model_types) known += std::string(known.empty() ? "" : ", ") + t;
    f.error("PREFLIGHT_ARCH_UNKNOWN", "config.json", "", std::nullopt,
            "model_type '" + model_type + "' is not a family whose tensors ckptkit derives from config.json (known: " +
                known + "); give the checkpoint's headers (the directory with its shards)");
    return false;
  }
  if (!quant_known(arch->family, scheme)) {
    f.error("PREFLIGHT_QUANT_UNKNOWN", "config.json", "", std::nullopt,
            "config.json's quantization (" + scheme.profile + ") is not one a " + arch->family +
                " release uses; its tensor layout is not derived from the config alone (give the shards' headers)");
    return false;
  }
  if (derived_tensor_estimate(config) > kMaxDerivedTensors) {
    f.error("PREFLIGHT_CONFIG_KEY", "config.json", "", std::nullopt,
            "config.json describes a model of more than " + std::to_string(kMaxDerivedTensors) +
                " tensors (num_hidden_layers times its expert count): refused, no model comes near it");
    return false;
  }
  Builder b(config, scheme, f, out);
  if (arch->family == "deepseek_v3") return deepseek_v3(b);
  if (arch->family == "deepseek_v4") return deepseek_v4(b);
  if (arch->family == "qwen3_moe") return qwen3_moe(b);
  if (arch->family == "qwen3_next") return qwen3_next(b, false);
  if (arch->family == "qwen3_5_moe") return qwen3_next(b, true);
  if (arch->family == "gpt_oss") return gpt_oss(b);
  return dense(b, model_type);
}

std::vector<bool> full_attention_layers(simdjson::dom::element top, uint64_t layers) {
  const simdjson::dom::element config = language_config(top);
  auto interval = json_int(config, "full_attention_interval");
  return layer_kinds(config, layers, interval && *interval > 0 ? static_cast<uint64_t>(*interval) : 4);
}

uint64_t derived_tensor_estimate(simdjson::dom::element top) {
  const simdjson::dom::element config = language_config(top);
  // Each count clamped to [1, 2^24] (larger is refused by the builder anyway), so the
  // product cannot overflow.
  auto count = [&](const char* key) {
    const int64_t v = json_int(config, key).value_or(1);
    return static_cast<uint64_t>(std::clamp<int64_t>(v, 1, kMaxConfigValue));
  };
  const uint64_t experts =
      std::max({count("n_routed_experts"), count("num_experts"), count("num_local_experts")});
  return (count("num_hidden_layers") + 1) * (3 * experts + 32);
}

bool is_mtp_tensor(simdjson::dom::element top, const std::string& name) {
  if (name.rfind("mtp.", 0) == 0) return true;
  const simdjson::dom::element config = language_config(top);
  const int64_t l = layer_of(name);
  auto layers = json_int(config, "num_hidden_layers");
  return l >= 0 && layers && l >= *layers;
}

}  // namespace ckpt

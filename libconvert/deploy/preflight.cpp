// ckpt preflight (preflight.h): the partition model applied to one checkpoint and deployment.
#include "deploy/preflight.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "deploy/config_tensors.h"
#include "deploy/engine_rules.h"
#include "deploy/relayout_plan.h"
#include "formats/json.h"
#include "formats/loader.h"
#include "model/quant_scheme.h"

namespace fs = std::filesystem;

namespace ckpt {

std::string layer_ranges(std::vector<int64_t> layers) {
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

namespace {

constexpr const char* kNoFile = "";

std::string gib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

std::string last_component(const std::string& s) {
  size_t dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(dot + 1);
}

// The model as preflight sees it: tensors by name, the config, the quantization.
struct Model {
  std::vector<DeployTensor> tensors;
  std::map<std::string, size_t> by_name;
  std::optional<simdjson::dom::element> config;
  const ArchitectureRules* arch = nullptr;
  QuantScheme scheme;
  std::string activation_scheme;  // quantization_config.activation_scheme as written ("" when absent)
  HeadGeometry heads;
  const DeployTensor* find(const std::string& n) const {
    auto it = by_name.find(n);
    return it == by_name.end() ? nullptr : &tensors[it->second];
  }
};

// One weight of a linear module the rules classify.
struct Weight {
  const DeployTensor* tensor = nullptr;
  const DeployTensor* scale = nullptr;
  std::string module;
  const ModuleRule* rule = nullptr;
  std::string format;
  int64_t layer = -1;
  bool last_part = false;  // the last part of a merged layer (v, up, w3)
  uint64_t experts = 0;    // routed experts of its layer (per-expert tensors)
  bool excluded = false;   // unquantized only by the block-FP8 config's exclusion list
};

const DeployTensor* scale_of(const Model& m, const std::string& module, const std::string& weight_name) {
  for (const char* s : {".weight_scale_inv", ".weight_scale", ".scale"})
    if (auto* t = m.find(module + s)) return t;
  if (weight_name.ends_with("_blocks")) return m.find(module + "_scales");
  return nullptr;
}

std::string format_of(const DeployTensor& w, const DeployTensor* scale, const QuantScheme& scheme) {
  if (w.name.ends_with("_blocks")) return "mxfp4";
  if ((w.dtype == "I8" || w.dtype == "U8") && scale) return "mxfp4";
  if (w.dtype == "F8_E4M3" || w.dtype == "F8_E4M3FNUZ") {
    if (scheme.profile == "mxfp8") return "mxfp8";
    if (scale && scale->shape.size() == 2 && w.shape.size() >= 2 &&
        scale->shape[0] == ceil_div(w.shape[0], std::max<uint64_t>(scheme.block_rows, 1)) && scale->shape[0] > 0 &&
        scheme.shape == ScaleShape::block)
      return "fp8_block";
    return "fp8_tensor";
  }
  return "unquantized";
}

bool is_last_part(const std::string& module) {
  const std::string c = last_component(module);
  return c == "v_proj" || c == "up_proj" || c == "w3" || c == "in_proj_z" || c == "in_proj_a";
}

uint64_t config_int(const Model& m, const char* key) {
  if (!m.config) return 0;
  auto v = json_int(*m.config, key);
  return v && *v > 0 ? static_cast<uint64_t>(*v) : 0;
}

// The experts a per-expert tensor's layer has ("experts.N." indices).
std::map<int64_t, uint64_t> experts_per_layer(const Model& m) {
  std::map<int64_t, uint64_t> out;
  for (const auto& t : m.tensors) {
    size_t at = t.name.find(".experts.");
    if (at == std::string::npos) continue;
    const char* p = t.name.c_str() + at + 9;
    if (*p < '0' || *p > '9') continue;
    uint64_t e = std::strtoull(p, nullptr, 10);
    auto& n = out[layer_of(t.name)];
    n = std::max(n, e + 1);
  }
  return out;
}

std::vector<Weight> linear_weights(const Model& m) {
  std::vector<Weight> out;
  if (!m.arch) return out;
  const auto experts = experts_per_layer(m);
  for (const auto& t : m.tensors) {
    if (m.config && is_mtp_tensor(*m.config, t.name)) continue;
    std::string role;
    std::string module = module_of(t.name, &role);
    if (role != "weight" && !(role.empty() && t.shape.size() == 3)) continue;
    const ModuleRule* rule = classify_module(*m.arch, module);
    if (!rule || rule->split == Split::none) continue;
    Weight w;
    w.tensor = &t;
    w.module = module;
    w.rule = rule;
    w.scale = scale_of(m, module, t.name);
    w.format = format_of(t, w.scale, m.scheme);
    w.layer = layer_of(t.name);
    w.last_part = is_last_part(module);
    w.excluded = w.format == "unquantized" && m.scheme.profile == "fp8-block" && module_excluded(m.scheme, module);
    auto it = experts.find(w.layer);
    w.experts = it == experts.end() ? 0 : it->second;
    out.push_back(w);
  }
  return out;
}

// The logical 2-D shape the partition model works on (MXFP4 blocks unpacked into columns,
// V4's packed I8 experts two codes a byte).
std::vector<uint64_t> logical_shape(const Weight& w) {
  std::vector<uint64_t> s = w.tensor->shape;
  if (w.tensor->name.ends_with("_blocks") && s.size() == 4) return {s[0], s[1], s[2] * s[3] * 2};
  if (w.format == "mxfp4" && s.size() == 2) return {s[0], s[1] * 2};
  return s;
}

TensorPartition partition_of(const Model& m, const Weight& w, const Deployment& d) {
  return partition_tensor(w.rule->split, logical_shape(w), d, m.heads);
}

// One block problem: a split dimension of a block-FP8 weight that is not a multiple of its block.
struct Problem {
  std::string rule;       // engines.json block rule ("expert_column", "merged", "column", "row", ...)
  std::string cls, name;  // module class; the module's last component ("gate_proj")
  std::string part;       // fused part ("k") or ""
  std::string dimension;  // "block_n" / "block_k"
  uint64_t full = 0, per_rank = 0, block = 0;
  uint32_t degree = 1;
  uint64_t replicas = 1;
};

bool operator<(const Problem& a, const Problem& b) {
  return std::tie(a.rule, a.cls, a.dimension, a.full, a.per_rank, a.part) <
         std::tie(b.rule, b.cls, b.dimension, b.full, b.per_rank, b.part);
}

void block_problems(const Model& m, const Weight& w, const TensorPartition& t, std::vector<Problem>& out) {
  if (w.format != "fp8_block") return;
  const uint64_t bn = m.scheme.block_rows, bk = m.scheme.block_cols;
  const Split s = w.rule->split;
  const std::string name = last_component(w.module);
  auto add = [&](const std::string& rule, const std::string& part, const char* dim, uint64_t full, uint64_t per_rank,
                 uint64_t block, uint64_t replicas) {
    out.push_back(Problem{rule, w.rule->cls, name, part, dim, full, per_rank, block, t.degree, replicas});
  };
  if (s == Split::expert_column || s == Split::expert_fused_column) {
    for (const auto& p : t.parts)
      if (p.per_rank % bn != 0) add("expert_column", p.part, "block_n", p.size, p.per_rank, bn, p.replicas);
  } else if (s == Split::expert_row || s == Split::expert_fused_row) {
    if (t.degree > 1 && t.rank_cols % bk != 0) add("expert_row", "", "block_k", t.cols, t.rank_cols, bk, 1);
  } else if (s == Split::row) {
    if (t.degree > 1 && t.rank_cols % bk != 0) add("row", "", "block_k", t.cols, t.rank_cols, bk, 1);
  } else if (split_cuts_rows(s) && s != Split::vocab) {
    const bool merged = !w.rule->merged.empty();
    for (size_t i = 0; i < t.parts.size(); ++i) {
      const auto& p = t.parts[i];
      const bool last = merged && (t.parts.size() > 1 ? i + 1 == t.parts.size() : w.last_part);
      // A part's rank slice not on the grid shares a scale row with the next rank (TP > 1)
      // or, inside a merged layer, with the next part (every part but the last).
      const bool cut_by_rank = t.degree > 1 && p.replicas <= 1;
      const bool shares = p.per_rank % bn != 0 && (cut_by_rank || (merged && !last) || p.replicas > 1);
      if (shares) add(merged ? "merged" : "column", p.part, "block_n", p.size, p.per_rank, bn, p.replicas);
    }
  }
}

struct Analysis {
  std::vector<Weight> weights;
  std::map<Problem, std::vector<int64_t>> problems;  // -> layers
  std::map<Problem, uint64_t> problem_tensors;
  std::map<Problem, std::set<std::string>> problem_names;  // "gate_proj", "up_proj"
  std::vector<std::string> split_problems;
  // What the block rules would say of the weights the exclusion list leaves unquantized.
  std::map<Problem, std::vector<int64_t>> excluded;
  std::map<Problem, std::set<std::string>> excluded_names;
  // MXFP4 weights whose rank slice of the input columns breaks a 32-column group -> layers.
  std::map<std::string, std::vector<int64_t>> mx_groups;
};

// The engine cuts this MXFP4 weight's input columns (the dimension its E8M0 groups run along).
bool mx_columns_split(const Weight& w, const TensorPartition& t) {
  const Split s = w.rule->split;
  return w.format == "mxfp4" && t.degree > 1 &&
         (s == Split::row || s == Split::expert_row || s == Split::expert_fused_row);
}

// A rank's slice of an MXFP4 weight's columns is not whole groups (the engine splits evenly).
bool mx_group_broken(uint64_t cols, uint32_t degree) {
  const uint64_t g = engine_rules().mx_group;
  return cols % degree != 0 || (cols / degree) % g != 0;
}

Analysis analyse(const Model& m, const Deployment& d, const std::vector<Weight>& weights) {
  Analysis a;
  std::set<std::string> split_seen;
  for (const auto& w : weights) {
    TensorPartition t = partition_of(m, w, d);
    // Engines pad the vocabulary to a multiple of the degree: no vocab split is refused.
    if (!t.problem.empty() && w.rule->split != Split::vocab) {
      std::string text = w.rule->cls + " (" + last_component(w.module) + "): " + t.problem;
      if (split_seen.insert(text).second) a.split_problems.push_back(text);
    }
    if (w.excluded && t.degree > 1) {  // unsplit, an engine checks no block of it
      Weight as_block_fp8 = w;
      as_block_fp8.format = "fp8_block";
      std::vector<Problem> xs;
      block_problems(m, as_block_fp8, t, xs);
      for (auto& p : xs) {
        a.excluded[p].push_back(w.layer);
        a.excluded_names[p].insert(p.name);
      }
    }
    if (mx_columns_split(w, t) && !w.rule->whole_groups && mx_group_broken(t.cols, t.degree)) {
      const std::string per = t.cols % t.degree ? std::to_string(t.cols) + "/" + std::to_string(t.degree)
                                                : std::to_string(t.cols / t.degree);
      a.mx_groups[w.rule->cls + " (" + last_component(w.module) + "): input columns " + std::to_string(t.cols) +
                  " / tp " + std::to_string(t.degree) + " = " + per + ", not a multiple of the MXFP4 group " +
                  std::to_string(engine_rules().mx_group)]
          .push_back(w.layer);
    }
    std::vector<Problem> ps;
    block_problems(m, w, t, ps);
    for (auto& p : ps) {
      a.problems[p].push_back(w.layer);
      a.problem_tensors[p] += 1;
      a.problem_names[p].insert(p.name);
    }
  }
  return a;
}

// What `engine` does under rule `r`: an engine the rule does not name loads it.
BlockBehaviour engine_behaviour(const BlockRule& r, const std::string& engine) {
  auto it = r.behaviour.find(engine);
  return it == r.behaviour.end() ? BlockBehaviour::ok : it->second;
}

// An engine refuses (at start-up) or silently mis-loads `p`; a problem no rule covers is
// refused (never assumed to load).
BlockBehaviour behaviour(const Problem& p, const std::string& engine) {
  const BlockRule* r = engine_rules().block_rule(p.rule);
  return r ? engine_behaviour(*r, engine) : BlockBehaviour::refuse;
}

// What `engine` does under the rule of engines.json that applies to `applies`.
BlockBehaviour rule_behaviour(const std::string& applies, const std::string& engine) {
  const BlockRule* r = engine_rules().block_rule(applies);
  return r ? engine_behaviour(*r, engine) : BlockBehaviour::ok;
}

// The routed experts of an MoE layer (the largest count); 0 for a dense model.
uint64_t routed_experts(const std::vector<Weight>& weights) {
  uint64_t e = 0;
  for (const auto& w : weights) {
    if (!split_is_expert(w.rule->split)) continue;
    const bool fused = w.rule->split == Split::expert_fused_column || w.rule->split == Split::expert_fused_row;
    e = std::max(e, fused && !w.tensor->shape.empty() ? w.tensor->shape.front() : w.experts);
  }
  return e;
}

// EP that does not divide the routed experts, where a considered engine refuses it.
bool ep_refused(uint64_t experts, uint32_t ep, const std::vector<std::string>& engines) {
  if (ep <= 1 || !experts || experts % ep == 0) return false;
  for (const auto& e : engines)
    if (rule_behaviour("expert_count", e) == BlockBehaviour::refuse) return true;
  return false;
}

bool blocking(const Analysis& a, const std::vector<std::string>& engines) {
  if (!a.split_problems.empty() || !a.mx_groups.empty()) return true;
  for (const auto& [p, layers] : a.problems)
    for (const auto& e : engines)
      if (behaviour(p, e) != BlockBehaviour::ok) return true;
  return false;
}

// The config keys a module's split dimension is made from, by what the module is: an
// expert's or an MLP's intermediate size, an MLA projection's LoRA rank; none for attention
// heads (a size that equals some key by coincidence is never named after it).
std::vector<const char*> size_keys(const Problem& p) {
  const bool mlp = p.rule.rfind("expert", 0) == 0 || p.name == "gate_proj" || p.name == "up_proj" ||
                   p.name == "down_proj" || p.name == "gate_up_proj";
  if (mlp) return {"moe_intermediate_size", "intermediate_size", "shared_expert_intermediate_size"};
  if (p.name == "q_a_proj") return {"q_lora_rank"};
  if (p.name == "kv_a_proj_with_mqa") return {"kv_lora_rank"};
  if (p.name == "in_proj_b" || p.name == "in_proj_a") return {"linear_num_value_heads"};
  return {};
}

// "moe_intermediate_size 1536" when one of the module's keys equals the size, a K/V part as
// "num_key_value_heads 4 x head_dim 128 = 512", else "output rows 1536" / "input columns 1536".
std::string size_text(const Model& m, const Problem& p) {
  if ((p.part == "k" || p.part == "v") && m.heads.kv_heads * m.heads.head_dim == p.full)
    return "num_key_value_heads " + std::to_string(m.heads.kv_heads) + " x head_dim " +
           std::to_string(m.heads.head_dim) + " = " + std::to_string(p.full);
  for (const char* k : size_keys(p))
    if (config_int(m, k) == p.full) return std::string(k) + " " + std::to_string(p.full);
  return std::string(p.dimension == "block_k" ? "input columns " : "output rows ") + std::to_string(p.full);
}

std::string degree_text(const Deployment& d, const Problem& p) {
  if ((p.rule == "expert_column" || p.rule == "expert_row") && d.ep > 1)
    return "(tp " + std::to_string(d.tp) + " / ep " + std::to_string(d.ep) + ") " + std::to_string(p.degree);
  return "tp " + std::to_string(p.degree);
}

std::string division_text(const Model& m, const Deployment& d, const Problem& p) {
  std::string head = (p.part.empty() ? "" : p.part + " part: ") + size_text(m, p);
  if (p.replicas > 1)
    return head + " (" + std::to_string(p.full / std::max<uint64_t>(m.heads.head_dim, 1)) + " KV heads < tp " +
           std::to_string(d.tp) + ": one head of " + std::to_string(p.per_rank) + " rows on each rank), " +
           std::to_string(p.per_rank) + " not a multiple of " + p.dimension + " " + std::to_string(p.block);
  if (p.degree <= 1)
    return head + ", not a multiple of " + p.dimension + " " + std::to_string(p.block);
  return head + " / " + degree_text(d, p) + " = " + std::to_string(p.per_rank) + ", not a multiple of " + p.dimension +
         " " + std::to_string(p.block);
}

std::string fill(std::string msg, const Problem& p) {
  for (auto [key, value] : {std::pair<std::string, uint64_t>{"{per_rank}", p.per_rank}, {"{block}", p.block}}) {
    size_t at = msg.find(key);
    if (at != std::string::npos) msg.replace(at, key.size(), std::to_string(value));
  }
  return msg;
}

// Bytes of one tensor on the largest rank.
uint64_t rank_share(const Weight& w, const TensorPartition& t, const Deployment& d, uint64_t bytes) {
  long double f = 1.0L;
  if (t.rows && t.rank_rows != t.rows) f *= static_cast<long double>(t.rank_rows) / t.rows;
  if (t.cols && t.rank_cols != t.cols) f *= static_cast<long double>(t.rank_cols) / t.cols;
  if (split_is_expert(w.rule->split) && d.ep > 1) {
    const uint64_t e = t.experts ? t.experts : w.experts;
    if (e) f *= static_cast<long double>(ceil_div(e, d.ep)) / e;
  }
  return static_cast<uint64_t>(static_cast<long double>(bytes) * f + 0.5L);
}

// The weights of the largest rank: each tensor's share, layers grouped into PP stages.
uint64_t largest_rank_bytes(const Model& m, const Deployment& d, const std::vector<Weight>& weights) {
  std::map<std::string, const Weight*> by_module;
  for (const auto& w : weights) by_module[w.module] = &w;
  const uint64_t layers = std::max<uint64_t>(config_int(m, "num_hidden_layers"), 1);
  const uint32_t pp = std::max<uint32_t>(d.pp, 1);
  std::vector<uint64_t> stage(pp, 0);
  auto stage_of = [&](const DeployTensor& t) -> uint32_t {
    const int64_t l = layer_of(t.name);
    if (l >= 0) return static_cast<uint32_t>(std::min<uint64_t>(static_cast<uint64_t>(l) * pp / layers, pp - 1));
    const std::string mod = module_of(t.name);
    return mod.find("embed") != std::string::npos ? 0 : pp - 1;
  };
  for (const auto& t : m.tensors) {
    if (m.config && is_mtp_tensor(*m.config, t.name)) continue;
    uint64_t share = t.nbytes;
    auto it = by_module.find(module_of(t.name));
    if (it != by_module.end()) share = rank_share(*it->second, partition_of(m, *it->second, d), d, t.nbytes);
    stage[stage_of(t)] += share;
  }
  return *std::max_element(stage.begin(), stage.end());
}

}  // namespace

namespace {

bool read_model(const std::string& path, PreflightReport& r, Model& m, LoadedModel& loaded) {
  StReadOptions options;
  Findings f;
  const bool opened = load_model(path, options, loaded, f);
  const Checkpoint& ck = loaded.checkpoint;
  bool any_shard = false;
  for (const auto& s : ck.shards) {
    std::error_code ec;
    if (fs::exists(s.path, ec)) any_shard = true;
  }
  // A directory of config.json (and the index) alone is config-only mode even when that
  // config cannot be read: its CFG_ finding is then the whole answer, not a missing shard.
  std::error_code ec;
  const bool has_config = ck.config || fs::is_regular_file(fs::path(path) / "config.json", ec);
  r.config_only = loaded.format == ModelFormat::safetensors && ck.is_directory && !any_shard && has_config;
  if (r.config_only) {
    // Only config.json (and the index) are here: the missing shards are not a finding.
    for (const auto& x : f.items())
      if (x.file == "config.json" || x.code.rfind("CFG_", 0) == 0 || x.code.rfind("SIDE_FILE", 0) == 0 ||
          x.code.rfind("IO_", 0) == 0)  // a shard that is a FIFO or unreadable is not "absent"
        r.findings.add(x);
  } else {
    r.findings.append(f);
  }
  if (!opened || (r.findings.has_errors() && !r.config_only)) return false;
  if (loaded.format == ModelFormat::gguf) {
    r.findings.error("PREFLIGHT_GGUF", path, "", std::nullopt,
                     "a GGUF file: preflight models the safetensors layouts vLLM, SGLang and transformers load "
                     "(llama.cpp's tensor split is not modelled)");
    return false;
  }
  if (!ck.config) {
    r.findings.error("PREFLIGHT_NO_CONFIG", path, "", std::nullopt,
                     "no readable config.json: the model family, its heads and its quantization are unknown");
    return false;
  }
  const simdjson::dom::element top = ck.config->root();
  m.config = language_config(top);  // Qwen3.5 nests the language model in text_config
  QuantDetectError qe;
  if (!detect_quant_scheme(ck, m.scheme, qe)) {
    r.findings.error(qe.code, qe.file, "", std::nullopt, qe.message);
    return false;
  }
  simdjson::dom::element qc;
  if (top["quantization_config"].get(qc) == simdjson::SUCCESS)
    m.activation_scheme = json_string(qc, "activation_scheme").value_or("");
  r.model_type = json_string(top, "model_type").value_or("");
  m.arch = architecture_for(r.model_type);
  r.family = m.arch ? m.arch->family : "";
  r.quant_profile = m.scheme.profile;
  m.heads.heads = config_int(m, "num_attention_heads");
  m.heads.kv_heads = config_int(m, "num_key_value_heads");
  if (!m.heads.kv_heads) m.heads.kv_heads = m.heads.heads;
  m.heads.head_dim = config_int(m, "head_dim");
  if (!m.heads.head_dim && m.heads.heads) m.heads.head_dim = config_int(m, "hidden_size") / m.heads.heads;
  if (r.config_only) {
    Findings derive;
    if (!tensors_from_config(*m.config, m.scheme, derive, m.tensors)) {
      r.findings.append(derive);
      return false;
    }
  } else {
    for (const auto& t : loaded.view.tensors)
      m.tensors.push_back({t.name, t.type, t.shape, t.nbytes});
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) m.by_name.emplace(m.tensors[i].name, i);
  return true;
}

// The converted form of a quantized weight (ckpt convert: BF16 in place of an FP8 weight of
// the same shape, or of an I8 MXFP4 expert [rows, cols / 2]), as validate accepts it.
bool converted_shape(const DeployTensor& derived, const DeployTensor& header) {
  if (derived.dtype == "F8_E4M3") return header.shape == derived.shape;
  if (derived.dtype == "I8" && derived.shape.size() == 2)
    return header.shape == std::vector<uint64_t>{derived.shape[0], derived.shape[1] * 2};
  return false;
}

// A module whose weight the headers hold in BF16: its scale is gone with the conversion.
bool dequantized(const Model& m, const std::string& module) {
  const DeployTensor* w = m.find(module + ".weight");
  return w && w->dtype == "BF16";
}

// A multimodal release's vision tower (Qwen3.5's model.visual.*): config.json's text_config
// describes the language model only, so these are not compared with it.
bool is_vision_tensor(const std::string& name) { return name.rfind("model.visual.", 0) == 0; }

// Headers are the truth; the model config.json describes must be the one they hold.
void compare_with_config(const Model& m, PreflightReport& r) {
  if (r.config_only || !m.arch) return;
  std::vector<DeployTensor> derived;
  Findings derive;
  if (!tensors_from_config(*m.config, m.scheme, derive, derived)) {
    for (const auto& x : derive.items())
      r.findings.warning("PREFLIGHT_CONFIG_MISMATCH", "config.json", "", std::nullopt,
                         "config.json does not describe a complete " + r.family + " model (" + x.message +
                             "); the headers are used");
    return;
  }
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const auto& d : derived) {
    expected.insert(d.name);
    const DeployTensor* h = m.find(d.name);
    std::string role;
    const std::string module = module_of(d.name, &role);
    if (!h) {
      if (!(role == "scale" && dequantized(m, module)))
        problems.push_back(d.name + " (config.json's model has it, the headers do not)");
      continue;
    }
    if (role == "weight" && h->dtype == "BF16" && converted_shape(d, *h)) continue;
    if (h->shape != d.shape) {
      std::string hs, ds;
      for (auto v : h->shape) hs += std::string(hs.empty() ? "" : ", ") + std::to_string(v);
      for (auto v : d.shape) ds += std::string(ds.empty() ? "" : ", ") + std::to_string(v);
      problems.push_back(d.name + " is [" + hs + "] in the headers, [" + ds + "] from config.json");
    } else if (role == "weight" && h->dtype != d.dtype) {
      problems.push_back(d.name + " is " + h->dtype + " in the headers, " + d.dtype + " from config.json");
    }
  }
  for (const auto& t : m.tensors)
    if (!expected.count(t.name) && !is_mtp_tensor(*m.config, t.name) && !is_vision_tensor(t.name))
      problems.push_back(t.name + " (in the headers, not in config.json's model)");
  if (problems.empty()) return;
  std::string list;
  for (size_t i = 0; i < problems.size() && i < 5; ++i) list += (i ? "; " : "") + problems[i];
  // A ckptkit conversion's own layout (INT8-shift experts) is checked against its input by
  // `ckpt validate --reference`; here the difference is only reported.
  const bool converted = json_get(*m.config, "ckptkit_conversion").has_value();
  r.findings.add("PREFLIGHT_CONFIG_MISMATCH", converted ? Severity::warning : Severity::error, "config.json", "", std::nullopt,
                   "config.json disagrees with the headers in " + std::to_string(problems.size()) + " tensors: " + list +
                       (problems.size() > 5 ? "; ..." : "") +
                       ". The engine builds the model from config.json: fix the config (the headers are the truth)");
}

void check_heads(const Model& m, PreflightReport& r) {
  const auto& d = r.options.deployment;
  if (d.tp <= 1 || !m.heads.heads || r.family == "deepseek_v4") return;
  if (m.heads.heads % d.tp != 0)
    r.findings.error("PREFLIGHT_TP_SPLIT", "config.json", "", std::nullopt,
                     "num_attention_heads " + std::to_string(m.heads.heads) + " / tp " + std::to_string(d.tp) +
                         " is not whole: every engine refuses it; fix: a tp that divides " +
                         std::to_string(m.heads.heads));
  const uint64_t kv = m.heads.kv_heads;
  if (kv && r.family != "deepseek_v3" && ((kv >= d.tp && kv % d.tp != 0) || (kv < d.tp && d.tp % kv != 0)))
    r.findings.error("PREFLIGHT_TP_SPLIT", "config.json", "", std::nullopt,
                     "num_key_value_heads " + std::to_string(kv) + " and tp " + std::to_string(d.tp) +
                         ": one must divide the other (KV heads are split, or replicated when fewer than tp); fix: a tp that " +
                         "divides " + std::to_string(kv) + " or is a multiple of it");
}

std::vector<PreflightDegree> working_degrees(const Model& m, const std::vector<Weight>& weights,
                                             const std::vector<std::string>& engines, bool moe) {
  const uint64_t experts = routed_experts(weights);
  std::vector<PreflightDegree> out;
  for (uint32_t tp : {1u, 2u, 4u, 8u, 16u, 32u, 64u}) {
    if (m.heads.heads && tp > 1 && m.heads.heads % tp != 0) continue;
    std::vector<uint32_t> eps{1u};
    if (moe && tp > 1) eps.push_back(tp);
    for (uint32_t ep : eps) {
      const Deployment d{tp, ep, 1};
      if (ep_refused(experts, ep, engines) || blocking(analyse(m, d, weights), engines)) continue;
      out.push_back({tp, ep, largest_rank_bytes(m, d, weights)});
    }
  }
  return out;
}

std::string degree_name(const PreflightDegree& g) {
  std::string s = "--tp " + std::to_string(g.tp);
  if (g.ep > 1) s += " --ep " + std::to_string(g.ep);
  return s;
}

std::string working_text(const std::vector<PreflightDegree>& w, uint32_t near_tp) {
  std::string out;
  for (const auto& g : w) {
    if (g.tp > 2 * near_tp && g.tp > 8) continue;
    out += std::string(out.empty() ? "" : ", ") + degree_name(g);
  }
  return out.empty() ? "none up to tp 64" : out;
}

uint64_t bf16_cost(const std::vector<Weight>& weights) {
  uint64_t extra = 0;
  for (const auto& w : weights)
    if (w.format == "fp8_block" || w.format == "fp8_tensor") extra += w.tensor->nbytes;  // 1 -> 2 bytes an element
  return extra;
}

std::string engines_text(const Problem& p, const std::vector<std::string>& engines, BlockBehaviour want) {
  const BlockRule* rule = engine_rules().block_rule(p.rule);
  std::string out;
  for (const auto& e : engines) {
    if (behaviour(p, e) != want) continue;
    std::string src;
    if (rule) {
      auto it = rule->sources.find(e);
      if (it != rule->sources.end()) src = " (" + it->second + ")";
    }
    out += std::string(out.empty() ? "" : "; ") + e + src;
  }
  return out;
}

void report_block_problems(const Model& m, const Analysis& a, PreflightReport& r, const std::string& fix) {
  const auto& d = r.options.deployment;
  // One finding per module class and division, every affected layer named.
  for (const auto& [p, layers] : a.problems) {
    std::string names;
    for (const auto& n : a.problem_names.at(p)) names += std::string(names.empty() ? "" : "/") + n;
    const std::string where = p.cls + " " + names + " in layers " + layer_ranges(layers) + " (" +
                              std::to_string(a.problem_tensors.at(p)) + " tensors): " + division_text(m, d, p);
    const std::string refused = engines_text(p, r.engines, BlockBehaviour::refuse);
    const std::string silent = engines_text(p, r.engines, BlockBehaviour::silent);
    const BlockRule* rule = engine_rules().block_rule(p.rule);
    if (!refused.empty())
      r.findings.error("PREFLIGHT_BLOCK_DIVISIBILITY", kNoFile, p.name, std::nullopt,
                       where + ". Refused at start-up by " + refused +
                           (rule ? ": \"" + fill(rule->message, p) + "\"" : std::string()) + ". Fix: " + fix);
    if (!silent.empty())
      r.findings.error("PREFLIGHT_SCALE_ROW_SHARED", kNoFile, p.name, std::nullopt,
                       "SILENTLY WRONG: " + where + ", so one scale row covers rows of two " +
                           (p.degree > 1 && p.replicas <= 1 ? "ranks" : "parts") + " and the engine gives one of them "
                           "the other's scale; loaded without an error by " + silent + ". Fix: " + fix);
  }
  for (const auto& s : a.split_problems)
    r.findings.error("PREFLIGHT_TP_SPLIT", kNoFile, "", std::nullopt, s + ": every engine refuses it. Fix: " + fix);
}

// The fix for block problems: the degrees that load, ckpt relayout's default plan (the one
// planning function relayout runs: deploy/relayout_plan.h) with its cost, ckpt convert.
std::string block_fix(const Analysis& a, const std::vector<Weight>& weights, PreflightReport& r) {
  const auto& d = r.options.deployment;
  std::string fix = "degrees that load: " + working_text(r.working, d.tp);
  if (a.split_problems.empty()) {
    const RelayoutPlan plan = plan_relayout(r, RelayoutRequest{});
    if (plan.problem.empty() && plan.needed)
      fix += "; or `ckpt relayout --tp " + std::to_string(d.tp) + (d.ep > 1 ? " --ep " + std::to_string(d.ep) : "") +
             " IN OUT`: " + relayout_summary(plan);
  }
  fix += "; or `ckpt convert IN OUT` (block FP8 -> BF16, exact: +" + std::to_string(bf16_cost(weights)) + " bytes)";
  return fix;
}

// Each block-FP8 weight with the per-rank sizes its block must divide (relayout plans from it).
void record_block_weights(const Model& m, const std::vector<Weight>& weights, PreflightReport& r) {
  for (const auto& w : weights) {
    if (w.format != "fp8_block") continue;
    PreflightBlockWeight b;
    b.tensor = w.tensor->name;
    b.scale = w.scale ? w.scale->name : "";
    b.module = w.module;
    b.cls = w.rule->cls;
    b.unit = split_is_expert(w.rule->split) ? "FusedMoE (routed experts)" : w.rule->cls;
    b.shape = w.tensor->shape;
    b.weight_bytes = w.tensor->nbytes;
    b.scale_bytes = w.scale ? w.scale->nbytes : 0;
    b.layer = w.layer;
    std::vector<Problem> ps;
    block_problems(m, w, partition_of(m, w, r.options.deployment), ps);
    for (const auto& p : ps) {
      bool stops = false;
      for (const auto& e : r.engines) stops = stops || behaviour(p, e) != BlockBehaviour::ok;
      if (stops) (p.dimension == "block_n" ? b.rows : b.cols).push_back(p.per_rank);
    }
    r.block_weights.push_back(std::move(b));
  }
}

void check_kernels(const std::vector<Weight>& weights, const Model& m, PreflightReport& r) {
  if (r.options.gpu.empty()) return;
  std::map<std::string, uint64_t> formats;
  for (const auto& w : weights)
    if (w.format != "unquantized") formats[w.format] += 1;
  for (const auto& t : m.tensors)
    if (t.name.ends_with(".shift2")) formats["int8_shift"] += 1;
  const std::string& arch = r.options.gpu;
  for (const auto& [format, count] : formats) {
    const FormatKernels* k = engine_rules().kernels(format);
    if (!k) continue;
    std::string refused, others;
    for (const auto& e : r.engines) {
      KernelEntry entry;
      auto ei = k->engines.find(e);
      if (ei != k->engines.end()) {
        auto ai = ei->second.find(arch);
        if (ai != ei->second.end()) entry = ai->second;
      }
      auto si = k->sources.find(e);
      const std::string src = si == k->sources.end() ? "" : si->second;
      r.kernels.push_back({format, e, arch, kernel_support_name(entry.support), entry.via, src});
      if (entry.support == KernelSupport::refused)
        refused += std::string(refused.empty() ? "" : "; ") + e + " (" + src + ")";
      else
        others += std::string(others.empty() ? "" : "; ") + e + ": " + kernel_support_name(entry.support) +
                  (entry.via.empty() ? "" : " via " + entry.via);
    }
    if (!refused.empty())
      r.findings.error("PREFLIGHT_KERNEL", kNoFile, "", std::nullopt,
                       arch + " has no kernel for " + k->title + " (" + std::to_string(count) +
                           " weights) in " + refused + (others.empty() ? "" : "; " + others) +
                           ". Instead: " + k->instead);
  }
}

// The considered engines by what the rule for `applies` makes them do: those that refuse
// it, then the others, each "engine (its source)", joined by "; ", with the rule itself
// (null when engines.json has none) for the caller's message.
struct EnginesByRefusal {
  const BlockRule* rule = nullptr;
  std::string refused, others;
};

EnginesByRefusal engines_by_refusal(const std::string& applies, const PreflightReport& r) {
  EnginesByRefusal by{engine_rules().block_rule(applies), "", ""};
  for (const auto& e : r.engines) {
    const std::string src = by.rule && by.rule->sources.count(e) ? " (" + by.rule->sources.at(e) + ")" : "";
    const bool refuses = by.rule && engine_behaviour(*by.rule, e) == BlockBehaviour::refuse;
    std::string& list = refuses ? by.refused : by.others;
    list += std::string(list.empty() ? "" : "; ") + e + src;
  }
  return by;
}

// Routed experts are whole per rank under EP: E / EP of them a rank. SGLang and transformers
// refuse an E that EP does not divide; vLLM gives the first E % EP ranks one expert more.
void check_expert_parallel(uint64_t experts, PreflightReport& r) {
  const uint32_t ep = r.options.deployment.ep;
  if (ep <= 1 || !experts || experts % ep == 0) return;
  const EnginesByRefusal by = engines_by_refusal("expert_count", r);
  const BlockRule* rule = by.rule;
  const std::string& refused = by.refused;
  const std::string& uneven = by.others;
  std::string eps;
  for (uint32_t d : {2u, 4u, 8u, 16u, 32u, 64u})
    if (experts % d == 0) eps += std::string(eps.empty() ? "" : ", ") + ("--ep " + std::to_string(d));
  const std::string text = "routed experts " + std::to_string(experts) + " / ep " + std::to_string(ep) + " = " +
                           std::to_string(experts / ep) + " remainder " + std::to_string(experts % ep) +
                           ": not the same experts on every rank";
  const std::string fix = ". Fix: an EP degree that divides " + std::to_string(experts) + ": " +
                          (eps.empty() ? std::string("none above 1") : eps) + " (with --tp a multiple of it)";
  if (!refused.empty())
    r.findings.error("PREFLIGHT_EP_SPLIT", kNoFile, "", std::nullopt,
                     text + ". Refused at start-up by " + refused + (rule ? ": \"" + rule->message + "\"" : "") +
                         (uneven.empty() ? "" : "; loaded unevenly by " + uneven) + fix);
  else
    r.findings.info("PREFLIGHT_EP_UNEVEN", kNoFile, "", std::nullopt,
                    text + ": loaded unevenly by " + uneven + ", the largest rank holding " +
                        std::to_string((experts + ep - 1) / ep));
}

// Block FP8 with static activation scales (quantization_config.activation_scheme other than
// "dynamic"): the engines whose block kernels quantize activations per token group themselves
// refuse the config at start-up, before any weight is read, whatever TP and EP are.
void check_activation_scheme(const Model& m, PreflightReport& r) {
  if (m.scheme.profile != "fp8-block" || m.activation_scheme.empty() || m.activation_scheme == "dynamic") return;
  const EnginesByRefusal by = engines_by_refusal("activation_scheme", r);
  const BlockRule* rule = by.rule;
  const std::string& refused = by.refused;
  const std::string& loads = by.others;
  std::string message = rule ? rule->message : "";
  if (auto at = message.find("{scheme}"); at != std::string::npos) message.replace(at, 8, m.activation_scheme);
  const std::string text = "quantization_config.activation_scheme is \"" + m.activation_scheme +
                           "\" with block FP8 (weight_block_size " + std::to_string(m.scheme.block_rows) + "x" +
                           std::to_string(m.scheme.block_cols) + ")";
  if (refused.empty()) {
    r.findings.info("PREFLIGHT_ACTIVATION_SCHEME", "config.json", "", std::nullopt, text + ": loaded by " + loads);
    return;
  }
  r.findings.error("PREFLIGHT_ACTIVATION_SCHEME", "config.json", "", std::nullopt,
                   text + ": refused at start-up by " + refused + (message.empty() ? "" : ": \"" + message + "\"") +
                       (loads.empty() ? "" : "; loaded by " + loads) +
                       ". No TP or EP degree changes this, nor does `ckpt relayout` (it keeps the quantization). "
                       "Fix: `ckpt convert IN OUT` (block FP8 -> BF16, exact; the activation scales are dropped)");
}

// A module the block-FP8 config leaves unquantized by name, whose per-rank rows are no
// multiple of the block: it loads, but only while the engine matches the exclusion to its own
// module name. SGLang matches modules_to_not_convert as a substring of its module prefix
// (quantization/utils.py is_layer_skipped); a release whose names the engine's prefix does not
// contain is quantized and refused at start-up: sglang#19045, Qwen3.5-397B-A17B-FP8 at TP 8,
// in_proj_b of 64 rows, 8 a rank.
void report_excluded(const Model& m, const Analysis& a, PreflightReport& r) {
  for (const auto& [p, layers] : a.excluded) {
    std::string names;
    for (const auto& n : a.excluded_names.at(p)) names += std::string(names.empty() ? "" : "/") + n;
    r.findings.warning("PREFLIGHT_EXCLUDED_BELOW_BLOCK", kNoFile, p.name, std::nullopt,
                       p.cls + " " + names + " in layers " + layer_ranges(layers) +
                           ": unquantized by quantization_config's exclusion list, so it loads; quantized it would "
                           "not: " + division_text(m, r.options.deployment, p) + ". An engine that does not match "
                           "the exclusion to its own module name quantizes it and refuses it at start-up (sglang#19045: "
                           "Qwen3.5-397B-A17B-FP8 at tp 8, \"Weight output_partition_size = 8 is not divisible by weight "
                           "quantization block_n = 128\"; SGLang matches the list against its module prefix, "
                           "python/sglang/srt/layers/quantization/utils.py:46-96 is_layer_skipped). Fix: keep the "
                           "exclusion's names equal to the engine's module names (model.language_model.layers.N...)");
  }
}

// MXFP4 experts under TP. A rank slice that cuts a 32-column group (an engine that splits
// the columns evenly) gives a rank part of a group whose E8M0 scale sits on another: blocking.
// gpt-oss's engines split by whole groups instead (ceil(groups / TP) a rank, the last short),
// and every engine pads a rank's intermediate size to its kernel's multiple: information,
// per engine, with the source.
void report_mx_groups(const Model& m, const Analysis& a, const std::vector<Weight>& weights, PreflightReport& r) {
  const uint64_t g = engine_rules().mx_group;
  for (const auto& [text, layers] : a.mx_groups) {
    uint64_t cols = 0;
    for (const auto& w : weights)
      if (w.format == "mxfp4" && text.rfind(w.rule->cls + " (", 0) == 0) cols = partition_of(m, w, {1, 1, 1}).cols;
    std::string tps;
    for (uint32_t tp : {1u, 2u, 4u, 8u, 16u, 32u, 64u})
      if (cols && !mx_group_broken(cols, tp)) tps += std::string(tps.empty() ? "" : ", ") + ("--tp " + std::to_string(tp));
    r.findings.error("PREFLIGHT_MX_GROUP", kNoFile, "", std::nullopt,
                     text + " in layers " + layer_ranges(layers) + ": a rank's slice breaks a " + std::to_string(g) +
                         "-column group, whose one E8M0 scale the other rank does not hold. Fix: " +
                         (tps.empty() ? std::string() : "tp degrees whose slice is whole groups: " + tps + " (or --ep); ") +
                         "or `ckpt convert --experts bf16 IN OUT` (exact)");
  }
  std::set<std::string> seen;
  for (const auto& w : weights) {
    const TensorPartition t = partition_of(m, w, r.options.deployment);
    const Split s = w.rule->split;
    if (w.format != "mxfp4" || !split_is_expert(s) || split_cuts_rows(s) || !seen.insert(w.rule->cls).second) continue;
    uint64_t per = t.degree > 1 ? t.cols / t.degree : t.cols;
    std::string how;
    if (t.degree > 1 && w.rule->whole_groups && mx_group_broken(t.cols, t.degree)) {
      const uint64_t groups = ceil_div(ceil_div(t.cols, g), t.degree);
      per = groups * g;
      how = "input columns " + std::to_string(t.cols) + " / tp " + std::to_string(t.degree) + " is not whole " +
            std::to_string(g) + "-column groups, and the engines split by whole groups: " + std::to_string(groups) +
            " groups = " + std::to_string(per) + " columns a rank, the last rank holding the rest; ";
    } else if (t.degree > 1 && mx_group_broken(t.cols, t.degree)) {
      continue;  // reported as PREFLIGHT_MX_GROUP
    }
    for (const auto& e : r.engines) {
      auto it = engine_rules().mx_padding.find(e);
      if (it == engine_rules().mx_padding.end()) continue;
      std::string pads;
      for (const auto& [backend, multiple] : it->second.multiples)
        pads += std::string(pads.empty() ? "" : ", ") + backend + " " + std::to_string(ceil_div(per, multiple) * multiple);
      r.findings.info("PREFLIGHT_MXFP4_PADDING", kNoFile, last_component(w.module), std::nullopt,
                      w.rule->cls + ": " + how + e + " pads each rank's expert intermediate size " +
                          std::to_string(per) + " by kernel backend to " + pads + " (" + it->second.source.text() + ")");
    }
  }
}

uint64_t kv_dtype_bytes(const std::string& dtype) { return dtype == "fp8" ? 1 : 2; }

// The KV cache a token costs on the largest rank, and a hybrid's fixed state a sequence
// (preflight.h PreflightKvCache). Layers are those of the largest pipeline stage.
PreflightKvCache kv_cache_of(const Model& m, const PreflightReport& r) {
  PreflightKvCache kv;
  if (!m.config) return kv;
  const auto& d = r.options.deployment;
  const uint32_t tp = std::max<uint32_t>(d.tp, 1), pp = std::max<uint32_t>(d.pp, 1);
  const uint64_t layers = config_int(m, "num_hidden_layers");
  kv.dtype_bytes = kv_dtype_bytes(r.options.kv_cache_dtype);
  const std::string dtype = r.options.kv_cache_dtype == "auto" ? "bf16, the model's" : r.options.kv_cache_dtype;
  if (layers > (uint64_t{1} << 24)) {  // config.json's, beside headers that disagree (a finding)
    kv.how = "not modelled: num_hidden_layers " + std::to_string(layers) + " is no model's";
    return kv;
  }
  if (r.family == "deepseek_v4" || !layers) {
    kv.how = "not modelled for " + r.family + " (its compressed attention caches per layer type)";
    return kv;
  }
  kv.modelled = true;
  if (r.family == "deepseek_v3") {
    const uint64_t lora = config_int(m, "kv_lora_rank"), rope = config_int(m, "qk_rope_head_dim");
    kv.attention_layers = ceil_div(layers, pp);
    kv.bytes_per_token = kv.attention_layers * (lora + rope) * kv.dtype_bytes;
    kv.how = "MLA: " + std::to_string(kv.attention_layers) + " layers x (kv_lora_rank " + std::to_string(lora) +
             " + qk_rope_head_dim " + std::to_string(rope) + ") x " + std::to_string(kv.dtype_bytes) + " bytes (" +
             dtype + "), the same on every rank (MLA's latent cache is not split by tp)";
    return kv;
  }
  const bool hybrid = r.family == "qwen3_next" || r.family == "qwen3_5_moe";
  uint64_t attention = layers;
  if (hybrid) {
    const std::vector<bool> full = full_attention_layers(*m.config, layers);
    attention = static_cast<uint64_t>(std::count(full.begin(), full.end(), true));
  }
  kv.attention_layers = ceil_div(attention, pp);
  const uint64_t kv_heads = m.heads.kv_heads, head_dim = m.heads.head_dim;
  const uint64_t rank_heads = std::max<uint64_t>(kv_heads / tp, 1);
  kv.bytes_per_token = kv.attention_layers * rank_heads * head_dim * 2 * kv.dtype_bytes;
  kv.how = std::to_string(kv.attention_layers) + " attention layers x " + std::to_string(rank_heads) +
           " KV heads a rank (" + std::to_string(kv_heads) + " / tp " + std::to_string(tp) + ", at least 1) x head_dim " +
           std::to_string(head_dim) + " x 2 (K, V) x " + std::to_string(kv.dtype_bytes) + " bytes (" + dtype + ")";
  if (r.family == "gpt_oss") kv.how += "; sliding-window layers counted as full (an upper bound)";
  if (hybrid) {
    // A GatedDeltaNet layer keeps, per sequence, its convolution window and its recurrent
    // state (value heads x key dim x value dim), both split by tp, in the model's dtype.
    const uint64_t kh = config_int(m, "linear_num_key_heads"), vh = config_int(m, "linear_num_value_heads");
    const uint64_t dk = config_int(m, "linear_key_head_dim"), dv = config_int(m, "linear_value_head_dim");
    const uint64_t conv = std::max<uint64_t>(config_int(m, "linear_conv_kernel_dim"), 1);
    kv.state_layers = ceil_div(layers - attention, pp);
    const uint64_t conv_state = (2 * kh * dk + vh * dv) / tp * (conv - 1), recurrent = vh / tp * dk * dv;
    kv.state_bytes_per_sequence = kv.state_layers * (conv_state + recurrent) * 2;
    kv.how += "; the " + std::to_string(kv.state_layers) + " linear-attention layers hold no KV cache but a fixed state "
              "of " + std::to_string(kv.state_bytes_per_sequence) + " bytes a sequence (convolution " +
              std::to_string(conv_state) + " + recurrent " + std::to_string(recurrent) + " elements a layer, bf16)";
  }
  return kv;
}

// Tokens (and sequences of --max-model-len) of KV cache in what the weights leave of the budget.
void kv_capacity(PreflightKvCache& kv, uint64_t left, uint64_t max_model_len) {
  if (!kv.modelled || !kv.bytes_per_token) return;
  kv.tokens = left / kv.bytes_per_token;
  if (max_model_len) kv.sequences = left / (max_model_len * kv.bytes_per_token + kv.state_bytes_per_sequence);
}

void check_memory(PreflightReport& r) {
  const PreflightReport& in = r;
  const uint64_t budget = r.options.gpu_memory;
  if (!budget) return;
  const auto& d = r.options.deployment;
  const std::string head = "weights of the largest rank at tp " + std::to_string(d.tp) +
                           (d.ep > 1 ? " ep " + std::to_string(d.ep) : "") +
                           (d.pp > 1 ? " pp " + std::to_string(d.pp) : "") + ": " + std::to_string(in.rank_bytes) +
                           " bytes (" + gib(in.rank_bytes) + ") against --gpu-memory " + std::to_string(budget) +
                           " bytes (" + gib(budget) + ")";
  if (in.rank_bytes > budget) {
    std::string fix;
    for (const auto& g : in.working)
      if (g.rank_bytes < budget && g.tp > d.tp) {
        fix = degree_name(g) + " (" + gib(g.rank_bytes) + " a rank)";
        break;
      }
    r.findings.error("PREFLIGHT_MEMORY", kNoFile, "", std::nullopt,
                     head + ": does not fit (" + gib(in.rank_bytes - budget) + " over, before any KV cache). Fix: " +
                         (fix.empty() ? "more ranks, pipeline stages (--pp), or a smaller format" : fix));
  } else {
    kv_capacity(r.kv, budget - in.rank_bytes, r.options.max_model_len);
    std::string cache;
    if (r.kv.modelled && r.kv.bytes_per_token)
      cache = ": " + std::to_string(r.kv.tokens) + " tokens of KV cache at " + std::to_string(r.kv.bytes_per_token) +
              " bytes a token a rank (" + r.kv.how + ")" +
              (r.options.max_model_len ? ", " + std::to_string(r.kv.sequences) + " sequences of --max-model-len " +
                                             std::to_string(r.options.max_model_len)
                                       : std::string()) +
              ", before activations and the engine's reserve";
    else if (!r.kv.how.empty())
      cache = " (KV cache " + r.kv.how + ")";
    // An engine refuses to start when one sequence of its max_model_len does not fit in the
    // KV cache (vLLM: "larger than the maximum number of tokens that can be stored in KV cache").
    if (r.options.max_model_len && r.kv.modelled && r.kv.bytes_per_token && r.kv.sequences == 0)
      r.findings.error("PREFLIGHT_MEMORY", kNoFile, "", std::nullopt,
                       head + ": the weights fit, but the " + gib(budget - in.rank_bytes) + " left hold " +
                           std::to_string(r.kv.tokens) + " tokens of KV cache, less than one sequence of --max-model-len " +
                           std::to_string(r.options.max_model_len) + cache +
                           ". Fix: a smaller --max-model-len, --kv-cache-dtype fp8, or more ranks");
    else
      r.findings.info("PREFLIGHT_MEMORY_FITS", kNoFile, "", std::nullopt,
                      head + ": fits, " + gib(budget - in.rank_bytes) + " left for the KV cache and activations" + cache);
  }
}

std::string module_key(const Weight& w) { return w.rule->cls + "\x1f" + last_component(w.module) + "\x1f" + w.format; }

void summarise_modules(const Model& m, const std::vector<Weight>& weights, const Analysis& a, PreflightReport& r) {
  std::map<std::string, PreflightModule> by_key;
  std::map<std::string, std::set<std::string>> names;
  std::set<std::string> failing;
  for (const auto& [p, layers] : a.problems) failing.insert(p.cls);
  std::vector<std::string> order;
  for (const auto& w : weights) {
    const std::string key = module_key(w);
    auto [it, fresh] = by_key.try_emplace(key);
    PreflightModule& mod = it->second;
    if (fresh) {
      order.push_back(key);
      const TensorPartition t = partition_of(m, w, r.options.deployment);
      mod.cls = w.rule->cls;
      mod.split = w.rule->split;
      mod.merged = w.rule->merged;
      mod.format = w.format;
      mod.rows = t.rows;
      mod.cols = t.cols;
      mod.rank_rows = t.rank_rows;
      mod.rank_cols = t.rank_cols;
      mod.degree = t.degree;
      for (const auto& p : t.parts) mod.replicas = std::max(mod.replicas, p.replicas);
      if (split_is_expert(w.rule->split)) {
        const Deployment& d = r.options.deployment;
        mod.experts = t.experts ? t.experts : w.experts;
        mod.experts_per_rank = d.ep > 1 ? ceil_div(mod.experts, d.ep) : mod.experts;
      }
      mod.divides = !failing.count(mod.cls) || w.format != "fp8_block";
    }
    if (w.layer >= 0) mod.layers.push_back(w.layer);
    mod.tensors += 1;
    names[key].insert(last_component(w.module));
  }
  for (const auto& key : order) {
    PreflightModule mod = by_key[key];
    for (const auto& n : names[key]) mod.names += (mod.names.empty() ? "" : ", ") + n;
    std::sort(mod.layers.begin(), mod.layers.end());
    mod.layers.erase(std::unique(mod.layers.begin(), mod.layers.end()), mod.layers.end());
    r.modules.push_back(std::move(mod));
  }
  // The same table whatever the order of the tensors (headers sort by name, the config by layer).
  std::sort(r.modules.begin(), r.modules.end(), [](const PreflightModule& a, const PreflightModule& b) {
    return std::tie(a.cls, a.names, a.format) < std::tie(b.cls, b.names, b.format);
  });
}

// Each engine's verdict: the block rules as that engine applies them, its kernels, and every
// finding that stops all engines alike (memory, a split, a config mismatch).
void per_engine_verdicts(const Analysis& a, PreflightReport& r) {
  std::set<std::string> common;
  for (const auto& f : r.findings.items())
    if (f.severity == Severity::error && f.code != "PREFLIGHT_BLOCK_DIVISIBILITY" &&
        f.code != "PREFLIGHT_SCALE_ROW_SHARED" && f.code != "PREFLIGHT_KERNEL" && f.code != "PREFLIGHT_EP_SPLIT" &&
        f.code != "PREFLIGHT_ACTIVATION_SCHEME")
      common.insert(f.code);
  for (const auto& e : r.engines) {
    std::set<std::string> why = common;
    if (!a.split_problems.empty()) why.insert("PREFLIGHT_TP_SPLIT");
    for (const auto& [p, layers] : a.problems) {
      const BlockBehaviour b = behaviour(p, e);
      if (b == BlockBehaviour::refuse) why.insert("PREFLIGHT_BLOCK_DIVISIBILITY");
      if (b == BlockBehaviour::silent) why.insert("PREFLIGHT_SCALE_ROW_SHARED");
    }
    for (const auto& k : r.kernels)
      if (k.engine == e && k.support == "refused") why.insert("PREFLIGHT_KERNEL");
    if (r.findings.has_code("PREFLIGHT_EP_SPLIT") && rule_behaviour("expert_count", e) == BlockBehaviour::refuse)
      why.insert("PREFLIGHT_EP_SPLIT");
    if (r.findings.has_code("PREFLIGHT_ACTIVATION_SCHEME") &&
        rule_behaviour("activation_scheme", e) == BlockBehaviour::refuse)
      why.insert("PREFLIGHT_ACTIVATION_SCHEME");
    PreflightEngine v{e, why.empty(), ""};
    for (const auto& c : why) v.why += (v.why.empty() ? "" : ", ") + c;
    r.per_engine.push_back(std::move(v));
  }
}

bool check_usage(PreflightReport& r) {
  const auto& d = r.options.deployment;
  const EngineRules& rules = engine_rules();
  auto usage = [&](const std::string& m) {
    r.findings.error("PREFLIGHT_USAGE", kNoFile, "", std::nullopt, m);
    return false;
  };
  if (d.tp == 0 || d.ep == 0 || d.pp == 0) return usage("--tp, --ep and --pp must be at least 1");
  const std::string& kv = r.options.kv_cache_dtype;
  if (kv != "auto" && kv != "bf16" && kv != "fp16" && kv != "fp8")
    return usage("--kv-cache-dtype '" + kv + "' is not auto, bf16, fp16 or fp8");
  if (d.ep > 1 && d.tp % d.ep != 0)
    return usage("--ep " + std::to_string(d.ep) + " must divide --tp " + std::to_string(d.tp) +
                 " (experts are split over tp / ep ranks, whole when ep = tp)");
  for (const auto& e : r.engines)
    if (!rules.knows_engine(e)) return usage("unknown engine '" + e + "' (known: vllm, sglang, transformers)");
  if (!r.options.gpu.empty() && !rules.knows_architecture(r.options.gpu)) {
    std::string known;
    for (const auto& a : rules.architectures) known += std::string(known.empty() ? "" : ", ") + a;
    return usage("unknown GPU architecture '" + r.options.gpu + "' (known: " + known + ")");
  }
  return true;
}

}  // namespace

PreflightReport preflight(const std::string& path, const PreflightOptions& options) {
  PreflightReport r;
  r.path = path;
  r.options = options;
  r.engines = options.engines.empty() ? std::vector<std::string>{"vllm", "sglang"} : options.engines;
  if (!check_usage(r)) return r;
  Model m;
  LoadedModel loaded;
  if (!read_model(path, r, m, loaded)) return r;
  r.tensors = m.tensors.size();
  for (const auto& t : m.tensors) r.total_bytes += t.nbytes;
  if (!m.arch) {
    r.findings.error("PREFLIGHT_ARCH_UNKNOWN", "config.json", "", std::nullopt,
                     "model_type '" + r.model_type + "' has no partition rules (schemas/deploy/partitions.json)");
    return r;
  }
  const std::vector<Weight> weights = linear_weights(m);
  for (const auto& w : weights)
    if (w.format == "fp8_block") {
      r.block_n = m.scheme.block_rows;
      r.block_k = m.scheme.block_cols;
      break;
    }
  const Deployment& d = options.deployment;
  compare_with_config(m, r);
  check_heads(m, r);
  const Analysis a = analyse(m, d, weights);
  bool moe = false;
  for (const auto& w : weights) moe = moe || split_is_expert(w.rule->split);
  r.working = working_degrees(m, weights, r.engines, moe);
  r.rank_bytes = largest_rank_bytes(m, d, weights);
  record_block_weights(m, weights, r);
  if (!a.problems.empty() || !a.split_problems.empty()) report_block_problems(m, a, r, block_fix(a, weights, r));
  report_excluded(m, a, r);
  report_mx_groups(m, a, weights, r);
  summarise_modules(m, weights, a, r);
  check_kernels(weights, m, r);
  check_expert_parallel(routed_experts(weights), r);
  check_activation_scheme(m, r);
  r.kv = kv_cache_of(m, r);
  check_memory(r);
  r.findings.sort_stable();
  per_engine_verdicts(a, r);
  return r;
}

Outcome preflight_outcome(const PreflightReport& r) {
  // A request ckptkit does not answer (a GGUF file) is refused like a usage mistake.
  if (r.findings.has_code("PREFLIGHT_USAGE") || r.findings.has_code("PREFLIGHT_GGUF")) return Outcome::usage;
  return outcome_of(r.findings);
}

}  // namespace ckpt

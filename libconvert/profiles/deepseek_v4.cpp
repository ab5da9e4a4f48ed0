#include "profiles/deepseek_v4.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/checked_math.h"
#include "formats/json.h"
#include "profiles/embedded.h"
#include "profiles/expr.h"
#include "model/pairing.h"
#include "model/quant_config.h"

namespace ckpt {
namespace {

using simdjson::dom::element;

constexpr const char* kProfileStem = "deepseek-v4-flash";
// Bound on the expanded catalogue: 0731 has 72,317 tensors; a config asking for
// millions (E = 10^9 experts) must be rejected before it exhausts memory or time.
// 1.33x DeepSeek-V4-Pro's 149,782 tensors; the catalogue is counted before it is built,
// so a hostile config costs one counting pass, and an accepted one at most 200,000
// entries (about 150 B each, ~30 MB; about 0.25 s in the ASan + libFuzzer build, where
// 400,000 built with a temporary per name took over 1 s: the config_dsv4 fuzz target
// reported both as timeouts).
constexpr size_t kMaxCatalogue = 200'000;
// Per-code cap on catalogue findings: one missing block must not produce 10,000 lines.
constexpr size_t kFindingCap = 50;

const char* const kDsparkKeys[] = {"dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids",
                                   "dspark_markov_rank"};

// The module names QW's config rewrite puts into ignored_layers (§9), which SGLang
// must load as BF16 after conversion.
const char* const kQwIgnoredLayers[] = {
    "embed_tokens", "lm_head",      "norm",         "self_attn",   "input_layernorm", "post_attention_layernorm",
    "gate",         "shared_experts", "hc_attn_fn", "hc_attn_base", "hc_attn_scale",  "hc_ffn_fn",
    "hc_ffn_base",  "hc_ffn_scale", "hc_head_fn",   "hc_head_base", "hc_head_scale"};

// ---------------------------------------------------------------- profile text

struct LoadedProfile {
  JsonDoc doc;
  bool ok = false;
  std::string error;
};

// Parsed once; embedded_profiles() holds the text for the life of the program.
const LoadedProfile& dsv4_profile() {
  static LoadedProfile profile;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const auto& p : embedded_profiles()) {
      if (p.name != kProfileStem) continue;
      profile.ok = profile.doc.parse(p.json, profile.error);
      return;
    }
    profile.error = std::string("profile ") + kProfileStem + " is not embedded";
  });
  return profile;
}

// ---------------------------------------------------------------- config checks

struct ModelFacts {
  ExprEnv env;                  // dims + NR, T, S, dspark, mr, bm, bn
  std::vector<int64_t> ratios;  // compress_ratios
  int64_t layers = 0;
  int64_t stages = 0;
  bool dspark = false;
  bool bf16_experts = false;  // expert_dtype "bf16": `ckpt convert --experts bf16` output
};

// expert_dtype is "fp4" in every release; "bf16" marks a checkpoint whose routed experts
// were dequantized to BF16 [o, i] (no scales), which may then carry no quantization_config.
bool has_bf16_experts(element cfg) { return json_string(cfg, "expert_dtype") == "bf16"; }

// By-value views of an array or object. Range-for over `x.get_array().value_unsafe()`
// would bind a reference into a temporary simdjson_result that dies before the loop.
simdjson::dom::array items(element e) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return {};
  return a;
}

simdjson::dom::object members(element e) {
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) return {};
  return o;
}

// A profile string value; "" for anything else (then reported by whoever needs it).
std::string_view as_text(element e) {
  std::string_view v;
  return e.get_string().get(v) == simdjson::SUCCESS ? v : std::string_view();
}

bool string_key_equals(element cfg, const char* key, const char* want, const std::string& file, Findings& f,
                       const char* code) {
  auto v = json_string(cfg, key);
  if (v && *v == want) return true;
  f.error(code, file, "", std::nullopt,
          std::string(key) + " is " + (v ? json_quote(*v) : std::string("missing or not a string")) +
              ", required " + json_quote(want));
  return false;
}

// Integer dimensions named in the profile ("D": "hidden_size"), all required.
bool read_dims(element profile, element cfg, const std::string& file, Findings& f, ModelFacts& m) {
  bool ok = true;
  auto dims = json_get(profile, "dims");
  if (!dims || !dims->is_object()) {
    f.error("DSV4_PROFILE", file, "", std::nullopt, "profile has no \"dims\" object");
    return false;
  }
  for (auto [var, key_el] : members(*dims)) {
    std::string key(as_text(key_el));
    auto v = json_int(cfg, key);
    if (!v) {
      f.error("DSV4_CONFIG_MISSING_KEY", file, "", std::nullopt,
              key + " is missing or not an integer; the tensor catalogue needs it");
      ok = false;
    } else if (*v < 0) {
      f.error("DSV4_CONFIG_VALUE", file, "", std::nullopt, key + " is " + std::to_string(*v) + ", required >= 0");
      ok = false;
    } else {
      m.env.set(std::string(var), *v);
    }
  }
  return ok;
}

void read_optional_dims(element profile, element cfg, ModelFacts& m) {
  auto dims = json_get(profile, "optional_dims");
  if (!dims || !dims->is_object()) return;
  for (auto [var, key_el] : members(*dims)) {
    auto v = json_int(cfg, as_text(key_el));
    m.env.set(std::string(var), v && *v >= 0 ? *v : 0);
  }
}

// Array lengths named in the profile ("NR": "compress_ratios"); an absent array counts 0.
void read_lengths(element profile, element cfg, ModelFacts& m) {
  auto lengths = json_get(profile, "lengths");
  if (!lengths || !lengths->is_object()) return;
  for (auto [var, key_el] : members(*lengths)) {
    auto arr = json_get(cfg, as_text(key_el));
    int64_t n = 0;
    if (arr && arr->is_array()) n = static_cast<int64_t>(items(*arr).size());
    m.env.set(std::string(var), n);
  }
}

bool check_compress_ratios(element cfg, const std::string& file, Findings& f, ModelFacts& m) {
  auto ratios = json_int_array(cfg, "compress_ratios");
  if (!ratios) {
    f.error("DSV4_CONFIG_MISSING_KEY", file, "", std::nullopt,
            "compress_ratios is missing or not an array of integers; it gives one ratio per layer and per "
            "MTP/DSpark stage");
    return false;
  }
  m.ratios = *ratios;
  m.layers = *m.env.find("L");
  int64_t n = static_cast<int64_t>(ratios->size());
  if (n < m.layers) {
    f.error("DSV4_COMPRESS_RATIOS", file, "", std::nullopt,
            "compress_ratios has " + std::to_string(n) + " entries, fewer than num_hidden_layers " +
                std::to_string(m.layers) + "; required num_hidden_layers + number of stages");
    return false;
  }
  m.stages = n - m.layers;
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = (*ratios)[static_cast<size_t>(i)];
    bool is_stage = i >= m.layers;
    if (r != 0 && r != 4 && r != 128) {
      f.error("DSV4_COMPRESS_RATIOS", file, "", std::nullopt,
              "compress_ratios[" + std::to_string(i) + "] is " + std::to_string(r) + ", required one of 0, 4, 128");
      ok = false;
    } else if (is_stage && r != 0) {
      f.error("DSV4_COMPRESS_RATIOS", file, "", std::nullopt,
              "compress_ratios[" + std::to_string(i) + "] (stage " + std::to_string(i - m.layers) + ") is " +
                  std::to_string(r) + ", required 0: MTP/DSpark stages have no compressor");
      ok = false;
    }
  }
  return ok;
}

bool check_quant_config(element cfg, const std::string& file, Findings& f, ModelFacts& m) {
  auto q = json_get(cfg, "quantization_config");
  if (!q && m.bf16_experts) {  // fully BF16: nothing is block-quantized, scales are not expected
    m.env.set("bm", 128);
    m.env.set("bn", 128);
    return true;
  }
  if (!q || !q->is_object()) {
    f.error("DSV4_CONFIG_MISSING_KEY", file, "", std::nullopt,
            "quantization_config is missing; FP8 block sizes come from its weight_block_size");
    return false;
  }
  string_key_equals(*q, "quant_method", "fp8", file, f, "DSV4_QUANT_CONFIG");
  string_key_equals(*q, "fmt", "e4m3", file, f, "DSV4_QUANT_CONFIG");
  string_key_equals(*q, "scale_fmt", "ue8m0", file, f, "DSV4_QUANT_CONFIG");
  const WeightBlockSize wbs = read_weight_block_size(cfg);
  if (wbs.status != WeightBlockSize::valid) {
    f.error("DSV4_QUANT_CONFIG", file, "", std::nullopt,
            wbs.status == WeightBlockSize::absent
                ? "quantization_config.weight_block_size is missing; it must be two positive integers (e.g. [128, "
                  "128]): it is read, never assumed"
                : weight_block_size_problem(wbs));
    return false;
  }
  m.env.set("bm", static_cast<int64_t>(wbs.rows));
  m.env.set("bn", static_cast<int64_t>(wbs.cols));
  return true;
}

// All four dspark_* keys or none (§6). Returns false when the set is partial.
bool check_dspark_keys(element cfg, const std::string& file, Findings& f, ModelFacts& m) {
  std::vector<std::string> present, absent;
  for (const char* k : kDsparkKeys) (json_get(cfg, k) ? present : absent).push_back(k);
  if (!present.empty() && !absent.empty()) {
    std::string msg = "DSpark keys must be all present or all absent; present:";
    for (auto& k : present) msg += " " + k;
    msg += "; absent:";
    for (auto& k : absent) msg += " " + k;
    f.error("DSV4_DSPARK_KEYS", file, "", std::nullopt, msg);
    return false;
  }
  m.dspark = !present.empty();
  if (!m.dspark) return true;
  bool ok = true;
  for (const char* k : {"dspark_block_size", "dspark_noise_token_id", "dspark_markov_rank"}) {
    auto v = json_int(cfg, k);
    if (!v || *v < 0) {
      f.error("DSV4_DSPARK_KEYS", file, "", std::nullopt, std::string(k) + " must be a non-negative integer");
      ok = false;
    }
  }
  if (!json_int_array(cfg, "dspark_target_layer_ids")) {
    f.error("DSV4_DSPARK_KEYS", file, "", std::nullopt, "dspark_target_layer_ids must be an array of integers");
    ok = false;
  }
  return ok;
}

// Rules that leave the structure defined: reported, the catalogue is still built.
void check_dspark_values(element cfg, const std::string& file, Findings& f, const ModelFacts& m) {
  auto targets = json_int_array(cfg, "dspark_target_layer_ids");
  for (size_t i = 0; i < targets->size(); ++i) {
    int64_t t = (*targets)[i];
    if (t < 0 || t >= m.layers)
      f.error("DSV4_DSPARK_TARGETS", file, "", std::nullopt,
              "dspark_target_layer_ids[" + std::to_string(i) + "] is " + std::to_string(t) + ", required in [0, " +
                  std::to_string(m.layers) + ")");
  }
  if (static_cast<int64_t>(targets->size()) != m.stages)
    f.error("DSV4_DSPARK_TARGETS", file, "", std::nullopt,
            "dspark_target_layer_ids has " + std::to_string(targets->size()) + " entries, required one per stage: " +
                std::to_string(m.stages) + " (len(compress_ratios) - num_hidden_layers)");
  int64_t noise = json_int(cfg, "dspark_noise_token_id").value_or(0);
  int64_t vocab = *m.env.find("V");
  if (noise >= vocab)
    f.error("DSV4_DSPARK_NOISE_ID", file, "", std::nullopt,
            "dspark_noise_token_id is " + std::to_string(noise) + ", required < vocab_size " + std::to_string(vocab));
}

// A converted config (§9) lists the modules SGLang must load as BF16; 0731 also needs
// main_proj there, preview e_proj/h_proj, or draft acceptance collapses.
void check_ignored_layers(element cfg, const std::string& file, Findings& f, const ModelFacts& m) {
  auto q = json_get(cfg, "quantization_config");
  auto list = q ? json_get(*q, "ignored_layers") : std::nullopt;
  if (!list || !list->is_array()) return;
  std::unordered_set<std::string> have;
  for (auto e : items(*list))
    if (e.is_string()) have.emplace(e.get_string().value_unsafe());
  std::vector<std::string> want(std::begin(kQwIgnoredLayers), std::end(kQwIgnoredLayers));
  if (m.dspark) {
    want.push_back("main_proj");
  } else if (m.stages > 0) {
    want.push_back("e_proj");
    want.push_back("h_proj");
  }
  std::string missing;
  for (const auto& w : want)
    if (!have.count(w)) missing += (missing.empty() ? "" : ", ") + w;
  if (!missing.empty())
    f.warning("DSV4_IGNORED_LAYERS", file, "", std::nullopt,
              "quantization_config.ignored_layers lacks " + missing +
                  "; SGLang would re-quantise these modules to FP8 (for main_proj draft acceptance collapses)");
}

// Runs every §6 check; false when the catalogue cannot be derived.
bool check_config(element profile, element cfg, const std::string& file, Findings& f, ModelFacts& m) {
  string_key_equals(cfg, "model_type", "deepseek_v4", file, f, "DSV4_MODEL_TYPE");
  bool ok = read_dims(profile, cfg, file, f, m);
  read_optional_dims(profile, cfg, m);
  read_lengths(profile, cfg, m);
  if (ok) ok = check_compress_ratios(cfg, file, f, m);
  m.bf16_experts = has_bf16_experts(cfg);
  if (!m.bf16_experts) string_key_equals(cfg, "expert_dtype", "fp4", file, f, "DSV4_EXPERT_DTYPE");
  ok = check_quant_config(cfg, file, f, m) && ok;
  ok = check_dspark_keys(cfg, file, f, m) && ok;
  if (!ok) return false;
  if (m.dspark) check_dspark_values(cfg, file, f, m);
  check_ignored_layers(cfg, file, f, m);
  m.env.set("S", m.stages);
  m.env.set("dspark", m.dspark ? 1 : 0);
  return true;
}

// ---------------------------------------------------------------- catalogue expansion

// Expands the profile into `out`. With counting set it only counts the entries (no names
// or shapes are built), so a catalogue over kMaxCatalogue is refused before any of it is
// materialized and the real pass can reserve exactly.
class CatalogueBuilder {
 public:
  CatalogueBuilder(const std::string& file, Findings& f, std::vector<ExpectedTensor>& out, bool counting = false)
      : file_(file), f_(f), out_(out), counting_(counting) {}

  size_t size() const { return counting_ ? counted_ : out_.size(); }

  bool expand_entries(element entries, const ExprEnv& env, const std::string& block_prefix) {
    if (!entries.is_array()) return profile_error("entry list is not an array");
    for (element e : items(entries))
      if (!expand_entry(e, env, block_prefix)) return false;
    return true;
  }

  bool profile_error(const std::string& why) {
    f_.error("DSV4_PROFILE", file_, "", std::nullopt, std::string("profile ") + kProfileStem + ": " + why);
    return false;
  }

  bool eval(std::string_view expr, const ExprEnv& env, const std::string& what, int64_t& v) {
    std::string err;
    if (eval_expr(expr, env, v, err)) return true;
    f_.error("DSV4_CONFIG_VALUE", file_, what, std::nullopt, "cannot evaluate " + err);
    return false;
  }

 private:
  static std::string substitute(std::string_view pattern, std::string_view key, const std::string& value) {
    std::string s(pattern);
    size_t at = s.find(key);
    if (at != std::string::npos) s.replace(at, key.size(), value);
    return s;
  }

  bool expand_entry(element e, const ExprEnv& env, const std::string& block_prefix) {
    auto name_pattern = json_string(e, "name");
    if (!name_pattern) return profile_error("entry without a name");
    if (auto when = json_string(e, "when")) {
      int64_t cond = 0;
      if (!eval(*when, env, *name_pattern, cond)) return false;
      if (cond == 0) return true;
    }
    std::string name = substitute(*name_pattern, "{B}", block_prefix);
    std::vector<uint64_t> shape;
    if (!eval_shape(e, env, name, shape)) return false;
    std::string kind = json_string(e, "kind").value_or("tensor");
    if (kind == "tensor") {
      auto dtype = json_string(e, "dtype");
      if (!dtype || !dtype_from_name(*dtype)) return profile_error("entry " + name + " has no valid dtype");
      return push({name, *dtype, shape});
    }
    if (kind == "fp8_linear") return push_fp8_linear(name, shape, env);
    if (kind == "mxfp4_expert") return push_experts(e, name, shape, env);
    return profile_error("entry " + name + " has unknown kind " + json_quote(kind));
  }

  bool eval_shape(element e, const ExprEnv& env, const std::string& name, std::vector<uint64_t>& shape) {
    auto dims = json_get(e, "shape");
    if (!dims || !dims->is_array()) return profile_error("entry " + name + " has no shape array");
    for (element d : items(*dims)) {
      std::string_view expr = as_text(d);
      int64_t v = 0;
      if (!eval(expr, env, name, v)) return false;
      if (v < 1) {
        f_.error("DSV4_CONFIG_VALUE", file_, name, std::nullopt,
                 "dimension '" + std::string(expr) + "' evaluates to " + std::to_string(v) + ", required >= 1");
        return false;
      }
      shape.push_back(static_cast<uint64_t>(v));
    }
    return true;
  }

  bool push(ExpectedTensor t) {
    if (!add(1)) return false;
    if (!counting_) out_.push_back(std::move(t));
    return true;
  }

  // Room for n more entries under kMaxCatalogue (counted in counting mode).
  bool add(uint64_t n) {
    if (n > kMaxCatalogue - size()) {
      f_.error("DSV4_CONFIG_VALUE", file_, "", std::nullopt,
               "the config asks for more than " + std::to_string(kMaxCatalogue) + " tensors");
      return false;
    }
    if (counting_) counted_ += static_cast<size_t>(n);
    return true;
  }

  // FP8 E4M3 [o, i] with one E8M0 multiplier per weight_block_size block (§3).
  bool push_fp8_linear(const std::string& base, const std::vector<uint64_t>& shape, const ExprEnv& env) {
    if (shape.size() != 2) return profile_error("fp8_linear " + base + " needs a 2-D shape");
    uint64_t bm = static_cast<uint64_t>(*env.find("bm")), bn = static_cast<uint64_t>(*env.find("bn"));
    return push({base + ".weight", "F8_E4M3", shape}) &&
           push({base + ".scale", "F8_E8M0", {ceil_div(shape[0], bm), ceil_div(shape[1], bn)}});
  }

  // MXFP4 experts: I8 [o, i/2] (two E2M1 codes a byte) + E8M0 [o, i/32], for e in 0..repeat-1.
  bool push_experts(element e, const std::string& pattern, const std::vector<uint64_t>& shape, const ExprEnv& env) {
    if (shape.size() != 2) return profile_error("mxfp4_expert " + pattern + " needs a 2-D shape");
    if (shape[1] % 32 != 0) {
      f_.error("DSV4_CONFIG_VALUE", file_, pattern, std::nullopt,
               "MXFP4 input width " + std::to_string(shape[1]) + " is not a multiple of the 32-element group");
      return false;
    }
    int64_t count = 0;
    if (!eval(json_string(e, "repeat").value_or("1"), env, pattern, count)) return false;
    // 10^10 experts must cost one comparison, not 400,000 pushes.
    if (count > 0 && static_cast<uint64_t>(count) > (kMaxCatalogue - size()) / 2) {
      f_.error("DSV4_CONFIG_VALUE", file_, pattern, std::nullopt,
               "the config asks for " + std::to_string(count) + " experts of " + pattern +
                   ", more than the catalogue limit of " + std::to_string(kMaxCatalogue) + " tensors allows");
      return false;
    }
    if (counting_) return count <= 0 || add(2 * static_cast<uint64_t>(count));
    // The one loop that scales with a config number: names are built in place (one
    // allocation per name) from the pattern split once around "{e}".
    const size_t at = pattern.find("{e}");
    const std::string_view head = std::string_view(pattern).substr(0, at);
    const std::string_view tail = at == std::string::npos ? std::string_view() : std::string_view(pattern).substr(at + 3);
    for (int64_t i = 0; i < count; ++i) {
      char digits[24];
      const std::string_view e(digits, static_cast<size_t>(std::snprintf(digits, sizeof digits, "%lld",
                                                                         static_cast<long long>(i))));
      ExpectedTensor w{std::string(), "I8", {shape[0], shape[1] / 2}};
      ExpectedTensor s{std::string(), "F8_E8M0", {shape[0], shape[1] / 32}};
      w.name.reserve(head.size() + e.size() + tail.size() + 7);
      w.name.append(head).append(at == std::string::npos ? std::string_view() : e).append(tail);
      s.name.reserve(w.name.size() + 6);
      s.name.append(w.name).append(".scale");
      w.name.append(".weight");
      if (!push(std::move(w)) || !push(std::move(s))) return false;
    }
    return true;
  }

  const std::string& file_;
  Findings& f_;
  std::vector<ExpectedTensor>& out_;
  bool counting_ = false;
  size_t counted_ = 0;
};

// Per-block variables: index, stage_block, ratio, then the profile's block_vars in order.
bool block_env(element profile, const ModelFacts& m, int64_t index, bool stage_block, CatalogueBuilder& b,
               ExprEnv& env) {
  size_t ratio_at = static_cast<size_t>(stage_block ? m.layers + index : index);
  if (ratio_at >= m.ratios.size()) return b.profile_error("block index beyond compress_ratios");
  env.set("index", index);
  env.set("stage_block", stage_block ? 1 : 0);
  env.set("ratio", m.ratios[ratio_at]);
  auto vars = json_get(profile, "block_vars");
  if (!vars || !vars->is_object()) return true;
  for (auto [name, expr] : members(*vars)) {
    int64_t v = 0;
    if (!b.eval(as_text(expr), env, std::string(name), v)) return false;
    env.set(std::string(name), v);
  }
  return true;
}

bool expand_blocks(element profile, const ModelFacts& m, CatalogueBuilder& b) {
  auto blocks = json_get(profile, "blocks");
  auto entries = json_get(profile, "block");
  if (!blocks || !blocks->is_array() || !entries) return b.profile_error("missing \"blocks\" or \"block\"");
  for (element blk : items(*blocks)) {
    auto prefix = json_string(blk, "prefix");
    auto count_expr = json_string(blk, "count");
    if (!prefix || !count_expr) return b.profile_error("block set without prefix or count");
    bool stage_block = json_int(blk, "stage_block").value_or(0) != 0;
    int64_t count = 0;
    if (!b.eval(*count_expr, m.env, *prefix, count)) return false;
    for (int64_t i = 0; i < count; ++i) {
      ExprEnv env = m.env;
      if (!block_env(profile, m, i, stage_block, b, env)) return false;
      if (!b.expand_entries(*entries, env, *prefix + std::to_string(i))) return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------- checkpoint comparison

// Emits at most kFindingCap findings per code, then one summary per code.
class CappedFindings {
 public:
  explicit CappedFindings(Findings& f) : f_(f) {}
  void add(Severity sev, const std::string& code, const std::string& file, const std::string& tensor,
           std::string message) {
    size_t& n = counts_[code];
    if (++n <= kFindingCap) f_.add(code, sev, file, tensor, std::nullopt, std::move(message));
    severities_[code] = sev;
  }
  ~CappedFindings() {
    for (const auto& [code, n] : counts_)
      if (n > kFindingCap)
        f_.add(code, severities_[code], "", "", std::nullopt,
               std::to_string(n - kFindingCap) + " more " + code + " findings not listed (" + std::to_string(n) +
                   " in all)");
  }

 private:
  Findings& f_;
  std::map<std::string, size_t> counts_;
  std::map<std::string, Severity> severities_;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string base_of(std::string_view name, std::string_view suffix) {
  return std::string(name.substr(0, name.size() - suffix.size()));
}

struct Catalogue {
  const std::vector<ExpectedTensor>& list;
  // Base names P of FP8 pairs whose weight is stored as BF16 (the converted form, §9).
  std::unordered_set<std::string> converted;
};

// The builder emits an fp8_linear as P.weight immediately followed by P.scale.
bool is_fp8_pair_weight(const std::vector<ExpectedTensor>& list, size_t i) {
  const ExpectedTensor& w = list[i];
  if (w.dtype != "F8_E4M3" || !ends_with(w.name, ".weight") || i + 1 >= list.size()) return false;
  const ExpectedTensor& s = list[i + 1];
  return s.dtype == "F8_E8M0" && s.name.size() == w.name.size() - 1 &&
         s.name.compare(0, w.name.size() - 7, w.name, 0, w.name.size() - 7) == 0 && ends_with(s.name, ".scale");
}

// An expected FP8 pair whose P.weight is BF16 of the same shape and whose P.scale is absent
// is the reference conversion's output, not a defect. A scale left beside a converted
// weight is the pairing check's stray scale.
void find_converted_pairs(const ModelView& view, Catalogue& cat) {
  for (size_t i = 0; i < cat.list.size(); ++i) {
    if (!is_fp8_pair_weight(cat.list, i)) continue;
    const ExpectedTensor& e = cat.list[i];
    const ModelTensor* t = view.find(e.name);
    if (t && t->type == "BF16" && t->shape == e.shape) cat.converted.insert(base_of(e.name, ".weight"));
  }
}

bool is_converted_member(const Catalogue& cat, const ExpectedTensor& e) {
  if (cat.converted.empty() || (e.dtype != "F8_E4M3" && e.dtype != "F8_E8M0")) return false;
  for (std::string_view suffix : {".weight", ".scale"})
    if (ends_with(e.name, suffix) && cat.converted.count(base_of(e.name, suffix))) return true;
  return false;
}

// Compares every expected tensor with the checkpoint; `matched` marks the view's tensors
// that the catalogue accounts for (no second name index is needed for the reverse check).
void compare_expected(const ModelView& view, const Catalogue& cat, const std::string& config_file,
                      std::vector<char>& matched, CappedFindings& cf) {
  for (const auto& e : cat.list) {
    const ModelTensor* t = view.find(e.name);
    bool converted = is_converted_member(cat, e);
    if (!t) {
      if (!(converted && ends_with(e.name, ".scale")))
        cf.add(Severity::error, "CAT_MISSING_TENSOR", config_file, e.name,
               "expected " + e.dtype + " " + shape_to_string(e.shape) + " is not in the checkpoint");
      continue;
    }
    matched[static_cast<size_t>(t - view.tensors.data())] = 1;
    if (converted) continue;  // BF16 weight already matched dtype and shape
    const std::string& file = view.file_of(*t);
    if (t->type != e.dtype)
      cf.add(Severity::error, "CAT_DTYPE_MISMATCH", file, e.name,
             "dtype is " + t->type + ", the profile requires " + e.dtype);
    if (t->shape != e.shape)
      cf.add(Severity::error, "CAT_SHAPE_MISMATCH", file, e.name,
             "shape is " + shape_to_string(t->shape) + ", the profile requires " + shape_to_string(e.shape));
  }
}

// The INT8-shift converted form (mxfp4-int8-shift.md §2): a block's per-expert MXFP4
// weights and scales are replaced by six fused tensors whose shapes follow from E, the
// expert widths and the kernel layout. Applied when the checkpoint holds that form.
bool has_int8_shift_form(const ModelView& view) {
  for (const auto& t : view.tensors)
    if (ends_with(t.name, ".ffn.experts.w13.mxfp4")) return true;
  return false;
}

void add_fused_expected(const std::string& block, const std::string& matrix, uint64_t experts, uint64_t rows,
                        uint64_t k, std::vector<ExpectedTensor>& out) {
  uint64_t kb = k / 32, groups = (rows + 7) / 8;
  std::string base = block + ".ffn.experts." + matrix;
  out.push_back({base + ".mxfp4", "U8", {experts, kb, groups, 128}});
  out.push_back({base + ".shift2", "U8", {experts, (kb + 3) / 4, groups, 8}});
  out.push_back({base + ".channel_scale", "F32", {experts, rows}});
}

std::vector<ExpectedTensor> fuse_expected_experts(const std::vector<ExpectedTensor>& list) {
  struct Block {
    uint64_t experts = 0;
    std::vector<uint64_t> w1, w2;  // one expert's packed weight shapes
  };
  std::map<std::string, Block> blocks;
  std::vector<ExpectedTensor> out;
  for (const auto& e : list) {
    std::string_view name = e.name;
    bool scale = ends_with(name, ".scale");
    std::string weight = scale ? base_of(name, ".scale") + ".weight" : std::string(name);
    if (!is_mxfp4_expert_name(weight)) {
      out.push_back(e);
      continue;
    }
    if (scale) continue;
    std::string block = weight.substr(0, weight.rfind(".ffn.experts."));
    Block& b = blocks[block];
    char matrix = weight[weight.size() - 8];
    if (matrix == '1') ++b.experts, b.w1 = e.shape;
    if (matrix == '2') b.w2 = e.shape;
  }
  for (const auto& [block, b] : blocks) {
    if (b.w1.size() != 2 || b.w2.size() != 2) continue;
    add_fused_expected(block, "w13", b.experts, 2 * b.w1[0], 2 * b.w1[1], out);
    add_fused_expected(block, "w2", b.experts, b.w2[0], 2 * b.w2[1], out);
  }
  return out;
}

// The BF16-expert converted form: each MXFP4 expert I8 [o, i/2] + E8M0 [o, i/32] is one
// BF16 [o, i] weight.
std::vector<ExpectedTensor> bf16_expected_experts(const std::vector<ExpectedTensor>& list) {
  std::vector<ExpectedTensor> out;
  for (const auto& e : list) {
    bool scale = ends_with(e.name, ".scale");
    std::string weight = scale ? base_of(e.name, ".scale") + ".weight" : e.name;
    if (!is_mxfp4_expert_name(weight)) {
      out.push_back(e);
    } else if (!scale && e.shape.size() == 2) {
      out.push_back({e.name, "BF16", {e.shape[0], 2 * e.shape[1]}});
    }
  }
  return out;
}

std::unordered_set<std::string> allowed_dtypes(element profile) {
  std::unordered_set<std::string> out;
  if (auto a = json_get(profile, "allowed_dtypes"); a && a->is_array())
    for (auto e : items(*a))
      if (e.is_string()) out.emplace(e.get_string().value_unsafe());
  return out;
}

void compare_actual(const ModelView& view, const std::vector<char>& matched,
                    const std::unordered_set<std::string>& allowed, CappedFindings& cf) {
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    const std::string& file = view.file_of(t);
    if (!allowed.count(t.type))
      cf.add(Severity::error, "DTYPE_NOT_ALLOWED", file, t.name,
             "dtype " + t.type + " is outside the DeepSeek-V4 policy (BF16, F32, I64, I8, U8, F8_E4M3, F8_E8M0)");
    // A second tensor of an already matched name is a duplicate, reported by the reader.
    if (!matched[i] && view.find(t.name) == &t)
      cf.add(Severity::error, "CAT_UNEXPECTED_TENSOR", file, t.name,
             t.type + " " + shape_to_string(t.shape) + " is not in the tensor catalogue derived from config.json");
  }
}

}  // namespace

bool dsv4_expected_catalogue(element config, const std::string& config_display, Findings& f,
                             std::vector<ExpectedTensor>& out) {
  out.clear();
  const LoadedProfile& profile = dsv4_profile();
  if (!profile.ok) {
    f.error("DSV4_PROFILE", config_display, "", std::nullopt, "cannot load the profile: " + profile.error);
    return false;
  }
  if (!config.is_object()) {
    f.error("DSV4_CONFIG_MISSING_KEY", config_display, "", std::nullopt, "config.json is not a JSON object");
    return false;
  }
  element root = profile.doc.root();
  ModelFacts m;
  if (!check_config(root, config, config_display, f, m)) return false;
  auto globals = json_get(root, "globals");
  if (!globals) return CatalogueBuilder(config_display, f, out).profile_error("missing \"globals\"");
  // Count first: a config asking for too many tensors is refused without building any.
  CatalogueBuilder counter(config_display, f, out, true);
  if (!counter.expand_entries(*globals, m.env, "") || !expand_blocks(root, m, counter)) return false;
  out.reserve(counter.size());
  CatalogueBuilder b(config_display, f, out);
  bool ok = b.expand_entries(*globals, m.env, "") && expand_blocks(root, m, b);
  if (!ok) out.clear();
  return ok;
}

void check_deepseek_v4(const ModelView& view, Findings& f) {
  const std::string config_file = "config.json";
  if (!view.config) {
    f.error("DSV4_CONFIG_MISSING", config_file, "", std::nullopt,
            "config.json is required: the tensor catalogue is derived from it");
    return;
  }
  element cfg = view.config->root();
  std::vector<ExpectedTensor> expected;
  bool have_catalogue = dsv4_expected_catalogue(cfg, config_file, f, expected);
  if (have_catalogue) {
    if (has_int8_shift_form(view)) expected = fuse_expected_experts(expected);
    if (has_bf16_experts(cfg)) expected = bf16_expected_experts(expected);
    Catalogue cat{expected, {}};
    find_converted_pairs(view, cat);
    std::vector<char> matched(view.tensors.size(), 0);
    CappedFindings cf(f);
    compare_expected(view, cat, config_file, matched, cf);
    compare_actual(view, matched, allowed_dtypes(dsv4_profile().doc.root()), cf);
  }
  PairingOptions po;
  po.allow_bare_fp8_names = true;
  if (!json_get(cfg, "quantization_config") && has_bf16_experts(cfg)) {
    // Fully BF16 form: any FP8 tensor left has no loader route; leftover scales are strays.
    for (const auto& t : view.tensors)
      if (t.type == "F8_E4M3")
        f.error("DSV4_QUANT_CONFIG", view.file_of(t), t.name, t.offset,
                "F8_E4M3 tensor, but config.json has no quantization_config (expert_dtype \"bf16\" marks a fully "
                "BF16 checkpoint): no loader would apply its scale");
  } else if (!weight_block_size_from_config(cfg, po.block_rows, po.block_cols)) {
    return;  // already reported
  }
  check_fp8_pairing(view, po, f);
}

}  // namespace ckpt

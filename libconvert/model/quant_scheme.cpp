#include "model/quant_scheme.h"

#include <algorithm>
#include <string_view>

#include "formats/json.h"
#include "model/quant_config.h"

namespace ckpt {
namespace {

// "a.b.*.c": members by name; "*" is the first member of an object (config_groups.group_0).
std::optional<simdjson::dom::element> get_path(simdjson::dom::element root, std::string_view path) {
  simdjson::dom::element cur = root;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    simdjson::dom::object obj;
    if (cur.get_object().get(obj)) return std::nullopt;
    if (part == "*") {
      auto it = obj.begin();
      if (it == obj.end()) return std::nullopt;
      cur = (*it).value;
      continue;
    }
    auto next = json_get(cur, part);
    if (!next) return std::nullopt;
    cur = *next;
  }
  return cur;
}

std::optional<std::string> get_string(simdjson::dom::element root, std::string_view path) {
  auto v = get_path(root, path);
  std::string_view s;
  if (!v || v->get_string().get(s)) return std::nullopt;
  return std::string(s);
}

// One parsed profile file (schemas/quant/NAME.json); parsed once per process.
struct Profile {
  std::string name;
  int64_t priority = 0;
  struct Cond {
    std::string key, equals, not_equals;
    std::optional<bool> non_null;
  };
  std::vector<Cond> detect;
  QuantScheme scheme;  // everything but the config-dependent parts
  std::string rule_key, block_key;
  std::vector<std::pair<std::string, ScaleShape>> rules;
  std::string e8m0_key, e8m0_equals;
};

std::optional<ScaleShape> shape_from_name(std::string_view s) {
  if (s == "block") return ScaleShape::block;
  if (s == "channel") return ScaleShape::channel;
  if (s == "tensor") return ScaleShape::tensor;
  if (s == "block4d") return ScaleShape::block4d;
  if (s == "mxfp4_blocks") return ScaleShape::mxfp4_blocks;
  return std::nullopt;
}

std::string str(simdjson::dom::element e, std::string_view key) { return json_string(e, key).value_or(""); }

std::vector<std::string> strings(simdjson::dom::element e, std::string_view key) {
  std::vector<std::string> out;
  auto v = json_get(e, key);
  simdjson::dom::array arr;
  if (!v || v->get_array().get(arr)) return out;
  for (auto item : arr) {
    std::string_view s;
    if (!item.get_string().get(s)) out.emplace_back(s);
  }
  return out;
}

Profile parse_profile(const EmbeddedQuantProfile& p) {
  Profile out;
  out.name = p.name;
  JsonDoc doc;
  std::string error;
  if (!doc.parse(p.json, error)) return out;  // embedded at build time; tests parse every one
  const auto root = doc.root();
  out.scheme.profile = str(root, "name");
  out.priority = json_int(root, "priority").value_or(0);
  if (auto detect = json_get(root, "detect")) {
    simdjson::dom::array arr;
    if (!detect->get_array().get(arr))
      for (auto c : arr) {
        Profile::Cond cond{str(c, "key"), str(c, "equals"), str(c, "not_equals"), std::nullopt};
        bool b = false;
        if (auto nn = json_get(c, "non_null"); nn && !nn->get_bool().get(b)) cond.non_null = b;
        out.detect.push_back(cond);
      }
  }
  if (auto w = json_get(root, "weight")) {
    out.scheme.weight_suffix = str(*w, "suffix");
    bool bare = false;
    if (auto b = json_get(*w, "bare_names"); b && !b->get_bool().get(bare)) out.scheme.bare_names = bare;
  }
  if (auto scales = json_get(root, "scales")) {
    simdjson::dom::array arr;
    if (!scales->get_array().get(arr))
      for (auto s : arr) {
        ScaleRule r;
        r.suffix = str(s, "suffix");
        for (const auto& d : strings(s, "dtypes"))
          if (auto dt = dtype_from_name(d)) r.dtypes.push_back(*dt);
        r.meaning = str(s, "meaning") == "e8m0" ? ScaleMeaning::e8m0 : ScaleMeaning::multiplier;
        out.scheme.scales.push_back(std::move(r));
      }
  }
  if (auto m = json_get(root, "e8m0_marker")) {
    out.e8m0_key = str(*m, "key");
    out.e8m0_equals = str(*m, "equals");
  }
  if (auto shape = json_get(root, "shape")) {
    out.scheme.shape = shape_from_name(str(*shape, "rule")).value_or(ScaleShape::block);
    out.rule_key = str(*shape, "rule_key");
    out.block_key = str(*shape, "block_key");
    if (auto rules = json_get(*shape, "rules")) {
      simdjson::dom::object obj;
      if (!rules->get_object().get(obj))
        for (auto m : obj) {
          std::string_view v;
          if (m.value.get_string().get(v)) continue;
          if (auto s = shape_from_name(v)) out.rules.emplace_back(std::string(m.key), *s);
        }
    }
  }
  out.scheme.dropped = strings(root, "dropped");
  out.scheme.exclusion_key = str(root, "exclusion_key");
  return out;
}

const std::vector<Profile>& profiles() {
  static const std::vector<Profile> kProfiles = [] {
    std::vector<Profile> v;
    for (const auto& p : embedded_quant_profiles()) v.push_back(parse_profile(p));
    std::stable_sort(v.begin(), v.end(), [](const Profile& a, const Profile& b) { return a.priority > b.priority; });
    return v;
  }();
  return kProfiles;
}

bool matches(const Profile& p, simdjson::dom::element root) {
  if (p.detect.empty()) return false;
  for (const auto& c : p.detect) {
    auto v = get_path(root, c.key);
    if (c.non_null) {
      const bool present = v && !v->is_null();
      if (present != *c.non_null) return false;
    }
    if (!c.equals.empty() && get_string(root, c.key) != c.equals) return false;
    if (!c.not_equals.empty() && get_string(root, c.key) == c.not_equals) return false;
  }
  return true;
}

// [rows, cols] from `key`: two positive integers, or absent (then 128 x 128).
bool read_block(simdjson::dom::element root, const std::string& key, QuantScheme& s, std::string& error) {
  if (key.empty()) return true;
  auto v = get_path(root, key);
  if (!v || v->is_null()) return true;
  simdjson::dom::array arr;
  std::vector<int64_t> dims;
  if (!v->get_array().get(arr))
    for (auto d : arr) {
      int64_t x = 0;
      if (d.get_int64().get(x)) {
        dims.clear();
        break;
      }
      dims.push_back(x);
    }
  if (dims.size() != 2 || dims[0] < 1 || dims[1] < 1 || dims[0] > kMaxWeightBlock || dims[1] > kMaxWeightBlock) {
    error = key + " is " + json_to_string(*v) + "; it must be two positive integers [rows, cols] (e.g. [128, 128])";
    return false;
  }
  s.block_rows = static_cast<uint64_t>(dims[0]);
  s.block_cols = static_cast<uint64_t>(dims[1]);
  s.block_given = true;
  return true;
}

bool resolve(const Profile& p, simdjson::dom::element root, QuantScheme& s, std::string& error) {
  s = p.scheme;
  s.quant_method = get_string(root, "quantization_config.quant_method").value_or("");
  if (!p.e8m0_key.empty()) s.e8m0_declared = get_string(root, p.e8m0_key) == p.e8m0_equals;
  if (!p.rule_key.empty()) {
    auto v = get_string(root, p.rule_key);
    bool found = false;
    for (const auto& [name, shape] : p.rules)
      if (v == name) {
        s.shape = shape;
        found = true;
      }
    if (!found) {
      std::string known;
      for (const auto& r : p.rules) known += (known.empty() ? "" : ", ") + r.first;
      error = "quantization profile " + s.profile + ": " + p.rule_key + " is " +
              (v ? "\"" + *v + "\"" : std::string("absent")) + "; known: " + known;
      return false;
    }
  }
  if (!read_block(root, p.block_key, s, error)) return false;
  if (!s.exclusion_key.empty())
    if (auto v = get_path(root, s.exclusion_key)) {
      simdjson::dom::array arr;
      if (!v->get_array().get(arr))
        for (auto item : arr) {
          std::string_view x;
          if (!item.get_string().get(x)) s.excluded.emplace_back(x);
        }
    }
  return true;
}

}  // namespace

const char* scale_shape_name(ScaleShape s) {
  switch (s) {
    case ScaleShape::block: return "block";
    case ScaleShape::channel: return "channel";
    case ScaleShape::tensor: return "tensor";
    case ScaleShape::block4d: return "block4d";
    case ScaleShape::mxfp4_blocks: return "mxfp4_blocks";
  }
  return "block";
}

QuantScheme legacy_quant_scheme() {
  QuantScheme s;
  s.scales = {ScaleRule{".scale", {Dtype::F8_E8M0}, ScaleMeaning::e8m0},
              ScaleRule{".weight_scale_inv", {Dtype::F32}, ScaleMeaning::multiplier}};
  return s;
}

std::vector<std::string> quant_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.scheme.profile);
  std::sort(names.begin(), names.end());
  return names;
}

bool detect_quant_scheme(const JsonDoc* config, QuantScheme& out, std::string& error) {
  out = legacy_quant_scheme();
  if (!config) return true;
  const auto root = config->root();
  // DeepSeek-V4 is recognised by its model type (its checks own its quantization_config).
  for (const auto& p : profiles())
    if (matches(p, root)) return resolve(p, root, out, error);
  auto qc = json_get(root, "quantization_config");
  if (!qc) return true;
  auto method = json_get(*qc, "quant_method");
  if (!method) {
    // A block size without a method: the legacy rules with that block (validated as before).
    const WeightBlockSize w = read_weight_block_size(root);
    if (w.status == WeightBlockSize::valid) {
      out.block_rows = w.rows;
      out.block_cols = w.cols;
      out.block_given = true;
    }
    return true;
  }
  std::string known;
  for (const auto& n : quant_profile_names()) known += (known.empty() ? "" : ", ") + n;
  std::string what = "quant_method " + json_to_string(*method);
  if (auto fmt = get_string(root, "quantization_config.format")) what += " with format \"" + *fmt + "\"";
  error = "quantization_config " + what +
          " matches no quantization profile (known: " + known +
          "); refusing to guess how its scales are stored";
  return false;
}

}  // namespace ckpt

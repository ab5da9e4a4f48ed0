#include "model/quant_scheme.h"

#include <algorithm>
#include <string_view>

#include "formats/checkpoint.h"
#include "formats/json.h"
#include "model/module_pattern.h"
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
  // A side file the profile is also (or only) read from: its detect rule (paths in that
  // file) and how the config.json paths the profile uses map into it.
  struct Side {
    std::string file;
    std::vector<Cond> detect;
    std::vector<std::pair<std::string, std::string>> keys;  // config.json path -> side file path
    bool quant_only = false;  // the file describes only the quantization (not copied once gone)
  };
  std::optional<Side> side;
  // Config members that change the arithmetic and that ckptkit implements only for some values
  // (compressed-tensors' symmetric, num_bits, type, dynamic, actorder...): any other value, or
  // an object with more members than one (config_groups), is refused naming the member.
  struct Requirement {
    std::string key;
    std::vector<std::string> allowed;  // compact JSON texts; empty: any value
    bool absent_ok = true;
    std::optional<size_t> max_members;  // an object with at most this many members
    std::string why;
  };
  std::vector<Requirement> requires_;
};

// Where a profile's config paths are read: config.json itself, or a side file through the
// profile's key map (a path the map does not name is absent there).
struct Source {
  simdjson::dom::element root;
  const std::vector<std::pair<std::string, std::string>>* keys = nullptr;
  std::string file = "config.json";

  std::optional<simdjson::dom::element> get(std::string_view path) const;
  std::optional<std::string> get_string(std::string_view path) const {
    auto v = get(path);
    std::string_view s;
    if (!v || v->get_string().get(s)) return std::nullopt;
    return std::string(s);
  }
  // How a path is named in messages: "quantization_config.quant_algo" in config.json,
  // "hf_quant_config.json quantization.quant_algo" in a side file.
  std::string name(std::string_view path) const {
    if (!keys) return std::string(path);
    for (const auto& [from, to] : *keys)
      if (from == path) return file + " " + to;
    return file + " " + std::string(path);
  }
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

std::vector<Profile::Cond> parse_detect(simdjson::dom::element root) {
  std::vector<Profile::Cond> out;
  if (auto detect = json_get(root, "detect")) {
    simdjson::dom::array arr;
    if (!detect->get_array().get(arr))
      for (auto c : arr) {
        Profile::Cond cond{str(c, "key"), str(c, "equals"), str(c, "not_equals"), std::nullopt};
        bool b = false;
        if (auto nn = json_get(c, "non_null"); nn && !nn->get_bool().get(b)) cond.non_null = b;
        out.push_back(cond);
      }
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
  out.detect = parse_detect(root);
  if (auto side = json_get(root, "side_config")) {
    Profile::Side sc;
    sc.file = str(*side, "file");
    sc.detect = parse_detect(*side);
    bool b = false;
    if (auto q = json_get(*side, "quant_only"); q && !q->get_bool().get(b)) sc.quant_only = b;
    if (auto keys = json_get(*side, "keys")) {
      simdjson::dom::object obj;
      if (!keys->get_object().get(obj))
        for (auto m : obj) {
          std::string_view v;
          if (!m.value.get_string().get(v)) sc.keys.emplace_back(std::string(m.key), std::string(v));
        }
    }
    if (!sc.file.empty()) out.side = std::move(sc);
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
  if (auto reqs = json_get(root, "requires")) {
    simdjson::dom::array arr;
    if (!reqs->get_array().get(arr))
      for (auto r : arr) {
        Profile::Requirement q;
        q.key = str(r, "key");
        q.why = str(r, "why");
        bool b = true;
        if (auto a = json_get(r, "absent_ok"); a && !a->get_bool().get(b)) q.absent_ok = b;
        if (auto m = json_int(r, "max_members")) q.max_members = static_cast<size_t>(*m);
        simdjson::dom::array allowed;
        if (auto a = json_get(r, "allowed"); a && !a->get_array().get(allowed))
          for (auto v : allowed) q.allowed.push_back(json_to_string(v));
        out.requires_.push_back(std::move(q));
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

std::optional<simdjson::dom::element> Source::get(std::string_view path) const {
  if (!keys) return get_path(root, path);
  for (const auto& [from, to] : *keys)
    if (from == path) return get_path(root, to);
  return std::nullopt;
}

bool conditions_hold(const std::vector<Profile::Cond>& detect, simdjson::dom::element root) {
  if (detect.empty()) return false;
  for (const auto& c : detect) {
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

bool matches(const Profile& p, simdjson::dom::element root) { return conditions_hold(p.detect, root); }

// [rows, cols] from `key`: two positive integers, or absent (then 128 x 128).
bool read_block(const Source& src, const std::string& key, QuantScheme& s, std::string& error) {
  if (key.empty()) return true;
  auto v = src.get(key);
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
    error = src.name(key) + " is " + json_to_string(*v) + "; it must be two positive integers [rows, cols] (e.g. [128, 128])";
    return false;
  }
  s.block_rows = static_cast<uint64_t>(dims[0]);
  s.block_cols = static_cast<uint64_t>(dims[1]);
  s.block_given = true;
  return true;
}

// Every requirement of the profile holds in `src`; else `error` names the member, its value
// and what ckptkit implements.
bool requirements_hold(const Profile& p, const Source& src, std::string& error) {
  for (const auto& q : p.requires_) {
    auto v = src.get(q.key);
    const std::string value = v ? json_to_string(*v) : std::string();
    std::string problem;
    if (!v) {
      if (!q.absent_ok) problem = "absent";
    } else if (q.max_members) {
      simdjson::dom::object obj;
      if (!v->get_object().get(obj) && obj.size() > *q.max_members)
        problem = "an object of " + std::to_string(obj.size()) + " members, where ckptkit reads at most " +
                  std::to_string(*q.max_members);
    } else if (!q.allowed.empty() && std::find(q.allowed.begin(), q.allowed.end(), value) == q.allowed.end()) {
      std::string allowed;
      for (const auto& a : q.allowed) allowed += (allowed.empty() ? "" : " or ") + a;
      problem = value + ", where ckptkit implements only " + allowed;
    }
    if (problem.empty()) continue;
    error = "quantization profile " + p.scheme.profile + ": " + src.name(q.key) + " is " + problem +
            (q.why.empty() ? "" : " (" + q.why + ")") + "; refusing to convert arithmetic it does not implement";
    return false;
  }
  return true;
}

bool resolve(const Profile& p, const Source& src, QuantScheme& s, std::string& error) {
  if (!requirements_hold(p, src, error)) return false;
  s = p.scheme;
  s.config_file = src.file;
  s.quant_method = src.get_string("quantization_config.quant_method").value_or("");
  if (!p.e8m0_key.empty()) s.e8m0_declared = src.get_string(p.e8m0_key) == p.e8m0_equals;
  if (!p.rule_key.empty()) {
    auto v = src.get_string(p.rule_key);
    bool found = false;
    for (const auto& [name, shape] : p.rules)
      if (v == name) {
        s.shape = shape;
        found = true;
      }
    if (!found) {
      std::string known;
      for (const auto& r : p.rules) known += (known.empty() ? "" : ", ") + r.first;
      error = "quantization profile " + s.profile + ": " + src.name(p.rule_key) + " is " +
              (v ? "\"" + *v + "\"" : std::string("absent")) + "; known: " + known +
              "; refusing to guess how its scales are stored";
      return false;
    }
  }
  if (!read_block(src, p.block_key, s, error)) return false;
  if (!s.exclusion_key.empty()) s.exclusion_source = src.name(s.exclusion_key);
  if (!s.exclusion_key.empty())
    if (auto v = src.get(s.exclusion_key)) {
      simdjson::dom::array arr;
      if (!v->get_array().get(arr))
        for (auto item : arr) {
          std::string_view x;
          if (!item.get_string().get(x)) s.excluded.emplace_back(x);
        }
    }
  for (const auto& e : s.excluded)
    if (auto problem = module_pattern_problem(e)) {
      error = s.exclusion_source + " entry " + json_quote(e) + " cannot be evaluated (" + *problem +
              "; see model/module_pattern.h for what is); refusing to guess which modules it leaves unquantized";
      return false;
    }
  return true;
}

// What a side file says, for a refusal: the values of the keys the profiles reading that file
// detect on ("producer.name is \"x\""), or the file's marker section.
std::string describe_side(const std::string& file, simdjson::dom::element root) {
  std::string out;
  for (const auto& p : profiles()) {
    if (!p.side || p.side->file != file) continue;
    for (const auto& c : p.side->detect) {
      if (out.find(c.key + " is ") != std::string::npos) continue;
      auto v = get_path(root, c.key);
      out += (out.empty() ? "" : ", ") + c.key + " is " + (v ? json_to_string(*v) : std::string("absent"));
    }
  }
  return out.empty() ? "its content" : out;
}

// params.json is a quantization description only when it has this section; hf_quant_config.json always is.
const char* side_marker(const std::string& file) { return file == "params.json" ? "quantization" : ""; }

}  // namespace

QuantConfigInputs quant_config_inputs(const Checkpoint& ck) {
  QuantConfigInputs in;
  in.config = ck.config.get();
  for (const auto& [file, doc] : ck.side_configs) in.side.push_back(QuantSideConfig{file, doc.get()});
  return in;
}

bool detect_quant_scheme(const Checkpoint& ck, QuantScheme& out, QuantDetectError& error) {
  return detect_quant_scheme(quant_config_inputs(ck), out, error);
}

bool detect_quant_scheme(const QuantConfigInputs& in, QuantScheme& out, QuantDetectError& err) {
  err = QuantDetectError{};
  if (!detect_quant_scheme(in.config, out, err.message)) return false;
  const bool config_quantized = in.config && json_get(in.config->root(), "quantization_config").has_value();
  std::string chosen_by;  // the side file whose profile was taken
  auto fail = [&err](const char* code, std::string file, std::string message) {
    err.code = code;
    err.file = std::move(file);
    err.message = std::move(message);
    return false;
  };
  for (const auto& sc : in.side) {
    if (!sc.doc)
      return fail("QUANT_CONFIG_UNREADABLE", sc.file,
                  sc.file + " is present but could not be read (see the other findings); refusing to guess "
                            "whether and how the checkpoint is quantized");
    const auto root = sc.doc->root();
    const std::string marker = side_marker(sc.file);
    if (!marker.empty() && !get_path(root, marker)) continue;  // params.json of an unquantized model
    const Profile* match = nullptr;
    for (const auto& p : profiles())
      if (p.side && p.side->file == sc.file && conditions_hold(p.side->detect, root)) {
        match = &p;
        break;
      }
    if (!match) {
      std::string what = marker.empty() ? describe_side(sc.file, root)
                                        : marker + " is " + json_to_string(*get_path(root, marker));
      return fail("QUANT_PROFILE_UNKNOWN", sc.file,
                  sc.file + ": " + what + ", which no quantization profile describes; refusing to guess how its "
                                          "scales are stored");
    }
    QuantScheme side;
    if (!resolve(*match, Source{root, &match->side->keys, sc.file}, side, err.message))
      return fail("QUANT_PROFILE_UNKNOWN", sc.file, err.message);
    if (match->side->quant_only) side.quant_only_files.push_back(sc.file);
    if (!chosen_by.empty())
      return fail("QUANT_CONFIG_CONFLICT", chosen_by + " and " + sc.file,
                  chosen_by + " and " + sc.file + " both describe the quantization; refusing to guess which applies");
    if (config_quantized) {
      const std::string both = "config.json and " + sc.file;
      if (out.profile != side.profile)
        return fail("QUANT_CONFIG_CONFLICT", both,
                    "config.json quantization_config selects " +
                        (out.profile.empty() ? std::string("no quantization profile") : "profile " + out.profile) +
                        " but " + sc.file + " selects " + side.profile +
                        "; the two files disagree on how the checkpoint is quantized");
      // Both state it: every value the profile reads must be the same in both (one file
      // silent about a value is no disagreement).
      for (const auto& [from, to] : match->side->keys) {
        auto a = get_path(in.config->root(), from);
        auto b = get_path(root, to);
        if (!a || !b || json_to_string(*a) == json_to_string(*b)) continue;
        return fail("QUANT_CONFIG_CONFLICT", both,
                    "config.json " + from + " is " + json_to_string(*a) + " but " + sc.file + " " + to + " is " +
                        json_to_string(*b) + "; the two files disagree on how the checkpoint is quantized");
      }
      side.quant_method = out.quant_method;
      side.config_file = both;
    }
    out = std::move(side);
    chosen_by = sc.file;
  }
  return true;
}

bool module_excluded(const QuantScheme& s, std::string_view name) {
  for (const std::string& e : s.excluded)
    if (module_pattern_matches(e, name)) return true;
  return false;
}

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
    if (matches(p, root)) return resolve(p, Source{root}, out, error);
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

// config.json of a relayout output (relayout_config.h).
#include "relayout/relayout_config.h"

#include <algorithm>
#include <optional>

#include "deploy/partition_model.h"
#include "formats/json.h"
#include "formats/json_pretty.h"
#include "plan/quant_module_lists.h"

namespace ckpt {

namespace {


std::vector<std::string> with(std::vector<std::string> list, const std::vector<std::string>& more) {
  for (const auto& m : more)
    if (std::find(list.begin(), list.end(), m) == list.end()) list.push_back(m);
  return list;
}

bool write_quant(JsonPrettyWriter& w, simdjson::dom::element qc, const RelayoutPlan& plan, std::string& error) {
  simdjson::dom::object obj;
  if (qc.get_object().get(obj)) {
    error = "quantization_config is not an object";
    return false;
  }
  const bool has_ignored = json_get(qc, kIgnoredLayers).has_value(), has_not = json_get(qc, kNotConvert).has_value();
  const bool add_both = !plan.excluded.empty() && !has_ignored && !has_not;
  bool has_block = false;
  w.begin_object();
  for (auto m : obj) {
    w.key(m.key);
    if (m.key == "weight_block_size") {
      has_block = true;
      w.begin_array();
      w.uint64(plan.block_n);
      w.uint64(plan.block_k);
      w.end_array();
    } else if (m.key == kIgnoredLayers || m.key == kNotConvert) {
      auto names = quant_module_list(qc, m.key, error);
      if (!names) return false;
      w.string_array(with(*names, plan.excluded));
    } else {
      w.element(m.value);
    }
  }
  if (!has_block) {
    error = "quantization_config has no weight_block_size to change";
    return false;
  }
  if (add_both) {
    w.key(kIgnoredLayers);
    w.string_array(plan.excluded);
    w.key(kNotConvert);
    w.string_array(plan.excluded);
  }
  w.end_object();
  return true;
}

void write_pair(JsonPrettyWriter& w, uint64_t a, uint64_t b) {
  w.begin_array();
  w.uint64(a);
  w.uint64(b);
  w.end_array();
}

void write_record(JsonPrettyWriter& w, const RelayoutPlan& plan, const RelayoutTarget& t, const std::string& sha) {
  w.begin_object();
  w.key("tool");
  w.string("ckptkit");
  w.key("version");
  w.string(CKPT_VERSION);
  w.key("target");
  w.begin_object();
  w.key("tp");
  w.uint64(t.tp);
  w.key("ep");
  w.uint64(t.ep);
  w.key("engines");
  w.string_array(t.engines);
  w.end_object();
  w.key("weight_block_size_before");
  write_pair(w, plan.old_n, plan.old_k);
  w.key("weight_block_size");
  write_pair(w, plan.block_n, plan.block_k);
  w.key("min_block");
  write_pair(w, plan.min_n, plan.min_k);
  w.key("choices");
  w.begin_array();
  for (const auto& c : plan.choices) {
    w.begin_object();
    w.key("module_class");
    w.string(c.unit);
    w.key("modules");
    w.string(c.names);
    w.key("action");
    w.string(relayout_action_name(c.action));
    w.key("why");
    w.string(c.why);
    w.key("layers");
    w.string(layer_ranges(c.layers));
    w.key("tensors");
    w.uint64(c.tensors);
    w.key("bytes");
    w.int64(c.bytes);
    w.end_object();
  }
  w.end_array();
  w.key("bf16_modules");
  w.string_array(plan.excluded);
  w.key("source_structure_sha256");
  w.string(sha);
  w.end_object();
}

std::optional<uint64_t> positive(simdjson::dom::element e) {
  int64_t v = 0;
  if (e.get(v) != simdjson::SUCCESS || v <= 0) return std::nullopt;
  return static_cast<uint64_t>(v);
}

bool read_pair(simdjson::dom::element rec, const char* key, uint64_t& a, uint64_t& b) {
  simdjson::dom::array arr;
  auto v = json_get(rec, key);
  if (!v || v->get_array().get(arr) || arr.size() != 2) return false;
  auto x = positive(arr.at(0).value_unsafe()), y = positive(arr.at(1).value_unsafe());
  if (!x || !y) return false;
  a = *x;
  b = *y;
  return true;
}

}  // namespace

bool rewrite_relayout_config(std::string_view input_json, const RelayoutPlan& plan, const RelayoutTarget& target,
                             const std::string& source_structure_sha256, std::string& output_json, std::string& error) {
  JsonDoc doc;
  if (!doc.parse(input_json, error)) return false;
  simdjson::dom::object root;
  if (doc.root().get_object().get(root)) {
    error = "top-level value is not an object";
    return false;
  }
  JsonPrettyWriter w;
  bool has_quant = false, has_record = false;
  w.begin_object();
  for (auto m : root) {
    w.key(m.key);
    if (m.key == "quantization_config") {
      has_quant = true;
      if (!write_quant(w, m.value, plan, error)) return false;
    } else if (m.key == "ckptkit_relayout") {
      has_record = true;
      write_record(w, plan, target, source_structure_sha256);
    } else {
      w.element(m.value);
    }
  }
  if (!has_quant) {
    error = "no quantization_config: the new weight_block_size has nowhere to go";
    return false;
  }
  if (!has_record) {
    w.key("ckptkit_relayout");
    write_record(w, plan, target, source_structure_sha256);
  }
  w.end_object();
  output_json = w.text() + "\n";
  return true;
}

bool read_relayout_record(simdjson::dom::element config, RelayoutRecord& r, std::string& error) {
  auto rec = json_get(config, "ckptkit_relayout");
  if (!rec || !rec->is_object()) {
    error = "config.json has no ckptkit_relayout object";
    return false;
  }
  if (!read_pair(*rec, "weight_block_size", r.block_n, r.block_k) ||
      !read_pair(*rec, "weight_block_size_before", r.old_n, r.old_k)) {
    error = "ckptkit_relayout.weight_block_size(_before) is not two positive integers";
    return false;
  }
  auto list = json_get(*rec, "bf16_modules");
  simdjson::dom::array arr;
  if (!list || list->get_array().get(arr)) {
    error = "ckptkit_relayout.bf16_modules is not an array";
    return false;
  }
  for (auto e : arr) {
    std::string_view s;
    if (e.get_string().get(s) || s.empty()) {
      error = "ckptkit_relayout.bf16_modules holds an entry that is not a module name";
      return false;
    }
    r.bf16_modules.emplace_back(s);
  }
  return true;
}

std::vector<std::string> promoted_weights(const RelayoutRecord& record, const std::vector<std::string>& fp8_weights) {
  std::vector<std::string> out;
  for (const auto& w : fp8_weights) {
    const std::string module = module_of(w);
    for (const auto& e : record.bf16_modules)
      if (module == e || (module.size() > e.size() && module.compare(0, e.size(), e) == 0 && module[e.size()] == '.')) {
        out.push_back(w);
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ckpt

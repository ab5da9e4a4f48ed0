#include "report/inspect.h"

#include "formats/json.h"
#include "core/display.h"
#include "formats/json_writer.h"
#include "report/validation_report.h"
#include "model/quant_scheme.h"
#include "model/structure_hash.h"

namespace ckpt {
namespace {

std::string architecture_of(const LoadedModel& m) {
  if (m.gguf) return m.gguf->get_string("general.architecture").value_or("");
  if (!m.checkpoint.config) return "";
  auto root = m.checkpoint.config->root();
  simdjson::dom::array archs;
  if (auto v = json_get(root, "architectures"); v && !v->get_array().get(archs)) {
    for (auto a : archs)
      if (a.is_string()) return std::string(a.get_string().value_unsafe());
  }
  return json_string(root, "model_type").value_or("");
}

// Top-level config.json members (objects and arrays printed compactly), or every GGUF KV.
void collect_values(const LoadedModel& m, InspectSummary& s) {
  if (m.gguf) {
    for (const auto& kv : m.gguf->kvs) s.values.emplace_back(kv.key, kv.display(120));
    return;
  }
  simdjson::dom::object config;
  if (!m.checkpoint.config || m.checkpoint.config->root().get_object().get(config)) return;
  for (auto field : config)
    s.values.emplace_back(std::string(field.key), json_to_string(field.value));
}

}  // namespace

InspectSummary inspect_model(const LoadedModel& m) {
  InspectSummary s;
  s.path = m.path;
  s.format = m.format == ModelFormat::gguf ? "gguf" : "safetensors";
  s.architecture = architecture_of(m);
  if (m.format == ModelFormat::safetensors) {
    QuantScheme q;
    QuantDetectError error;
    if (detect_quant_scheme(m.checkpoint, q, error)) {
      s.quant_profile = q.profile;
      if (!q.profile.empty()) s.quant_config_file = q.config_file;
    } else {
      s.quant_profile = "unknown: " + error.file + ": " + error.message;
    }
  }
  s.files = m.view.files.size();
  s.tensors = m.view.tensors.size();
  std::vector<StructureRecord> records;
  records.reserve(m.view.tensors.size());
  for (const auto& t : m.view.tensors) {
    s.payload_bytes += t.nbytes;
    auto& st = s.types[t.type];
    st.tensors += 1;
    st.bytes += t.nbytes;
    records.push_back(StructureRecord{t.name, t.type, t.shape, t.nbytes});
  }
  s.structure_sha256 = structure_sha256(std::move(records));
  s.side_files = m.checkpoint.side_files;
  collect_values(m, s);
  return s;
}

std::string inspect_json(const InspectSummary& s, const Findings& findings) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kInspectSchemaId);
  w.key("path").value(s.path).key("format").value(s.format).key("architecture").value(s.architecture);
  if (!s.quant_profile.empty()) w.key("quant_profile").value(s.quant_profile);
  if (!s.quant_profile.empty() && !s.quant_config_file.empty()) w.key("quant_config_file").value(s.quant_config_file);
  w.key("files").value(s.files).key("tensors").value(s.tensors).key("payload_bytes").value(s.payload_bytes);
  w.key("structure_sha256").value(s.structure_sha256);
  w.key("types").begin_object();
  for (const auto& [type, st] : s.types)
    w.key(type).begin_object().key("tensors").value(st.tensors).key("bytes").value(st.bytes).end_object();
  w.end_object();
  w.key("values").begin_object();
  for (const auto& [k, v] : s.values) {
    w.key(k);
    if (s.format == "gguf")
      w.value(v);
    else
      w.raw(v);
  }
  w.end_object();
  w.key("side_files").begin_array();
  for (const auto& f : s.side_files) w.value(f);
  w.end_array();
  w.key("errors").value(static_cast<uint64_t>(findings.count(Severity::error)));
  write_findings_json(w, findings);
  w.end_object();
  return w.str() + "\n";
}

void print_inspect_human(const InspectSummary& s, const Findings& findings, std::ostream& out) {
  out << display_escape(s.path) << "\n";
  out << "  format        " << s.format << "\n";
  if (!s.architecture.empty()) out << "  architecture  " << display_escape(s.architecture) << "\n";
  if (!s.quant_profile.empty())
    out << "  quantization  " << display_escape(s.quant_profile)
        << (s.quant_config_file.empty() || s.quant_config_file == "config.json" ? "" : " (from " + s.quant_config_file + ")")
        << "\n";
  out << "  files         " << s.files << "\n";
  out << "  tensors       " << with_commas(s.tensors) << "\n";
  out << "  payload bytes " << with_commas(s.payload_bytes) << "\n";
  out << "  types:\n";
  for (const auto& [type, st] : s.types)
    out << "    " << display_escape(type) << std::string(type.size() < 12 ? 12 - type.size() : 1, ' ') << with_commas(st.tensors)
        << " tensors, " << with_commas(st.bytes) << " bytes\n";
  if (!s.values.empty()) out << (s.format == "gguf" ? "  metadata:\n" : "  config:\n");
  for (const auto& [k, v] : s.values) {
    std::string shown = v.size() > 100 ? v.substr(0, 97) + "..." : v;
    out << "    " << display_escape(k) << " = " << display_escape(shown) << "\n";
  }
  if (!s.side_files.empty()) {
    out << "  side files:";
    for (const auto& f : s.side_files) out << " " << display_escape(f);
    out << "\n";
  }
  for (const auto& f : findings.items())
    out << "  " << finding_text(f) << "\n";
  for (const auto& line : findings.omitted_lines()) out << "  " << display_escape(line) << "\n";
}

}  // namespace ckpt

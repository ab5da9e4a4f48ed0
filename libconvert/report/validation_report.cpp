#include "report/validation_report.h"

#include <cstdio>

#include "core/display.h"
#include "core/build_info.h"
#include "formats/json_writer.h"
#include "report/merge.h"

namespace ckpt {
namespace {

void write_files(JsonWriter& w, const ValidationReport& r) {
  w.key("files").begin_array();
  for (const auto& f : r.files) {
    w.begin_object().key("name").value(f.name).key("size").value(f.size);
    if (!f.sha256.empty()) w.key("sha256").value(f.sha256);
    if (!f.expected_sha256.empty()) w.key("expected_sha256").value(f.expected_sha256);
    if (!f.hub_status.empty()) w.key("hub_status").value(f.hub_status);
    w.end_object();
  }
  w.end_array();
}

void write_tensors(JsonWriter& w, const ValidationReport& r) {
  w.key("tensors").begin_array();
  for (const auto& t : r.tensors) {
    w.begin_object().key("file").value(t.file).key("name").value(t.name).key("type").value(t.type);
    w.key("shape").begin_array();
    for (uint64_t d : t.shape) w.value(d);
    w.end_array();
    w.key("offset").value(t.offset).key("nbytes").value(t.nbytes);
    if (!t.xxh3.empty()) w.key("xxh3").value(t.xxh3).key("nan").value(t.nan).key("inf").value(t.inf);
    w.end_object();
  }
  w.end_array();
}

const char* verdict_word(const ValidationReport& r) { return r.findings.has_errors() ? "fail" : "pass"; }

}  // namespace

std::string with_commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string validation_report_json(const ValidationReport& r) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kValidationSchemaId);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("path").value(r.path);
  w.key("format").value(r.format);
  w.key("profile").value(r.profile);
  if (!r.quant_profile.empty()) w.key("quant_profile").value(r.quant_profile);
  if (!r.quant_profile.empty() && !r.quant_config_file.empty()) w.key("quant_config_file").value(r.quant_config_file);
  w.key("options").begin_object().key("deep").value(r.deep).key("sha256").value(r.sha256).end_object();
  w.key("summary").begin_object();
  w.key("files").value(static_cast<uint64_t>(r.files.size()));
  w.key("tensors").value(r.tensor_count);
  w.key("payload_bytes").value(r.payload_bytes);
  w.key("bytes_read").value(r.bytes_read);
  w.key("seconds").value(r.seconds);
  w.key("errors").value(static_cast<uint64_t>(r.findings.count(Severity::error)));
  w.key("warnings").value(static_cast<uint64_t>(r.findings.count(Severity::warning)));
  w.key("infos").value(static_cast<uint64_t>(r.findings.count(Severity::info)));
  w.key("verdict").value(verdict_word(r));
  w.end_object();
  write_files(w, r);
  write_tensors(w, r);
  if (r.partition.active()) {  // a partial report, for `ckpt validate --merge`
    w.key("partition").begin_object().key("index").value(r.partition.index).key("count").value(r.partition.count);
    w.key("inventory_sha256").value(inventory_sha256(r));
    w.key("files").begin_array();
    for (const auto& f : r.partition_files) w.value(f);
    w.end_array().end_object();
  }
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str() + "\n";
}

std::string verdict_line(const ValidationReport& r) {
  size_t errors = r.findings.count(Severity::error), warnings = r.findings.count(Severity::warning);
  std::string head = r.findings.has_errors() ? "VERDICT: FAIL" : "VERDICT: PASS";
  return head + " - " + std::to_string(errors) + (errors == 1 ? " error, " : " errors, ") +
         std::to_string(warnings) + (warnings == 1 ? " warning" : " warnings") + " in " + display_escape(r.path);
}

void print_validation_human(const ValidationReport& r, std::ostream& out, size_t max_findings) {
  out << "ckpt validate " << display_escape(r.path) << "\n";
  if (!r.format.empty())
    out << "  format " << r.format << ", profile " << display_escape(r.profile) << ", " << r.files.size()
        << (r.files.size() == 1 ? " file, " : " files, ") << with_commas(r.tensor_count) << " tensors, "
        << with_commas(r.payload_bytes) << " payload bytes\n";
  if (!r.quant_profile.empty())
    out << "  quantization profile " << r.quant_profile
        << (r.quant_config_file.empty() || r.quant_config_file == "config.json" ? "" : " (from " + r.quant_config_file + ")")
        << "\n";
  size_t shown = 0;
  for (const auto& f : r.findings.items()) {
    if (max_findings && shown == max_findings) {
      out << "  ... and " << (r.findings.items().size() - shown) << " more findings (use --json for all)\n";
      break;
    }
    out << "  " << finding_text(f) << "\n";
    ++shown;
  }
  for (const auto& line : r.findings.omitted_lines()) out << "  " << line << "\n";
  if (r.deep || r.sha256) {
    char rate[64];
    double mbps = r.seconds > 0 ? static_cast<double>(r.bytes_read) / r.seconds / 1e6 : 0;
    std::snprintf(rate, sizeof rate, "%.2f s (%.0f MB/s)", r.seconds, mbps);
    out << "  read " << with_commas(r.bytes_read) << " bytes in " << rate << "\n";
  }
  if (r.partition.active())
    out << "  partition " << r.partition.text() << ": read " << r.partition_files.size() << " of " << r.files.size()
        << " files" << (r.partition.index == 0 ? "" : "; structural findings are in partition 0's report")
        << "; merge the " << r.partition.count << " reports with `ckpt validate --merge`\n";
  for (const auto& f : r.files)
    if (!f.sha256.empty() || !f.hub_status.empty())
      out << "  " << (f.sha256.empty() ? std::string(64, '-') : f.sha256) << "  " << display_escape(f.name)
          << (f.hub_status.empty() ? "" : "  " + display_escape(f.hub_status)) << "\n";
  out << verdict_line(r) << "\n";
}

}  // namespace ckpt

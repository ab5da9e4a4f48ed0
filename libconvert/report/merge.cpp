#include "report/merge.h"

#include <cerrno>

#include <algorithm>
#include <map>

#include "core/display.h"
#include "formats/json.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "report/validation_report.h"

namespace ckpt {
namespace {

// Part reports hold one entry per tensor: a 72k-tensor checkpoint makes ~20 MB.
constexpr uint64_t kMaxPartBytes = 1ull << 30;

std::optional<Severity> severity_of(std::string_view s) {
  if (s == "error") return Severity::error;
  if (s == "warning") return Severity::warning;
  if (s == "info") return Severity::info;
  return std::nullopt;
}

// A string member of a part report, as the bytes its writer was given: JsonWriter wrote
// bytes that are not UTF-8 with the reversible escape of core/display.h, which is undone
// here so the merged report does not escape them twice.
std::optional<std::string> report_string(simdjson::dom::element obj, std::string_view key) {
  auto s = json_string(obj, key);
  if (!s) return std::nullopt;
  return json_unescape_bytes(*s);
}

bool bool_of(simdjson::dom::element obj, std::string_view key) {
  auto v = json_get(obj, key);
  bool b = false;
  return v && !v->get_bool().get(b) && b;
}

uint64_t u64_of(simdjson::dom::element obj, std::string_view key) {
  return static_cast<uint64_t>(std::max<int64_t>(0, json_int(obj, key).value_or(0)));
}

bool parse_files(simdjson::dom::element root, ValidationReport& r) {
  auto v = json_get(root, "files");
  simdjson::dom::array arr;
  if (!v || v->get_array().get(arr)) return false;
  for (auto e : arr) {
    FileReport f;
    f.name = report_string(e, "name").value_or("");
    f.size = u64_of(e, "size");
    f.sha256 = report_string(e, "sha256").value_or("");
    f.expected_sha256 = report_string(e, "expected_sha256").value_or("");
    f.hub_status = report_string(e, "hub_status").value_or("");
    r.files.push_back(std::move(f));
  }
  return true;
}

bool parse_tensors(simdjson::dom::element root, ValidationReport& r) {
  auto v = json_get(root, "tensors");
  simdjson::dom::array arr;
  if (!v || v->get_array().get(arr)) return false;
  for (auto e : arr) {
    TensorReport t;
    t.file = report_string(e, "file").value_or("");
    t.name = report_string(e, "name").value_or("");
    t.type = report_string(e, "type").value_or("");
    auto shape = json_int_array(e, "shape");
    if (!shape) return false;
    for (int64_t d : *shape) t.shape.push_back(static_cast<uint64_t>(d));
    t.offset = u64_of(e, "offset");
    t.nbytes = u64_of(e, "nbytes");
    t.xxh3 = report_string(e, "xxh3").value_or("");
    t.nan = u64_of(e, "nan");
    t.inf = u64_of(e, "inf");
    r.tensors.push_back(std::move(t));
  }
  return true;
}

bool parse_findings(simdjson::dom::element root, ValidationReport& r) {
  auto v = json_get(root, "findings");
  simdjson::dom::array arr;
  if (!v || v->get_array().get(arr)) return false;
  for (auto e : arr) {
    Finding f;
    f.code = report_string(e, "code").value_or("");
    auto sev = severity_of(report_string(e, "severity").value_or(""));
    if (f.code.empty() || !sev) return false;
    f.severity = *sev;
    f.file = report_string(e, "file").value_or("");
    f.tensor = report_string(e, "tensor").value_or("");
    if (auto off = json_int(e, "offset")) f.offset = static_cast<uint64_t>(*off);
    f.message = report_string(e, "message").value_or("");
    r.findings.add(std::move(f));
  }
  // Counted-but-not-listed findings (findings.h's per-code cap) keep their counts.
  if (auto omitted = json_get(root, "findings_omitted")) {
    simdjson::dom::array list;
    if (omitted->get_array().get(list)) return false;
    for (auto e : list) {
      auto code = report_string(e, "code");
      auto sev = severity_of(report_string(e, "severity").value_or(""));
      auto count = json_int(e, "count");
      if (!code || code->empty() || !sev || !count || *count < 0) return false;
      r.findings.add_omitted(*code, *sev, static_cast<uint64_t>(*count));
    }
  }
  return true;
}

bool read_text(const std::string& path, std::string& text, std::string& error) {
  IoError err;
  if (!read_input_file(path, kMaxPartBytes, text, err)) {
    error = err.err == EFBIG ? path + " " + err.message + " (more than a report can be)" : err.message;
    return false;
  }
  return true;
}

struct Part {
  std::string path;
  ValidationReport report;
  std::string inventory;
};

MergeResult fail(MergeStatus status, std::string error) {
  MergeResult m;
  m.status = status;
  m.error = std::move(error);
  return m;
}

}  // namespace

std::string inventory_sha256(const ValidationReport& r) {
  std::string text = "format=" + r.format + "\nprofile=" + r.profile + "\ndeep=" + (r.deep ? "1" : "0") +
                     "\nsha256=" + (r.sha256 ? "1" : "0") + "\n";
  for (const auto& f : r.files) text += "file " + json_quote(f.name) + " " + std::to_string(f.size) + "\n";
  for (const auto& t : r.tensors) {
    text += "tensor " + json_quote(t.file) + " " + json_quote(t.name) + " " + json_quote(t.type) + " [";
    // Two steps: `(i ? "," : "") + std::to_string(...)` trips GCC 12's -Wrestrict false positive (bug 105329).
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) text += ",";
      text += std::to_string(t.shape[i]);
    }
    text += "] " + std::to_string(t.offset) + " " + std::to_string(t.nbytes) + "\n";
  }
  return sha256_hex(text);
}

bool parse_validation_report(std::string_view json, ValidationReport& r, std::string& error) {
  JsonDoc doc;
  if (!doc.parse(json, error)) return false;
  auto root = doc.root();
  if (report_string(root, "schema").value_or("") != kValidationSchemaId) {
    error = std::string("not a validation report (schema is not ") + kValidationSchemaId + ")";
    return false;
  }
  r = ValidationReport{};
  r.path = report_string(root, "path").value_or("");
  r.format = report_string(root, "format").value_or("");
  r.profile = report_string(root, "profile").value_or("");
  r.quant_profile = report_string(root, "quant_profile").value_or("");
  r.quant_config_file = report_string(root, "quant_config_file").value_or("");
  if (auto options = json_get(root, "options")) {
    r.deep = bool_of(*options, "deep");
    r.sha256 = bool_of(*options, "sha256");
  }
  auto summary = json_get(root, "summary");
  if (!summary) {
    error = "no summary";
    return false;
  }
  r.tensor_count = u64_of(*summary, "tensors");
  r.payload_bytes = u64_of(*summary, "payload_bytes");
  r.bytes_read = u64_of(*summary, "bytes_read");
  double seconds = 0;
  if (auto s = json_get(*summary, "seconds"))
    if (s->get_double().get(seconds)) seconds = 0;
  r.seconds = seconds;
  if (!parse_files(root, r) || !parse_tensors(root, r) || !parse_findings(root, r)) {
    error = "malformed files, tensors or findings";
    return false;
  }
  if (auto p = json_get(root, "partition")) {
    auto index = json_int(*p, "index"), count = json_int(*p, "count");
    if (!index || !count || *count < 1 || *count > kMaxPartitions || *index < 0 || *index >= *count) {
      error = "malformed partition block (index/count)";
      return false;
    }
    r.partition = PartitionSpec{static_cast<uint32_t>(*index), static_cast<uint32_t>(*count)};
    auto files = json_get(*p, "files");
    simdjson::dom::array arr;
    if (!files || files->get_array().get(arr)) {
      error = "malformed partition block (files)";
      return false;
    }
    for (auto e : arr) {
      std::string_view name;
      if (e.get_string().get(name)) {
        error = "malformed partition block (files)";
        return false;
      }
      r.partition_files.push_back(json_unescape_bytes(name));
    }
  }
  return true;
}

MergeResult merge_validation_reports(const std::vector<std::string>& paths) {
  if (paths.empty()) return fail(MergeStatus::usage_error, "--merge needs the partial reports (part-*.json)");
  std::vector<Part> parts(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    Part& p = parts[i];
    p.path = paths[i];
    std::string text, error;
    if (!read_text(p.path, text, error)) return fail(MergeStatus::io_error, "cannot read " + p.path + ": " + error);
    if (!parse_validation_report(text, p.report, error)) return fail(MergeStatus::usage_error, p.path + ": " + error);
    if (!p.report.partition.active())
      return fail(MergeStatus::usage_error, p.path + " is a whole report, not a partial one (made without --partition)");
    p.inventory = inventory_sha256(p.report);
  }
  // Same count, every index exactly once.
  const uint32_t n = parts[0].report.partition.count;
  std::vector<const Part*> by_index(n, nullptr);
  for (const Part& p : parts) {
    if (p.report.partition.count != n)
      return fail(MergeStatus::usage_error, "the parts disagree on the partition count: " + parts[0].path + " is of " +
                                                std::to_string(n) + ", " + p.path + " of " +
                                                std::to_string(p.report.partition.count));
    const Part*& slot = by_index[p.report.partition.index];
    if (slot)
      return fail(MergeStatus::usage_error, "partition " + p.report.partition.text() + " appears twice: " + slot->path +
                                                " and " + p.path);
    slot = &p;
  }
  std::string missing;
  for (uint32_t i = 0; i < n; ++i)
    if (!by_index[i]) {  // two steps: see above (GCC bug 105329)
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(i);
    }
  if (!missing.empty())
    return fail(MergeStatus::usage_error, "partitions " + missing + " of " + std::to_string(n) +
                                              " are missing; run `ckpt validate --partition I/" + std::to_string(n) +
                                              "` for each and merge all " + std::to_string(n) + " reports");
  // The same checkpoint, options and inventory everywhere.
  const Part& first = *by_index[0];
  for (const Part* p : by_index)
    if (p->inventory != first.inventory)
      return fail(MergeStatus::usage_error, p->path + " and " + first.path +
                                                " describe different checkpoints or options (inventory sha256 " +
                                                p->inventory.substr(0, 12) + " vs " + first.inventory.substr(0, 12) +
                                                ")");
  // Each part read exactly the files the assignment gives it.
  std::vector<uint32_t> owner = file_partitions(first.report, n);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<std::string> want;
    for (size_t f = 0; f < owner.size(); ++f)
      if (owner[f] == i) want.push_back(first.report.files[f].name);
    if (by_index[i]->report.partition_files != want)
      return fail(MergeStatus::usage_error, by_index[i]->path + " did not read the files partition " +
                                                std::to_string(i) + "/" + std::to_string(n) + " owns");
  }
  MergeResult m;
  ValidationReport& r = m.report;
  r.path = first.report.path;
  r.format = first.report.format;
  r.profile = first.report.profile;
  r.quant_profile = first.report.quant_profile;
  r.quant_config_file = first.report.quant_config_file;
  r.deep = first.report.deep;
  r.sha256 = first.report.sha256;
  r.tensor_count = first.report.tensor_count;
  r.payload_bytes = first.report.payload_bytes;
  r.files = first.report.files;
  r.tensors = first.report.tensors;
  std::map<std::string, uint32_t> file_owner;
  for (size_t f = 0; f < owner.size(); ++f) file_owner[r.files[f].name] = owner[f];
  for (size_t f = 0; f < r.files.size(); ++f) r.files[f].sha256 = by_index[owner[f]]->report.files[f].sha256;
  for (size_t t = 0; t < r.tensors.size(); ++t) {
    auto it = file_owner.find(r.tensors[t].file);
    if (it == file_owner.end()) continue;
    const TensorReport& src = by_index[it->second]->report.tensors[t];
    r.tensors[t].xxh3 = src.xxh3;
    r.tensors[t].nan = src.nan;
    r.tensors[t].inf = src.inf;
  }
  for (const Part* p : by_index) {
    r.bytes_read += p->report.bytes_read;
    r.seconds = std::max(r.seconds, p->report.seconds);
    r.findings.append(p->report.findings);  // partition order: 0 carries the structural findings
  }
  r.findings.sort_stable();  // the single-process order (see README "Scaling out")
  return m;
}

}  // namespace ckpt

#include "report/verify_report.h"

#include "core/display.h"

#include <cstdio>
#include <map>

#include "core/build_info.h"
#include "formats/json_writer.h"

namespace ckpt {

namespace {

// summary.stages' fields and the --stats line's, in one order (schemas/verify-report.schema.json).
struct StageField {
  const char* name;
  double VerifyStages::*value;
};
constexpr StageField kStageFields[] = {
    {"jobs", &VerifyStages::jobs},
    {"read", &VerifyStages::read},
    {"buffers", &VerifyStages::buffers},
    {"cpu_reference", &VerifyStages::cpu_reference},
    {"compare", &VerifyStages::compare},
    {"gemm_cpu", &VerifyStages::gemm_cpu},
    {"device", &VerifyStages::device},
    {"device_fp8", &VerifyStages::device_fp8},
    {"device_mxfp4", &VerifyStages::device_mxfp4},
    {"device_int8_decode", &VerifyStages::device_int8_decode},
    {"device_ggml", &VerifyStages::device_ggml},
    {"gemm_device", &VerifyStages::gemm_device},
    {"ahead", &VerifyStages::ahead},
};

}  // namespace

VerifyStages& VerifyStages::operator+=(const VerifyStages& o) {
  for (const StageField& f : kStageFields) this->*f.value += o.*f.value;
  return *this;
}

std::string verify_stages_text(const VerifyStages& s) {
  std::string out;
  for (const StageField& f : kStageFields) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.3f s", out.empty() ? "" : ", ", f.name, s.*f.value);
    out += buf;
  }
  return out;
}

std::string verify_report_json(const VerifyReport& r, bool stages) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kVerifySchemaId);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("path").value(r.path);
  if (!r.reference.empty()) w.key("reference").value(r.reference);
  w.key("kind").value(r.kind);
  w.key("backend").value(r.backend);
  w.key("summary").begin_object();
  w.key("checks").value(static_cast<uint64_t>(r.checks.size()));
  w.key("failed").value(r.failed());
  w.key("errors").value(static_cast<uint64_t>(r.findings.count(Severity::error)));
  w.key("input_bytes_decoded").value(r.input_bytes_decoded);
  w.key("max_rel_l2").value(r.max_rel_l2);
  w.key("seconds").value(r.seconds);
  w.key("peak_rss_bytes").value(r.peak_rss_bytes);
  if (stages) {
    w.key("stages").begin_object();
    for (const StageField& f : kStageFields) w.key(std::string(f.name) + "_s").value(r.stages.*f.value);
    w.end_object();
  }
  w.end_object();
  w.key("checks").begin_array();
  for (const auto& c : r.checks) {
    w.begin_object().key("check").value(c.check).key("tensor").value(c.tensor);
    if (!c.part.empty()) w.key("part").value(c.part);
    w.key("verified_against").value(c.verified_against);
    w.key("elements").value(c.elements).key("ok").value(c.ok);
    if (c.rel_l2) w.key("rel_l2").value(*c.rel_l2);
    w.end_object();
  }
  w.end_array();
  write_findings_json(w, r.findings);
  w.key("verdict").value(outcome_of(r) == Outcome::ok ? "pass" : "fail");
  w.end_object();
  return w.str() + "\n";
}

Outcome outcome_of(const VerifyReport& r) {
  const Outcome o = outcome_of(r.findings);
  return o == Outcome::ok && r.failed() ? Outcome::findings : o;
}

std::string verify_report_text(const VerifyReport& r, size_t max_findings) {
  std::string out = "verify " + display_escape(r.path) +
                    (r.reference.empty() ? "" : " against " + display_escape(r.reference)) + " (" + r.kind + ") on " +
                    display_escape(r.backend) + "\n";
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_check;  // check -> (passed, failed)
  for (const auto& c : r.checks) (c.ok ? per_check[c.check].first : per_check[c.check].second)++;
  for (const auto& [check, counts] : per_check) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-18s %8llu ok %6llu failed\n", check.c_str(),
                  static_cast<unsigned long long>(counts.first), static_cast<unsigned long long>(counts.second));
    out += line;
  }
  if (r.max_rel_l2 > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "  INT8 GEMM vs original weights: max relative L2 error %.4g\n", r.max_rel_l2);
    out += line;
  }
  size_t shown = 0;
  for (const auto& f : r.findings.items()) {
    if (shown++ == max_findings) {
      out += "  ... " + std::to_string(r.findings.items().size() - max_findings) + " more (see --json)\n";
      break;
    }
    out += "  " + std::string(f.severity == Severity::error ? "ERROR " : "warning ") + display_escape(f.code) + " " +
           display_escape(f.file);
    if (!f.tensor.empty()) out += " tensor " + display_escape(f.tensor);
    if (f.offset) out += " @" + std::to_string(*f.offset);
    out += ": " + display_escape(f.message) + "\n";
  }
  char line[200];
  std::snprintf(line, sizeof line, "VERDICT: %s - %zu checks, %llu failed, %.1f MB decoded in %.2f s\n",
                outcome_of(r) == Outcome::ok ? "PASS" : "FAIL", r.checks.size(), static_cast<unsigned long long>(r.failed()),
                static_cast<double>(r.input_bytes_decoded) / 1e6, r.seconds);
  return out + line;
}

}  // namespace ckpt

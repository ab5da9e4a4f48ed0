// The report of `ckpt sign` / `ckpt verify-signature` (report/signature_report.h).
#include "report/signature_report.h"

#include "core/build_info.h"
#include "formats/json_writer.h"

namespace ckpt {
namespace {

void write_provenance(JsonWriter& w, const ProvenanceSummary& p) {
  w.key("provenance").begin_object().key("path").value(p.path).key("reference").value(p.reference);
  w.key("read").value(p.read);
  if (p.read) {
    const oms::Provenance& r = p.recorded;
    w.key("command").value(r.command).key("options").begin_object();
    for (const auto& [name, value] : r.options) w.key(name).value(value);
    w.end_object().key("tool_version").value(r.tool_version);
    w.key("input_root_digest").value(r.input.root_digest).key("output_root_digest").value(r.output.root_digest);
    w.key("input_files").value(static_cast<uint64_t>(r.input.resources.size()));
    w.key("output_files").value(static_cast<uint64_t>(r.output.resources.size()));
    w.key("input_bundle_digest");
    if (r.input_bundle_digest.empty())
      w.null();
    else
      w.value(r.input_bundle_digest);
  }
  w.key("recompute").value(p.recompute).key("reproduced").value(p.reproduced).end_object();
}

}  // namespace

std::string signature_report_json(const SignatureReport& r) {
  JsonWriter w;
  w.begin_object().key("schema").value("ckptkit/signature-report/v1");
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).end_object();
  w.key("command").value(r.command).key("model").value(r.model).key("bundle").value(r.bundle);
  w.key("status").value(outcome_name(r.status)).key("verified").value(r.verified);
  w.key("method").value(r.method).key("root_digest").value(r.root_digest);
  w.key("files").value(r.files).key("bytes").value(r.bytes);
  if (r.provenance)
    write_provenance(w, *r.provenance);
  else
    w.key("provenance").null();
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str();
}

}  // namespace ckpt

// ckpt relayout's report (relayout_report.h).
#include "report/relayout_report.h"

#include "core/build_info.h"
#include "core/display.h"
#include "formats/json_writer.h"
#include "report/convert_report.h"

namespace ckpt {

namespace {

std::string block_text(uint64_t n, uint64_t k) { return std::to_string(n) + "x" + std::to_string(k); }

std::string signed_bytes(int64_t b) {
  std::string text = b >= 0 ? "+" : "";  // appended, not "+" + to_string(): GCC 12's -Wrestrict false positive at -O3
  text += std::to_string(b);
  return text + " bytes";
}

}  // namespace

std::string relayout_json(const RelayoutReport& r, const RelayoutOptions& o) {
  JsonWriter w;
  const RelayoutPlan& p = r.plan;
  w.begin_object();
  w.key("schema").value(kRelayoutSchemaId);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("input").value(o.input).key("output").value(o.output);
  w.key("status").value(outcome_name(relayout_outcome(r)));
  w.key("dry_run").value(o.dry_run);
  w.key("deployment").begin_object().key("tp").value(o.deployment.tp).key("ep").value(o.deployment.ep).end_object();
  w.key("engines").begin_array();
  for (const auto& e : r.preflight.engines) w.value(e);
  w.end_array();
  w.key("needed").value(p.needed);
  w.key("block_before");
  if (p.old_n) w.begin_array().value(p.old_n).value(p.old_k).end_array(); else w.null();
  w.key("block");
  if (p.block_n) w.begin_array().value(p.block_n).value(p.block_k).end_array(); else w.null();
  w.key("min_block");
  if (p.min_n) w.begin_array().value(p.min_n).value(p.min_k).end_array(); else w.null();
  w.key("choices").begin_array();
  for (const auto& c : p.choices)
    w.begin_object().key("module_class").value(c.unit).key("modules").value(c.names)
        .key("action").value(relayout_action_name(c.action)).key("why").value(c.why)
        .key("layers").value(layer_ranges(c.layers)).key("tensors").value(c.tensors).key("bytes").value(c.bytes).end_object();
  w.end_array();
  w.key("bf16_modules").begin_array();
  for (const auto& m : p.excluded) w.value(m);
  w.end_array();
  w.key("regridded_weights").value(p.regridded);
  w.key("scale_bytes").value(p.scale_bytes).key("bf16_bytes").value(p.bf16_bytes);
  w.key("notes").begin_array();
  for (const auto& n : p.notes) w.value(n);
  w.end_array();
  w.key("bytes_written").value(r.convert.bytes_written);
  w.key("shards_written").value(r.convert.shards_written).key("shards_resumed").value(r.convert.shards_resumed);
  w.key("seconds").value(r.convert.seconds).key("peak_rss_bytes").value(r.convert.peak_rss_bytes);
  Findings all = r.findings;
  all.append(r.convert.findings);
  write_findings_json(w, all);
  w.end_object();
  return w.str() + "\n";
}

void print_relayout_plan(const RelayoutReport& r, std::ostream& out) {
  const RelayoutPlan& p = r.plan;
  const auto& d = r.preflight.options.deployment;
  out << "relayout plan for tp " << d.tp << (d.ep > 1 ? " ep " + std::to_string(d.ep) : "") << " (";
  for (size_t i = 0; i < r.preflight.engines.size(); ++i) out << (i ? ", " : "") << r.preflight.engines[i];
  out << "): block " << block_text(p.old_n, p.old_k) << " -> " << block_text(p.block_n, p.block_k)
      << " (--min-block " << block_text(p.min_n, p.min_k) << ")\n";
  for (const auto& c : p.choices)
    out << "  " << (c.action == RelayoutAction::bf16 ? "bf16    " : "reblock ") << display_escape(c.unit) << " ["
        << display_escape(c.names) << "] layers " << layer_ranges(c.layers) << ", " << c.tensors << " tensors: "
        << display_escape(c.why) << "; " << signed_bytes(c.bytes) << "\n";
  if (p.changes_block())
    out << "  scales of " << p.regridded << " FP8 weights re-gridded to " << block_text(p.block_n, p.block_k) << ": "
        << signed_bytes(p.scale_bytes) << ", FP8 bytes unchanged\n";
  if (!p.promoted.empty())
    out << "  " << p.promoted.size() << " weights dequantized to BF16 (exact): " << signed_bytes(p.bf16_bytes)
        << "; excluded in config.json: " << p.excluded.size() << " modules\n";
  for (const auto& n : p.notes) out << "  note: " << display_escape(n) << "\n";
}

void print_relayout_verdict(const RelayoutReport& r, const RelayoutOptions& o, std::ostream& out) {
  const Outcome result = relayout_outcome(r);
  if (result != Outcome::ok) {
    out << "relayout: FAILED (" << outcome_name(result) << ")\n";
  } else if (!r.ran) {
    out << "relayout: nothing to do\n";
  } else if (o.dry_run) {
    out << "relayout: dry run, nothing written (" << r.convert.plan.shard_bytes_out << " bytes of shards would be written)\n";
  } else {
    out << "relayout: OK, " << r.convert.shards_written << " shards written (" << r.convert.shards_resumed
        << " resumed), " << r.convert.bytes_written << " bytes in " << r.convert.seconds << " s, peak RSS "
        << r.convert.peak_rss_bytes << " bytes\n";
  }
}

}  // namespace ckpt

// ckpt preflight's report (preflight_report.h).
#include "report/preflight_report.h"

#include "core/build_info.h"
#include "core/display.h"
#include "formats/json_writer.h"

namespace ckpt {

namespace {

std::string deployment_text(const Deployment& d) {
  std::string s = "tp " + std::to_string(d.tp);
  if (d.ep > 1) s += " ep " + std::to_string(d.ep);
  if (d.pp > 1) s += " pp " + std::to_string(d.pp);
  return s;
}

std::string engines_list(const PreflightReport& r) {
  std::string s;
  for (const auto& e : r.engines) s += std::string(s.empty() ? "" : ", ") + e;
  return s;
}

}  // namespace

std::string preflight_json(const PreflightReport& r) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kPreflightSchemaId);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("path").value(r.path);
  w.key("status").value(outcome_name(preflight_outcome(r)));
  w.key("loads").value(r.loads());
  w.key("source").value(r.config_only ? "config" : "headers");
  w.key("model_type").value(r.model_type).key("family").value(r.family).key("quant_profile").value(r.quant_profile);
  w.key("block");
  if (r.block_n) w.begin_array().value(r.block_n).value(r.block_k).end_array();
  else w.null();
  const auto& d = r.options.deployment;
  w.key("deployment").begin_object().key("tp").value(d.tp).key("ep").value(d.ep).key("pp").value(d.pp).end_object();
  w.key("engines").begin_array();
  for (const auto& e : r.engines) w.value(e);
  w.end_array();
  w.key("per_engine").begin_array();
  for (const auto& e : r.per_engine)
    w.begin_object().key("engine").value(e.engine).key("loads").value(e.loads).key("why").value(e.why).end_object();
  w.end_array();
  w.key("gpu");
  if (r.options.gpu.empty()) w.null(); else w.value(r.options.gpu);
  w.key("modules").begin_array();
  for (const auto& m : r.modules) {
    w.begin_object().key("class").value(m.cls).key("names").value(m.names).key("split").value(split_name(m.split));
    w.key("merged").value(m.merged).key("format").value(m.format).key("layers").value(layer_ranges(m.layers));
    w.key("tensors").value(m.tensors).key("rows").value(m.rows).key("cols").value(m.cols);
    w.key("rank_rows").value(m.rank_rows).key("rank_cols").value(m.rank_cols).key("degree").value(m.degree);
    w.key("replicas").value(m.replicas).key("experts").value(m.experts).key("experts_per_rank").value(m.experts_per_rank);
    w.key("divides").value(m.divides).end_object();
  }
  w.end_array();
  w.key("kernels").begin_array();
  for (const auto& k : r.kernels)
    w.begin_object().key("format").value(k.format).key("engine").value(k.engine).key("arch").value(k.arch)
        .key("support").value(k.support).key("via").value(k.via).key("source").value(k.source).end_object();
  w.end_array();
  w.key("memory").begin_object().key("tensors").value(r.tensors).key("total_bytes").value(r.total_bytes);
  w.key("rank_bytes").value(r.rank_bytes).key("budget_bytes");
  if (r.options.gpu_memory) w.value(r.options.gpu_memory); else w.null();
  const PreflightKvCache& kv = r.kv;
  const bool counted = kv.modelled && kv.bytes_per_token && r.options.gpu_memory && r.options.gpu_memory > r.rank_bytes;
  w.key("kv_cache").begin_object().key("modelled").value(kv.modelled).key("dtype").value(r.options.kv_cache_dtype);
  w.key("dtype_bytes").value(kv.dtype_bytes).key("attention_layers").value(kv.attention_layers);
  w.key("bytes_per_token").value(kv.bytes_per_token).key("state_layers").value(kv.state_layers);
  w.key("state_bytes_per_sequence").value(kv.state_bytes_per_sequence).key("tokens");
  if (counted) w.value(kv.tokens); else w.null();
  w.key("max_model_len");
  if (r.options.max_model_len) w.value(r.options.max_model_len); else w.null();
  w.key("sequences");
  if (counted && r.options.max_model_len) w.value(kv.sequences); else w.null();
  w.key("how").value(kv.how).end_object();
  w.end_object();
  w.key("working").begin_array();
  for (const auto& g : r.working)
    w.begin_object().key("tp").value(g.tp).key("ep").value(g.ep).key("rank_bytes").value(g.rank_bytes).end_object();
  w.end_array();
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str() + "\n";
}

std::string preflight_verdict_line(const PreflightReport& r) {
  const auto n = r.findings.count(Severity::error);
  if (n == 0)
    return "preflight: LOADS at " + deployment_text(r.options.deployment) +
           (r.options.gpu.empty() ? "" : " on " + r.options.gpu) + " (" + engines_list(r) + ")";
  return "preflight: BLOCKED at " + deployment_text(r.options.deployment) + " (" + std::to_string(n) +
         " blocking finding" + (n == 1 ? "" : "s") + ")";
}

void print_preflight_human(const PreflightReport& r, std::ostream& out) {
  out << display_escape(r.path) << ": " << display_escape(r.model_type) << " (" << display_escape(r.family) << "), "
      << (r.quant_profile.empty() ? std::string("unquantized") : display_escape(r.quant_profile));
  if (r.block_n) out << " block " << r.block_n << "x" << r.block_k;
  out << ", from " << (r.config_only ? "config.json alone" : "the headers") << "; " << r.tensors << " tensors, "
      << r.total_bytes << " bytes\n";
  out << "at " << deployment_text(r.options.deployment) << " (" << engines_list(r) << "):\n";
  for (const auto& m : r.modules) {
    out << "  " << (m.divides ? "  " : "! ") << display_escape(m.cls) << " [" << display_escape(m.names) << "] "
        << split_name(m.split) << ", " << m.format << (m.layers.empty() ? std::string() : ", layers " + layer_ranges(m.layers))
        << ": " << m.rows << "x"
        << m.cols << " -> " << m.rank_rows << "x" << m.rank_cols << " a rank";
    if (m.replicas > 1) out << " (replicated x" << m.replicas << ")";
    if (m.experts) out << ", " << m.experts_per_rank << " of " << m.experts << " experts a rank";
    out << "\n";
  }
  for (const auto& k : r.kernels)
    out << "  kernel " << k.arch << " " << k.format << " " << k.engine << ": " << k.support
        << (k.via.empty() ? "" : " via " + k.via) << "\n";
  out << "  weights of the largest rank: " << r.rank_bytes << " bytes";
  if (r.options.gpu_memory) out << " of " << r.options.gpu_memory;
  out << "\n";
  if (r.kv.modelled)
    out << "  KV cache a token a rank: " << r.kv.bytes_per_token << " bytes (" << display_escape(r.kv.how) << ")\n";
  for (const auto& f : r.findings.items()) out << finding_text(f) << "\n";
  for (const auto& e : r.per_engine)
    out << "  " << e.engine << ": " << (e.loads ? "loads" : "does not load right (" + e.why + ")") << "\n";
  out << preflight_verdict_line(r) << "\n";
}

}  // namespace ckpt

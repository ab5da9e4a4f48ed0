// ckpt relayout (relayout.h): preflight's analysis, the plan, then convert's machinery.
#include "relayout/relayout.h"

#include <set>

#include "plan/plan.h"
#include "relayout/relayout_config.h"

namespace ckpt {

namespace {

void refuse(RelayoutReport& r, const char* code, const std::string& file, const std::string& message) {
  r.findings.error(code, file, "", std::nullopt, message);
}

// Preflight findings relayout cannot fix (a split of heads or rows, a config that disagrees
// with the headers, an unknown architecture); block findings are what it fixes.
bool preflight_allows(const RelayoutOptions& o, RelayoutReport& r) {
  const PreflightReport& p = r.preflight;
  if (p.config_only) {
    refuse(r, "RELAYOUT_INPUT", o.input, o.input + " holds config.json but no shards: relayout rewrites the tensors");
    return false;
  }
  bool ok = true;
  for (const auto& f : p.findings.items()) {
    if (f.severity != Severity::error || f.code == "PREFLIGHT_BLOCK_DIVISIBILITY" || f.code == "PREFLIGHT_SCALE_ROW_SHARED")
      continue;
    r.findings.add(f);
    ok = false;
  }
  if (ok || p.findings.has_io_errors()) return ok;
  if (p.findings.has_code("PREFLIGHT_USAGE"))
    refuse(r, "RELAYOUT_USAGE", o.input, "the deployment asked for is not one an engine runs (above); nothing planned");
  else
    refuse(r, "RELAYOUT_INPUT", o.input,
           "relayout rewrites block-FP8 scales (and promotes modules) only: it cannot mend the errors above, so "
           "nothing is written");
  return ok;
}

ConvertOptions convert_options(const RelayoutOptions& o, RelayoutReport& r) {
  ConvertOptions c;
  c.input = o.input;
  c.output = o.output;
  c.dry_run = o.dry_run;
  c.resume = o.resume;
  c.overwrite = o.overwrite;
  c.memory_budget = o.memory_budget;
  c.partition = o.partition;
  c.finalize = o.finalize;
  c.partitions = o.partitions;
  c.progress = o.progress;
  if (o.on_plan) c.on_plan = [&r, f = o.on_plan](const ConvertReport&) { f(r); };
  c.before_finalize = o.before_finalize;
  c.after_finalize = o.after_finalize;
  c.hash_inputs = o.hash_inputs;
  c.attestation_files = o.attestation_files;
  c.command = "ckpt relayout";
  RegridRequest request{r.plan.block_n, r.plan.block_k, r.plan.promoted};
  c.make_plan = [request](const LoadedModel& in, ConversionPlan& plan, Findings& f) {
    return plan_regrid(in, request, plan, f);
  };
  RelayoutTarget target{o.deployment.tp, o.deployment.ep, r.preflight.engines};
  RelayoutPlan plan = r.plan;
  c.make_config = [plan, target](const LoadedModel& in, const ConversionPlan& cp, std::string& out, std::string& error) {
    for (const auto& [file, text] : in.checkpoint.config_texts)
      if (file == "config.json") return rewrite_relayout_config(text, plan, target, cp.source_structure_sha256, out, error);
    error = "its bytes were not read with the plan";
    return false;
  };
  return c;
}

}  // namespace

RelayoutReport relayout_checkpoint(const RelayoutOptions& o) {
  RelayoutReport r;
  PreflightOptions po;
  po.deployment = o.deployment;
  po.engines = o.engines;
  r.preflight = preflight(o.input, po);
  if (!preflight_allows(o, r)) return r;
  r.plan = plan_relayout(r.preflight, o.request);
  if (!r.plan.problem.empty()) {
    const bool usage = !o.request.bf16.empty() || o.request.block_n;
    refuse(r, usage && r.preflight.block_n ? "RELAYOUT_USAGE" : "RELAYOUT_INPUT", o.input, r.plan.problem);
    return r;
  }
  if (!r.plan.needed) {
    r.findings.info("RELAYOUT_NOT_NEEDED", o.input, "", std::nullopt,
                    "the checkpoint loads at this deployment as it is (ckpt preflight finds no block problem); "
                    "nothing written");
    return r;
  }
  r.ran = true;
  r.convert = convert_checkpoint(convert_options(o, r));
  return r;
}

Outcome relayout_outcome(const RelayoutReport& r) {
  if (r.findings.has_code("RELAYOUT_USAGE")) return Outcome::usage;
  if (r.findings.has_errors()) return r.findings.has_io_errors() ? Outcome::io : Outcome::findings;
  if (r.ran) return outcome_of(r.convert.status);
  return Outcome::ok;
}

}  // namespace ckpt

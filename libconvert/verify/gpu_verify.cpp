// The verifier's dispatcher (verify_path): what PATH is (an expert pack, a GGUF file, a
// converted checkpoint with its --reference, a checkpoint alone) decides which checks are
// planned (verify/checkpoint_checks, int8_expert_checks, gguf_checks, pack_checks); the
// jobs run in verify/jobs; a run that verified nothing is VERIFY_NOTHING, never a PASS.
#include "verify/gpu_verify.h"

#include <algorithm>
#include <chrono>

#include "core/peak_rss.h"
#include "formats/loader.h"
#include "plan/plan.h"
#include "repack/pack_validate.h"
#include "validate/reference.h"
#include "verify/call_wrappers.h"
#include "verify/checkpoint_checks.h"
#include "verify/gguf_checks.h"
#include "verify/jobs.h"
#include "verify/pack_checks.h"

namespace ckpt {
namespace {

// A checkpoint alone whose quantized weights cannot be planned (FP8 without a usable scale
// or with a wrong grid, MXFP4 blocks of a wrong layout): they are not verified, and a PASS
// on the rest would hide that. `what`: "3 FP8 tensors are", ...
void report_unplanned(const Findings& plan_findings, const std::string& what, const std::string& path, VerifyReport& r) {
  r.findings.append(plan_findings);
  r.findings.error("VERIFY_INPUT", path, "", std::nullopt,
                   what + " not verified: the checkpoint cannot be planned (see the other findings)");
}
// No plan at all: its FP8 tensors (counted) or, without any, its quantized weights.
void report_unplanned_checkpoint(const LoadedModel& model, const Findings& plan_findings, VerifyReport& r) {
  const auto fp8 = std::count_if(model.view.tensors.begin(), model.view.tensors.end(), [](const ModelTensor& t) {
    return t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2;
  });
  report_unplanned(plan_findings,
                   fp8 == 0 ? "its quantized weights are" : std::to_string(fp8) + (fp8 == 1 ? " FP8 tensor is" : " FP8 tensors are"),
                   model.path, r);
}

// Zero checks is no evidence: verify never says PASS about nothing (a check that compared
// no element is not counted, run_jobs). The outcome is the findings' (core/outcome).
void report_nothing_verified(VerifyReport& r) {
  if (!r.checks.empty() || r.findings.has_errors()) return;
  std::string why;
  if (r.kind == "checkpoint")
    why = "it holds no FP8 weight with a scale, no MXFP4 expert weight and no INT8-shift expert, the only tensors "
          "verified without a reference; to verify a conversion's output, give its input with --reference IN";
  else if (r.kind == "converted")
    why = "the conversion plan of the reference has no tensor that is present in it";
  else
    why = "it holds no tensor with an element to compare";
  r.findings.error("VERIFY_NOTHING", r.path, "", std::nullopt, "nothing was verified (0 checks): " + why);
}

// A GGUF file: every tensor, device against CPU; with --reference, against the reference
// GGUF's tensor of the same name, type and shape (a reference that is not a GGUF file is
// refused, VERIFY_REFERENCE).
void verify_gguf(const LoadedModel& model, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  r.kind = "gguf";
  LoadedModel reference;
  if (!o.reference.empty() && !load_gguf_reference(o.reference, reference, r.findings)) return;
  std::vector<Job> jobs;
  DigestsAhead ahead;
  plan_gguf_checks(be, o, model, o.reference.empty() ? nullptr : &reference, false, ahead, jobs);
  run_jobs(jobs, be, o, r, &ahead);
}

// A checkpoint alone: --experts bf16's plan pairs the FP8 weights as keep's does and also
// names every MXFP4 expert weight (DeepSeek routed experts, gpt-oss _blocks), which a
// checkpoint alone verifies too; keep's where bf16's cannot be made.
void verify_checkpoint_alone(const LoadedModel& model, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  r.kind = "checkpoint";
  ConversionPlan plan;
  Findings bf16_findings;
  bool planned = plan_conversion(model, ExpertMode::bf16, RemapOptions{}, plan, bf16_findings);
  if (!planned) {
    plan = ConversionPlan{};
    Findings pf;
    planned = plan_conversion(model, ExpertMode::keep, RemapOptions{}, plan, pf);
    if (!planned) report_unplanned_checkpoint(model, pf, r);
    else report_unplanned(bf16_findings, "its MXFP4 expert weights are", model.path, r);  // only bf16's plan needs them
  }
  std::vector<Job> jobs;
  plan_checkpoint_checks(be, o, model, planned ? &plan : nullptr, jobs);
  run_jobs(jobs, be, o, r);
}

// A converted checkpoint against its input: the structural comparison first (tensor set,
// dtypes, shapes, config, totals), then every tensor of the conversion plan of IN.
void verify_converted(const LoadedModel& out, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  r.kind = "converted";
  // The structure, config.json members and every side file (validate/reference.h, the
  // comparison `ckpt validate --reference` makes).
  check_against_reference(out, o.reference, false, r.findings);
  LoadedModel in;
  Findings inf;
  if (!load_model(o.reference, StReadOptions{}, in, inf) || inf.has_errors()) return;  // reported above
  ConversionPlan plan;
  Findings pf;
  if (!reference_plan(in, out, plan, pf)) return;  // reported above (a relayout output: plan_regrid)
  std::vector<Job> jobs;
  plan_converted_checks(be, o, in, out, plan, jobs);
  run_jobs(jobs, be, o, r);
}

void verify_model(const std::string& path, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  LoadedModel model;
  Findings lf;
  if (!load_model(path, StReadOptions{}, model, lf) || lf.has_errors()) {
    r.findings.append(lf);
    r.findings.error("VERIFY_INPUT", path, "", std::nullopt, "the checkpoint does not read cleanly (run ckpt validate)");
    return;
  }
  if (model.format == ModelFormat::gguf) return verify_gguf(model, be, o, r);
  if (o.reference.empty()) return verify_checkpoint_alone(model, be, o, r);
  verify_converted(model, be, o, r);
}

}  // namespace

uint64_t VerifyReport::failed() const {
  return static_cast<uint64_t>(std::count_if(checks.begin(), checks.end(), [](const VerifyCheck& c) { return !c.ok; }));
}

VerifyReport verify_path(const std::string& path, DecodeBackend& backend, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport r;
  r.path = path;
  r.reference = options.reference;
  SerialBackend serial(backend);
  TimedBackend be(backend.concurrent() ? backend : static_cast<DecodeBackend&>(serial));
  if (is_expert_pack(path)) verify_pack(path, be, options, r);
  else verify_model(path, be, options, r);
  be.add_to(r.stages);
  r.backend = backend.name();  // after the jobs: an opening backend's name waits for its device
  report_nothing_verified(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

}  // namespace ckpt

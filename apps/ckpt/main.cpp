// ckpt: the command-line front end. Argument parsing and output only; every
// check lives in libconvert. One function per subcommand; exit codes in one place.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include "../cli_common.h"
#include "commands.h"
#include "partition_flags.h"
#include "convert/convert.h"
#include "convert/shard_writer.h"
#include "core/build_info.h"
#include "deploy/preflight.h"
#include "formats/loader.h"
#include "io/atomic_file.h"
#include "profiles/registry.h"
#include "report/convert_report.h"
#include "report/inspect.h"
#include "report/validation_report.h"
#include "synth/synth_dsv4.h"
#include "report/merge.h"
#include "validate/validate.h"

namespace {

using ckpt::Outcome;
using ckptcli::CommonFlags;

ckpt::StMode parse_mode(const std::string& m) { return m == "compat" ? ckpt::StMode::compat : ckpt::StMode::strict; }

constexpr const char* kInspect = "ckpt inspect";
constexpr const char* kValidate = "ckpt validate";
constexpr const char* kConvert = "ckpt convert";
constexpr const char* kSynth = "ckpt synth";

struct InspectArgs {
  std::string path;
  std::string mode = "strict";
  CommonFlags c;
};

int inspect_args_fixup(InspectArgs& a) {
  // `inspect --json PATH` (0.1.0's flag) still means the JSON on stdout.
  if (a.c.json_option && a.c.json_option->count() > 0 && a.c.json.empty()) a.c.json = "-";
  if (a.path.empty() && !a.c.json.empty() && a.c.json != "-") {
    a.path = a.c.json;
    a.c.json = "-";
  }
  return 0;
}

Outcome run_inspect(InspectArgs& a) {
  inspect_args_fixup(a);
  if (a.path.empty()) return ckptcli::usage_error(kInspect, "PATH is required");
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  if (auto o = ckptcli::check_outputs(kInspect, inputs, {a.c.json, "-"}); o != Outcome::ok) return o;
  ckpt::StReadOptions options;
  options.mode = parse_mode(a.mode);
  ckpt::LoadedModel model;
  ckpt::Findings findings;
  ckpt::InspectSummary summary;
  Outcome result;
  if (!ckpt::load_model(a.path, options, model, findings)) {
    ckptcli::print_findings(kInspect, findings, ckpt::Severity::error);
    result = ckpt::outcome_of(findings);
    if (result == Outcome::ok) result = Outcome::io;
    summary.path = a.path;  // a report even so: the findings say why
  } else {
    findings.sort_stable();
    summary = ckpt::inspect_model(model);
    result = ckpt::outcome_of(findings);
    if (a.c.human()) ckpt::print_inspect_human(summary, findings, std::cout);
  }
  return ckpt::worse(result, ckptcli::emit(kInspect, a.c.json, ckpt::inspect_json(summary, findings), inputs));
}

struct ValidateArgs {
  std::string path, profile = "auto", hub, mode = "strict", reference;
  bool deep = false, sha256 = false;
  size_t max_findings = 200;
  std::string partition;  // "I/N" or "env"
  unsigned partitions = 0;
  std::vector<std::string> merge;
  unsigned tp = 0, ep = 0;  // --tp / --ep / --gpu: also run ckpt preflight's checks
  std::string gpu;
  ckptcli::SignatureFlags signature;
  CommonFlags c;
};

// Prints (human / --json) a report and returns its outcome.
Outcome emit_validation(const ckpt::ValidationReport& report, const ValidateArgs& a, const ckpt::InputSet& inputs) {
  Outcome o = ckptcli::emit(kValidate, a.c.json, ckpt::validation_report_json(report), inputs);
  if (a.c.human()) ckpt::print_validation_human(report, std::cout, a.max_findings);
  if (!a.c.json_to_stdout() && a.c.quiet) std::cout << ckpt::verdict_line(report) << "\n";
  return ckpt::worse(ckpt::outcome_of(report.findings), o);
}

// `validate --merge part-*.json`: the single-process report from N partial ones.
Outcome run_validate_merge(const ValidateArgs& a, const ckpt::InputSet& inputs) {
  if (!a.path.empty() || !a.partition.empty())
    return ckptcli::usage_error(kValidate, "--merge takes only the partial reports (no PATH, no --partition)");
  auto merged = ckpt::merge_validation_reports(a.merge);
  if (merged.status != ckpt::MergeStatus::ok) {
    ckptcli::print_error(kValidate, merged.status == ckpt::MergeStatus::io_error ? "IO_READ" : "MERGE", "", merged.error);
    return ckpt::outcome_of(merged.status);
  }
  return emit_validation(merged.report, a, inputs);
}

Outcome run_validate(const ValidateArgs& a) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  inputs.add_checkpoint(a.reference);
  inputs.add_file(a.hub);
  inputs.add_file(a.signature.bundle);
  for (const auto& m : a.merge) inputs.add_file(m);
  if (auto o = ckptcli::check_outputs(kValidate, inputs, {a.c.json, "-"}); o != Outcome::ok) return o;
  if (!a.merge.empty()) return run_validate_merge(a, inputs);
  if (a.path.empty()) return ckptcli::usage_error(kValidate, "PATH is required (or --merge part-*.json)");
  if (a.profile != "auto" && !ckpt::is_known_profile(a.profile)) {
    std::string known = "auto";
    for (const auto& n : ckpt::profile_names()) known += ", " + n;
    return ckptcli::usage_error(kValidate, "unknown profile '" + a.profile + "' (known: " + known + ")");
  }
  ckpt::ValidateOptions options;
  options.profile = a.profile;
  options.deep = a.deep;
  options.sha256 = a.sha256;
  options.hub_sha256_file = a.hub;
  options.reference = a.reference;
  options.mode = parse_mode(a.mode);
  if (!a.partition.empty()) {
    if (!ckptcli::resolve_partition(kValidate, a.partition, a.partitions, options.partition)) return Outcome::usage;
    if (!a.reference.empty() || !a.hub.empty() || a.signature.active())
      return ckptcli::usage_error(kValidate,
                                  "--partition splits --deep / --sha256 only, not --reference, --hub-sha256 or --signature");
  }
  if (a.signature.active() && !a.signature.complete())
    return ckptcli::usage_error(kValidate, "--signature BUNDLE needs --public-key PUB.pem or --cert-chain CA.pem");
  // --deep --signature: the deep pass hashes each shard as it reads it (--sha256 costs no
  // second read there), and the signature check takes those digests instead of reading again.
  if (a.signature.active() && a.deep) options.sha256 = true;
  ckpt::Progress progress(a.c.mode(), "validate");
  options.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  // The deployment checks of `ckpt preflight`, when a deployment is named.
  std::optional<ckpt::PreflightReport> deployment;
  if (a.tp || a.ep || !a.gpu.empty()) {
    ckpt::PreflightOptions po;
    po.deployment = {std::max(a.tp, 1u), std::max(a.ep, 1u), 1};
    po.gpu = a.gpu;
    deployment = ckpt::preflight(a.path, po);
    if (ckpt::preflight_outcome(*deployment) == Outcome::usage) {
      ckptcli::print_findings(kValidate, deployment->findings, ckpt::Severity::error);
      return Outcome::usage;
    }
  }
  auto report = ckpt::validate_path(a.path, options);
  progress.finish();
  if (deployment) {
    for (const auto& f : deployment->findings.items())
      if (f.code.rfind("PREFLIGHT_", 0) == 0) report.findings.add(f);
    report.findings.sort_stable();
  }
  if (a.signature.active()) {
    std::map<std::string, std::string> hashed;  // the shards' SHA-256 from the deep pass
    for (const auto& f : report.files)
      if (!f.sha256.empty()) hashed.emplace(f.name, f.sha256);
    if (auto o = ckptcli::check_signature_into(a.signature, a.path, report.findings, hashed); o != Outcome::ok) return o;
  }
  return emit_validation(report, a, inputs);
}

struct ConvertArgs {
  std::string input, output, experts = "keep", memory_budget = "1G", rounding = "half-away";
  unsigned headroom = 3;
  bool dry_run = false, resume = false, overwrite = false, buffered = false;
  std::string partition;  // "I/N" or "env"
  unsigned partitions = 0;
  bool finalize = false;
  ckptcli::SignatureFlags expect;  // --expect-signature
  std::string sign_key;            // --sign-key
  std::string hub_sha256;          // --hub-sha256
  CommonFlags c;
};

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::path(path).extension() == ".gguf" && !std::filesystem::is_directory(path, ec);
}

Outcome run_convert(const ConvertArgs& a) {
  if (is_gguf_file(a.input))
    return ckptcli::usage_error(kConvert, "'" + a.input + "' is a GGUF file: convert takes a safetensors checkpoint "
                                          "(repack-experts takes a .gguf)");
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.input);
  inputs.add_file(a.expect.bundle);
  inputs.add_file(a.sign_key);
  inputs.add_file(a.hub_sha256);
  if (auto o = ckptcli::check_outputs(kConvert, inputs, {a.c.json, "-"}); o != Outcome::ok) return o;
  ckptcli::apply_output_io(kConvert, a.buffered, a.c.quiet);
  ckpt::ConvertOptions o;
  o.input = a.input;
  o.output = a.output;
  o.dry_run = a.dry_run;
  o.resume = a.resume;
  o.overwrite = a.overwrite;
  // The options that determine OUT, applied through the mapping a provenance records them by.
  const auto recorded = ckptcli::convert_options_recorded(a.experts, a.headroom, a.rounding);
  if (std::string error; !ckptcli::apply_convert_options(recorded, o, error)) return ckptcli::usage_error(kConvert, error);
  if (!ckpt::parse_size(a.memory_budget, o.memory_budget))
    return ckptcli::usage_error(kConvert, "--memory-budget '" + a.memory_budget +
                                              "' is not a size (a number with K, M, G or T, e.g. 1G, 512M; at least 64M)");
  if (a.resume && a.overwrite) return ckptcli::usage_error(kConvert, "--resume and --overwrite exclude each other");
  if (!ckptcli::resolve_scale_out(kConvert, "converts", a.partition, a.partitions, a.finalize, o.partition, o.partitions))
    return Outcome::usage;
  o.finalize = a.finalize;
  // The input's integrity checks. What they can check without the model is checked now,
  // before anything is written; the shards' digests come from the conversion's own pass over
  // the input (ConvertOptions::hash_inputs), and the checks run once every shard is written.
  // OUT is finalized only when every one passed (each runs, whatever the others say).
  std::vector<std::function<bool(ckpt::ConvertReport&)>> input_checks;
  std::vector<ckpt::HubListEntry> hub_entries;  // --hub-sha256, parsed once before the conversion
  std::optional<ckpt::oms::VerifiedBundle> expected_bundle;  // --expect-signature, verified once before the conversion
  if (a.expect.active()) {
    if (!a.expect.complete())
      return ckptcli::usage_error(kConvert, "--expect-signature BUNDLE needs --public-key PUB.pem or --cert-chain CA.pem");
    if (a.dry_run || !a.partition.empty() || a.finalize)
      return ckptcli::usage_error(kConvert, "--expect-signature checks a whole conversion (not --dry-run, --partition or --finalize)");
    ckpt::Findings bundle_findings;
    bool usage = false;
    if (!ckptcli::check_signature_bundle(a.expect, expected_bundle, bundle_findings, usage)) {  // refused before anything is written
      ckptcli::print_findings(kConvert, bundle_findings);
      std::cerr << kConvert << ": the signature bundle " << ckpt::display_escape(a.expect.bundle)
                << " does not verify; nothing was written\n";
      return usage ? Outcome::usage : ckpt::worse(ckpt::outcome_of(bundle_findings), Outcome::findings);
    }
    input_checks.push_back([&a, &expected_bundle](ckpt::ConvertReport& r) {
      bool usage = false;
      if (ckptcli::check_signature_of_conversion(a.expect, *expected_bundle, a.input, r.input_sha256, r.findings, usage))
        return true;
      r.status = usage ? ckpt::ConvertStatus::usage_error
                 : r.findings.has_io_errors() ? ckpt::ConvertStatus::io_error
                                              : ckpt::ConvertStatus::input_error;
      r.findings.error("CONVERT_SIGNATURE", a.expect.bundle, "", std::nullopt,
                       "the input does not verify against its signature bundle: OUT is left incomplete (shards "
                       "written, no index, no config.json)");
      return false;
    });
  }
  if (!a.hub_sha256.empty()) {
    if (a.dry_run || !a.partition.empty() || a.finalize)
      return ckptcli::usage_error(kConvert, "--hub-sha256 checks a whole conversion (not --dry-run, --partition or --finalize)");
    ckpt::Findings list_findings;
    if (!ckpt::read_hub_list(a.hub_sha256, hub_entries, list_findings)) {  // refused before anything is written
      ckptcli::print_findings(kConvert, list_findings);
      return ckpt::worse(ckpt::outcome_of(list_findings), Outcome::findings);
    }
    input_checks.push_back([&a, &hub_entries](ckpt::ConvertReport& r) {
      if (ckptcli::check_hub_list_of_conversion(a.hub_sha256, hub_entries, a.input, r.input_sha256, r.findings))
        return true;
      if (r.status == ckpt::ConvertStatus::ok)
        r.status = r.findings.has_io_errors() ? ckpt::ConvertStatus::io_error : ckpt::ConvertStatus::input_error;
      r.findings.error("CONVERT_HUB_SHA256", a.hub_sha256, "", std::nullopt,
                       "the input does not match the hash list: OUT is left incomplete (shards written, no index, "
                       "no config.json)");
      return false;
    });
  }
  if (!input_checks.empty()) {
    o.hash_inputs = true;
    o.before_finalize = [&input_checks](ckpt::ConvertReport& r) {
      bool all = true;
      for (auto& check : input_checks) all = check(r) && all;
      return all;
    };
  }
  if (auto o = ckptcli::check_sign_key(kConvert, a.sign_key); o != ckpt::Outcome::ok) return o;
  if (!a.sign_key.empty()) {
    if (a.dry_run || !a.partition.empty())
      return ckptcli::usage_error(kConvert, "--sign-key signs a whole output (not --dry-run or --partition; --finalize signs)");
    o.attestation_files = {std::string(ckpt::oms::kOutputBundleName), std::string(ckpt::oms::kProvenanceName)};
    o.hash_inputs = true;  // the provenance records IN's shards as converted, without a second read
    ckpt::oms::ConversionAttestation att{"convert", a.input, a.output, recorded, a.expect.bundle, a.sign_key};
    o.after_finalize = ckptcli::attest_after_finalize(att, a.c.mode());
  }
  ckpt::Progress progress(a.c.mode(), "convert");
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  // The plan summary before the first byte is written (a long conversion says what it does).
  bool plan_shown = false;
  if (a.c.human()) {
    o.on_plan = [&](const ckpt::ConvertReport& planned) {
      std::cout << "plan for " << ckpt::display_escape(o.input) << " -> " << ckpt::display_escape(o.output) << "\n";
      ckpt::print_convert_plan(planned, o, std::cout);
      std::cout << std::flush;
      plan_shown = true;
    };
  }
  auto report = ckpt::convert_checkpoint(o);
  progress.finish();
  Outcome result = ckpt::outcome_of(report.status);
  // A dry run that says NOT ENOUGH: the conversion would stop, so the answer is no.
  if (result == Outcome::ok && report.dry_run && !o.finalize && report.disk_needed > report.disk_free)
    result = Outcome::findings;
  const Outcome written = ckptcli::emit(kConvert, a.c.json, ckpt::convert_report_json(report, o), inputs);
  if (report.status != ckpt::ConvertStatus::ok) {
    ckptcli::print_findings(kConvert, report.findings, ckpt::Severity::info);
    std::cerr << kConvert << ": FAILED (" << ckpt::convert_status_name(report.status) << ")\n";
  } else if (a.c.human()) {
    ckpt::print_convert_human(report, o, std::cout, plan_shown);
  }
  return ckpt::worse(result, written);
}

struct SynthArgs {
  std::string model, out;
  bool sparse = false, tiny = false, overwrite = false, buffered = false;
  uint64_t seed = 1;
  CommonFlags c;
};

Outcome run_synth(const SynthArgs& a) {
  if (a.model != "deepseek-v4-flash-0731")
    return ckptcli::usage_error(kSynth, "unknown model '" + a.model + "' (known: deepseek-v4-flash-0731)");
  if (a.sparse == a.tiny)
    return ckptcli::usage_error(kSynth, "choose exactly one of --sparse (real sizes, sparse files) or --tiny (small, real data)");
  std::string error = ckpt::synth_target_problem(a.out, a.overwrite);
  if (!error.empty()) return ckptcli::usage_error(kSynth, error);
  ckptcli::apply_output_io(kSynth, a.buffered, a.c.quiet);
  auto size = a.sparse ? ckpt::SynthSize::sparse : ckpt::SynthSize::tiny;
  Outcome failed = Outcome::io;
  if (!ckpt::synth_deepseek_v4_flash_0731(a.out, size, a.seed, error, a.overwrite, &failed)) {
    if (failed == Outcome::usage) return ckptcli::usage_error(kSynth, error);  // refused under the lock
    ckptcli::print_error(kSynth, "IO_WRITE", a.out, error);
    return Outcome::io;
  }
  if (!a.c.quiet) std::cout << "wrote " << ckpt::display_escape(a.out) << "\n";
  return Outcome::ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt: validate, convert and verify large MoE model checkpoints (safetensors, GGUF)"};
  app.set_version_flag("--version", std::string("ckptkit ") + ckpt::version_text());
  app.require_subcommand(1);
  app.fallthrough();  // global options (--threads) may follow the subcommand
  unsigned threads = 0;
  app.formatter(std::make_shared<ckptcli::SynopsisFormatter>());
  app.add_option("--threads", threads,
                 "global, for every subcommand (before or after it): worker threads (default: all cores; a shard's conversion pipeline: 6)");

  InspectArgs ia;
  auto* inspect = app.add_subcommand("inspect", "Summarize a checkpoint directory, .safetensors or .gguf file");
  inspect->add_option("path", ia.path, "checkpoint directory, .safetensors or .gguf file (required)");
  ia.c.json_option = inspect->add_option("--json", ia.c.json,
                                         "write the JSON report (schemas/inspect.schema.json) to FILE, or - for stdout "
                                         "(also when the input cannot be loaded); `--json PATH` alone is `--json - PATH`")
                         ->type_name("FILE|-")
                         ->expected(0, 1);
  ckptcli::add_common(inspect, ia.c, "errors only: no summary (the exit code says it)");
  inspect->add_option("--mode", ia.mode, "safetensors header rules: strict (README) or compat (reference)")
      ->check(CLI::IsMember({"strict", "compat"}));

  ValidateArgs va;
  auto* validate = app.add_subcommand("validate", "Check a checkpoint or GGUF file; exit 0 clean, 1 errors");
  validate->add_option("path", va.path, "checkpoint directory, .safetensors or .gguf file");
  validate->add_option("--profile", va.profile, "auto (from config/metadata) or a profile name");
  validate->add_flag("--deep", va.deep, "read every byte: xxh3 per tensor, NaN/Inf, reserved FP8/E8M0 codes");
  validate->add_flag("--sha256", va.sha256, "SHA-256 of every file");
  validate->add_option("--hub-sha256", va.hub,
                       "check every listed file against a 'name sha256' (Hub LFS oids) or sha256sum list; "
                       "an empty list or a name listed twice is an error");
  validate->add_option("--reference", va.reference,
                       "the unconverted input: check PATH as its conversion (with --deep: every byte)");
  ckptcli::add_signature_options(validate, va.signature);
  ckptcli::add_json(validate, va.c, "schemas/validation-report.schema.json");
  validate->add_option("--mode", va.mode, "safetensors header rules: strict (README) or compat (reference)")
      ->check(CLI::IsMember({"strict", "compat"}));
  validate->add_option("--max-findings", va.max_findings, "findings printed (0 = all; JSON has all)");
  ckptcli::add_common(validate, va.c, "no progress, no findings: print only the verdict line");
  validate->add_option("--partition", va.partition,
                       "I/N or env: deep-read only the files of partition I of N (balanced by bytes); "
                       "merge the N --json reports with --merge");
  validate->add_option("--partitions", va.partitions, "N for --partition env (default: CKPT_PARTITIONS, Slurm array)");
  validate->add_option("--merge", va.merge, "merge partial reports (part-*.json) into the single-process report");
  validate->add_option("--tp", va.tp, "also run ckpt preflight's checks at this tensor-parallel degree");
  validate->add_option("--ep", va.ep, "with --tp: the expert-parallel degree (ckpt preflight)");
  validate->add_option("--gpu", va.gpu, "also check kernel availability on this GPU architecture (ckpt preflight)");

  ConvertArgs ca;
  auto* convert = app.add_subcommand("convert", "Convert a checkpoint: block FP8 -> BF16; experts kept or remapped");
  convert->add_option("input", ca.input, "input checkpoint directory or .safetensors file")->required();
  convert->add_option("output", ca.output, "output directory")->required();
  convert->add_option("--experts", ca.experts,
                      "routed MXFP4 experts: keep, int8-shift (fused INT8 kernel layout), or bf16 (exact, ~4x larger)")
      ->check(CLI::IsMember({"keep", "int8-shift", "bf16"}));
  convert->add_option("--headroom-bits", ca.headroom, "int8-shift headroom (default 3, the production value)")
      ->check(CLI::Range(0, 3));
  convert->add_option("--rounding", ca.rounding,
                      "int8-shift ties: half-away (Triton repack, default) or half-even (its torch fallback)")
      ->check(CLI::IsMember({"half-away", "half-even"}));
  convert->add_flag("--dry-run", ca.dry_run, "plan from the headers and print it; write nothing");
  convert->add_option("--memory-budget", ca.memory_budget,
                      "peak buffer memory: a number of bytes with an optional binary suffix K, M, G, T (also KiB, "
                      "MiB, GiB, TiB; B for bytes), at least 64M (default 1G)");
  convert->add_flag("--resume", ca.resume,
                    "finish an interrupted conversion: reuse only shards whose record proves them converted from "
                    "these input bytes with these options by this version; redo the others");
  convert->add_flag("--overwrite", ca.overwrite,
                    "replace a previous ckptkit output: rewrite every shard and remove the files it wrote that this "
                    "conversion does not produce (never a checkpoint ckptkit did not write)");
  ckptcli::add_buffered(convert, ca.buffered);
  ckptcli::add_common(convert, ca.c, "errors only: no progress, no plan, no summary");
  ckptcli::add_json(convert, ca.c, "schemas/convert-report.schema.json: plan, totals, config");
  convert->add_option("--partition", ca.partition,
                      "I/N: convert only the shards of partition I (0-based) of N, balanced by output bytes; "
                      "env: I from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX");
  convert->add_option("--partitions", ca.partitions,
                      "N for --partition env and --finalize (default: CKPT_PARTITIONS, then the Slurm array size)");
  convert->add_flag("--finalize", ca.finalize,
                    "after all partitions: verify every shard's record and output, then write index, config, side files");
  ckptcli::add_signature_options(convert, ca.expect, "--expect-signature");
  ckptcli::add_sign_key_option(convert, ca.sign_key);
  convert->add_option("--hub-sha256", ca.hub_sha256,
                      "check IN against a SHA-256 list ('<sha256>  <path>' lines as sha256sum writes, or the Hub's "
                      "'name sha256') while converting: every shard must be listed, every listed file present with "
                      "its digest; OUT is not finalized (no index, no config.json) otherwise");

  SynthArgs sa;
  auto* synth = app.add_subcommand("synth", "Write a synthetic checkpoint with a real model's exact structure");
  synth->add_option("model", sa.model, "deepseek-v4-flash-0731")->required();
  synth->add_option("out", sa.out, "output directory")->required();
  synth->add_flag("--sparse", sa.sparse, "real sizes as sparse files (zero data, no disk use)");
  synth->add_flag("--tiny", sa.tiny, "a small model with the same names, dtypes and block types, random data");
  synth->add_option("--seed", sa.seed, "random seed for --tiny");
  synth->add_flag("--overwrite", sa.overwrite, "write into a non-empty directory, replacing files of the same names");
  ckptcli::add_buffered(synth, sa.buffered);
  ckptcli::add_common(synth, sa.c, "errors only: no 'wrote' line");

  ckptcli::Command dump = ckptcli::add_dump_command(app);
  ckptcli::Command repack = ckptcli::add_repack_command(app);
  ckptcli::Command hash = ckptcli::add_hash_command(app);
  ckptcli::Command diff = ckptcli::add_diff_command(app);
  ckptcli::Command preflight = ckptcli::add_preflight_command(app);
  ckptcli::Command relayout = ckptcli::add_relayout_command(app);
  ckptcli::Command sign = ckptcli::add_sign_command(app);
  ckptcli::Command verify_signature = ckptcli::add_verify_signature_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage mistake exits 2.
    return app.exit(e) == 0 ? ckpt::exit_code_for(Outcome::ok) : ckpt::exit_code_for(Outcome::usage);
  }
  if (!ckptcli::environment_ok("ckpt")) return ckpt::exit_code_for(Outcome::usage);
  // A file-size limit (RLIMIT_FSIZE) must surface as a write error (EFBIG), not kill us.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C, kill, a closed terminal: every writer's temporaries go, then we die of the signal.
  ckpt::install_signal_cleanup();
  std::optional<tbb::global_control> limit;
  if (threads > 0) {
    limit.emplace(tbb::global_control::max_allowed_parallelism, threads);
    ckpt::set_shard_pipeline_workers(threads);  // else the pipeline's own default (convert/shard_writer.h)
  }

  if (*inspect) return ckptcli::finish(kInspect, run_inspect(ia));
  if (*validate) return ckptcli::finish(kValidate, run_validate(va));
  if (*synth) return ckptcli::finish(kSynth, run_synth(sa));
  if (*convert) return ckptcli::finish(kConvert, run_convert(ca));
  for (const ckptcli::Command* c : {&dump, &repack, &hash, &diff, &preflight, &relayout, &sign, &verify_signature})
    if (*c->sub) return ckptcli::finish(c->name, c->run());
  return ckpt::exit_code_for(Outcome::usage);
}

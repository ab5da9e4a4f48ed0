// ckpt: the command-line front end. Argument parsing and output only; every
// check lives in libconvert. One function per subcommand; exit codes in one place.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include "commands.h"
#include "convert/convert.h"
#include "core/build_info.h"
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

using ckptcli::kFindings;
using ckptcli::kIoError;
using ckptcli::kOk;
using ckptcli::kUsage;

int exit_code_for(const ckpt::Findings& f) {
  if (f.has_io_errors()) return kIoError;
  return f.has_errors() ? kFindings : kOk;
}

// A one-line progress meter on stderr, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}
  ~Progress() {
    if (shown_) std::fprintf(stderr, "\r%60s\r", "");
  }
  void update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done < total) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0.0;
    double eta = rate > 0 && total > done ? static_cast<double>(total - done) / rate : 0.0;
    std::fprintf(stderr, "\r  %.2f / %.2f GB (%.0f%%) %.2f GB/s, ETA %.0f s   ", static_cast<double>(done) / 1e9,
                 static_cast<double>(total) / 1e9, pct, rate / 1e9, eta);
    shown_ = true;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

// Writes `text` to stdout for "-" or atomically to a file. False on I/O failure.
bool emit(const std::string& target, const std::string& text) {
  std::string error;
  if (ckpt::write_report(target, text, error)) return true;
  std::cerr << "ckpt: " << error << "\n";
  return false;
}

ckpt::StMode parse_mode(const std::string& m) { return m == "compat" ? ckpt::StMode::compat : ckpt::StMode::strict; }

struct InspectArgs {
  std::string path;
  bool json = false;
  std::string mode = "strict";
};

int run_inspect(const InspectArgs& a) {
  ckpt::StReadOptions options;
  options.mode = parse_mode(a.mode);
  ckpt::LoadedModel model;
  ckpt::Findings findings;
  if (!ckpt::load_model(a.path, options, model, findings)) {
    for (const auto& f : findings.items()) std::cerr << "ckpt: " << f.file << ": " << f.message << "\n";
    return exit_code_for(findings);
  }
  findings.sort_stable();
  auto summary = ckpt::inspect_model(model);
  if (a.json) {
    if (!emit("-", ckpt::inspect_json(summary, findings))) return kIoError;
  } else {
    ckpt::print_inspect_human(summary, findings, std::cout);
  }
  return exit_code_for(findings);
}

struct ValidateArgs {
  std::string path, profile = "auto", json, hub, mode = "strict", reference;
  bool deep = false, sha256 = false, quiet = false;
  size_t max_findings = 200;
  std::string partition;  // "I/N" or "env"
  unsigned partitions = 0;
  std::vector<std::string> merge;
};

bool resolve_partition(const char* cmd, const std::string& text, unsigned partitions, ckpt::PartitionSpec& spec);

// Prints (human / --json) a report and returns its exit code.
int emit_validation(const ckpt::ValidationReport& report, const ValidateArgs& a) {
  bool json_to_stdout = a.json == "-";
  if (!a.json.empty() && !emit(a.json, ckpt::validation_report_json(report))) return kIoError;
  if (!json_to_stdout && !a.quiet) ckpt::print_validation_human(report, std::cout, a.max_findings);
  if (!json_to_stdout && a.quiet) std::cout << ckpt::verdict_line(report) << "\n";
  return exit_code_for(report.findings);
}

// `validate --merge part-*.json`: the single-process report from N partial ones.
int run_validate_merge(const ValidateArgs& a) {
  if (!a.path.empty() || !a.partition.empty()) {
    std::cerr << "ckpt validate: --merge takes only the partial reports (no PATH, no --partition)\n";
    return kUsage;
  }
  auto merged = ckpt::merge_validation_reports(a.merge);
  if (merged.status != ckpt::MergeStatus::ok) {
    std::cerr << "ckpt validate --merge: " << merged.error << "\n";
    return merged.status == ckpt::MergeStatus::io_error ? kIoError : kUsage;
  }
  return emit_validation(merged.report, a);
}

int run_validate(const ValidateArgs& a) {
  if (!a.merge.empty()) return run_validate_merge(a);
  if (a.path.empty()) {
    std::cerr << "ckpt validate: PATH is required (or --merge part-*.json)\n";
    return kUsage;
  }
  if (a.profile != "auto" && !ckpt::is_known_profile(a.profile)) {
    std::cerr << "ckpt validate: unknown profile '" << a.profile << "' (known: auto";
    for (const auto& n : ckpt::profile_names()) std::cerr << ", " << n;
    std::cerr << ")\n";
    return kUsage;
  }
  ckpt::ValidateOptions options;
  options.profile = a.profile;
  options.deep = a.deep;
  options.sha256 = a.sha256;
  options.hub_sha256_file = a.hub;
  options.reference = a.reference;
  options.mode = parse_mode(a.mode);
  if (!a.partition.empty()) {
    if (!resolve_partition("validate", a.partition, a.partitions, options.partition)) return kUsage;
    if (!a.reference.empty() || !a.hub.empty()) {
      std::cerr << "ckpt validate: --partition splits --deep / --sha256 only, not --reference or --hub-sha256\n";
      return kUsage;
    }
  }
  Progress progress(!a.quiet);
  options.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto report = ckpt::validate_path(a.path, options);
  return emit_validation(report, a);
}

// --partition I/N or env (+ --partitions N) into a spec; false after printing why.
bool resolve_partition(const char* cmd, const std::string& text, unsigned partitions, ckpt::PartitionSpec& spec) {
  std::string error;
  std::optional<uint32_t> count;
  if (partitions > 0) count = partitions;
  bool ok = text == "env" ? ckpt::partition_from_env(ckpt::process_env(), count, spec, error)
                          : ckpt::parse_partition(text, spec, error);
  if (!ok) std::cerr << "ckpt " << cmd << ": " << error << "\n";
  return ok;
}

struct ConvertArgs {
  std::string input, output, experts = "keep", memory_budget = "1G", json, rounding = "half-away";
  unsigned headroom = 3;
  bool dry_run = false, resume = false, overwrite = false, quiet = false;
  std::string partition;  // "I/N" or "env"
  unsigned partitions = 0;
  bool finalize = false;
};

int run_convert(const ConvertArgs& a) {
  ckpt::ConvertOptions o;
  o.input = a.input;
  o.output = a.output;
  o.dry_run = a.dry_run;
  o.resume = a.resume;
  o.overwrite = a.overwrite;
  o.experts = a.experts == "int8-shift" ? ckpt::ExpertMode::int8_shift
              : a.experts == "bf16"     ? ckpt::ExpertMode::bf16
                                        : ckpt::ExpertMode::keep;
  o.remap.headroom = a.headroom;
  o.remap.rounding = a.rounding == "half-even" ? ckpt::RemapRounding::half_even : ckpt::RemapRounding::half_away;
  if (!ckpt::parse_size(a.memory_budget, o.memory_budget)) {
    std::cerr << "ckpt convert: --memory-budget '" << a.memory_budget << "' is not a size (e.g. 1G, 512M)\n";
    return kUsage;
  }
  if (a.resume && a.overwrite) {
    std::cerr << "ckpt convert: --resume and --overwrite exclude each other\n";
    return kUsage;
  }
  if (!a.partition.empty() && a.finalize) {
    std::cerr << "ckpt convert: --partition converts one partition, --finalize checks them all; run them separately\n";
    return kUsage;
  }
  if (!a.partition.empty() && !resolve_partition("convert", a.partition, a.partitions, o.partition)) return kUsage;
  o.finalize = a.finalize;
  if (a.finalize) {
    std::string error;
    std::optional<uint32_t> given;
    if (a.partitions > 0) given = a.partitions;
    o.partitions = ckpt::partition_count_from_env(ckpt::process_env(), given, error);
    if (!error.empty()) {
      std::cerr << "ckpt convert: " << error << "\n";
      return kUsage;
    }
  }
  Progress progress(!a.quiet);
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto report = ckpt::convert_checkpoint(o);
  bool json_to_stdout = a.json == "-";
  if (!a.json.empty() && !emit(a.json, ckpt::convert_report_json(report, o))) return kIoError;
  if (!json_to_stdout) ckpt::print_convert_human(report, o, report.status == ckpt::ConvertStatus::ok ? std::cout : std::cerr);
  switch (report.status) {
    case ckpt::ConvertStatus::ok: return kOk;
    case ckpt::ConvertStatus::input_error: return kFindings;
    case ckpt::ConvertStatus::usage_error: return kUsage;
    case ckpt::ConvertStatus::io_error: return kIoError;
  }
  return kIoError;
}

struct SynthArgs {
  std::string model, out;
  bool sparse = false, tiny = false, overwrite = false;
  uint64_t seed = 1;
};

int run_synth(const SynthArgs& a) {
  if (a.model != "deepseek-v4-flash-0731") {
    std::cerr << "ckpt synth: unknown model '" << a.model << "' (known: deepseek-v4-flash-0731)\n";
    return kUsage;
  }
  if (a.sparse == a.tiny) {
    std::cerr << "ckpt synth: choose exactly one of --sparse (real sizes, sparse files) or --tiny (small, real data)\n";
    return kUsage;
  }
  std::string error = ckpt::synth_target_problem(a.out, a.overwrite);
  if (!error.empty()) {
    std::cerr << "ckpt synth: " << error << "\n";
    return kUsage;
  }
  auto size = a.sparse ? ckpt::SynthSize::sparse : ckpt::SynthSize::tiny;
  if (!ckpt::synth_deepseek_v4_flash_0731(a.out, size, a.seed, error, a.overwrite)) {
    std::cerr << "ckpt synth: " << error << "\n";
    return kIoError;
  }
  std::cout << "wrote " << a.out << "\n";
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt: validate, convert and verify large MoE model checkpoints (safetensors, GGUF)"};
  app.set_version_flag("--version", std::string("ckptkit ") + ckpt::version_text());
  app.require_subcommand(1);
  app.fallthrough();  // global options (--threads) may follow the subcommand
  unsigned threads = 0;
  app.add_option("--threads", threads, "worker threads (default: all cores)");

  InspectArgs ia;
  auto* inspect = app.add_subcommand("inspect", "Summarize a checkpoint directory, .safetensors or .gguf file");
  inspect->add_option("path", ia.path, "checkpoint directory, .safetensors or .gguf file")->required();
  inspect->add_flag("--json", ia.json, "print JSON (schemas/inspect.schema.json)");
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
  validate->add_option("--json", va.json, "write the JSON report to FILE, or - for stdout");
  validate->add_option("--mode", va.mode, "safetensors header rules: strict (README) or compat (reference)")
      ->check(CLI::IsMember({"strict", "compat"}));
  validate->add_option("--max-findings", va.max_findings, "findings printed (0 = all; JSON has all)");
  validate->add_flag("-q,--quiet", va.quiet, "no progress, print only the verdict line");
  validate->add_option("--partition", va.partition,
                       "I/N or env: deep-read only the files of partition I of N (balanced by bytes); "
                       "merge the N --json reports with --merge");
  validate->add_option("--partitions", va.partitions, "N for --partition env (default: CKPT_PARTITIONS, Slurm array)");
  validate->add_option("--merge", va.merge, "merge partial reports (part-*.json) into the single-process report");

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
  convert->add_option("--memory-budget", ca.memory_budget, "peak buffer memory (default 1G)");
  convert->add_flag("--resume", ca.resume,
                    "finish an interrupted conversion: reuse only shards whose record proves them converted from "
                    "these input bytes with these options by this version; redo the others");
  convert->add_flag("--overwrite", ca.overwrite,
                    "replace a previous ckptkit output: rewrite every shard and remove the files it wrote that this "
                    "conversion does not produce (never a checkpoint ckptkit did not write)");
  convert->add_flag("-q,--quiet", ca.quiet, "no progress bar");
  convert->add_option("--json", ca.json, "write the JSON report (plan, totals, config) to FILE, or - for stdout");
  convert->add_option("--partition", ca.partition,
                      "I/N: convert only the shards of partition I (0-based) of N, balanced by output bytes; "
                      "env: I from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX");
  convert->add_option("--partitions", ca.partitions,
                      "N for --partition env and --finalize (default: CKPT_PARTITIONS, then the Slurm array size)");
  convert->add_flag("--finalize", ca.finalize,
                    "after all partitions: verify every shard's record and output, then write index, config, side files");

  SynthArgs sa;
  auto* synth = app.add_subcommand("synth", "Write a synthetic checkpoint with a real model's exact structure");
  synth->add_option("model", sa.model, "deepseek-v4-flash-0731")->required();
  synth->add_option("out", sa.out, "output directory")->required();
  synth->add_flag("--sparse", sa.sparse, "real sizes as sparse files (zero data, no disk use)");
  synth->add_flag("--tiny", sa.tiny, "a small model with the same names, dtypes and block types, random data");
  synth->add_option("--seed", sa.seed, "random seed for --tiny");
  synth->add_flag("--overwrite", sa.overwrite, "write into a non-empty directory, replacing files of the same names");

  ckptcli::Command dump = ckptcli::add_dump_command(app);
  ckptcli::Command repack = ckptcli::add_repack_command(app);
  ckptcli::Command hash = ckptcli::add_hash_command(app);
  ckptcli::Command diff = ckptcli::add_diff_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  // A file-size limit (RLIMIT_FSIZE) must surface as a write error (EFBIG), not kill us.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C, kill, a closed terminal: every writer's temporaries go, then we die of the signal.
  ckpt::install_signal_cleanup();
  std::optional<tbb::global_control> limit;
  if (threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, threads);

  if (*inspect) return run_inspect(ia);
  if (*validate) return run_validate(va);
  if (*synth) return run_synth(sa);
  if (*convert) return run_convert(ca);
  if (*dump.sub) return dump.run();
  if (*repack.sub) return repack.run();
  if (*hash.sub) return hash.run();
  if (*diff.sub) return diff.run();
  return kUsage;
}

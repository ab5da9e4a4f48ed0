#include "validate/validate.h"

#include <atomic>
#include <chrono>
#include <filesystem>

#include "formats/json.h"
#include "formats/loader.h"
#include "io/hash.h"
#include "model/pairing.h"
#include "model/quant_scheme.h"
#include "profiles/registry.h"
#include "repack/pack_validate.h"
#include "validate/deep_scan.h"
#include "validate/hub_list.h"
#include "validate/reference.h"

namespace ckpt {
namespace {

void fill_inventory(const LoadedModel& model, ValidationReport& report) {
  report.format = model.format == ModelFormat::gguf ? "gguf" : "safetensors";
  for (size_t i = 0; i < model.view.files.size(); ++i) {
    FileReport fr;
    fr.name = model.view.files[i];
    std::error_code ec;
    fr.size = std::filesystem::file_size(model.view.file_paths[i], ec);
    report.files.push_back(fr);
  }
  report.tensor_count = model.view.tensors.size();
  for (const auto& t : model.view.tensors) {
    report.payload_bytes += t.nbytes;
    TensorReport tr;
    tr.file = model.view.files[t.file];
    tr.name = t.name;
    tr.type = t.type;
    tr.shape = t.shape;
    tr.offset = t.offset;
    tr.nbytes = t.nbytes;
    report.tensors.push_back(std::move(tr));
  }
}

// --partition: the files this partition reads; structural findings stay with partition 0.
std::vector<bool> claim_partition(const ValidateOptions& options, ValidationReport& report) {
  if (!options.partition.active()) return {};
  report.partition = options.partition;
  auto owner = file_partitions(report, options.partition.count);
  std::vector<bool> mine(owner.size());
  for (size_t i = 0; i < owner.size(); ++i) {
    mine[i] = owner[i] == options.partition.index;
    if (mine[i]) report.partition_files.push_back(report.files[i].name);
  }
  if (options.partition.index != 0) report.findings = Findings{};
  return mine;
}

// The value ranges of deepseek-v4.md §10.6, read on the --deep pass: every scale convert would
// multiply by, under the scale rule convert applies (numerics/scale_rule.h), and hash-routing tables (`*.tid2eid`)
// against config.json's n_routed_experts.
std::vector<ValueRule> value_rules(const LoadedModel& model, const std::string& profile) {
  const ModelView& view = model.view;
  std::vector<ValueRule> rules(view.tensors.size());
  if (model.format != ModelFormat::safetensors) return rules;
  Findings already_reported;  // pairing problems are the profile checks' to report
  std::vector<Fp8Pair> pairs;
  std::vector<Mxfp4BlocksPair> blocks;
  check_fp8_pairing(view, pairing_options_for(model, profile, already_reported), already_reported, &pairs, &blocks);
  add_scale_rules(view, pairs, blocks, rules);  // the scale rule convert applies (numerics/scale_rule.h)
  std::optional<int64_t> experts;
  if (model.checkpoint.config) experts = json_int(model.checkpoint.config->root(), "n_routed_experts");
  if (experts && *experts > 0)
    for (size_t i = 0; i < view.tensors.size(); ++i)
      if (view.tensors[i].name.ends_with(".tid2eid")) rules[i] = ValueRule{ValueRule::expert_id, *experts};
  return rules;
}

void run_scan(const LoadedModel& model, const ValidateOptions& options, const std::vector<bool>& mine,
              const std::string& profile, ValidationReport& report) {
  ScanRequest req;
  req.only_files = mine;
  req.values = options.deep;
  if (options.deep) req.rules = value_rules(model, profile);
  req.sha256 = options.sha256;
  uint64_t total = scan_total_bytes(model.view, req);
  std::atomic<uint64_t> done{0};
  if (options.progress)
    req.on_progress = [&](uint64_t n) { options.progress(done.fetch_add(n) + n, total); };
  std::vector<TensorScanResult> results;
  std::vector<FileScanResult> files;
  scan_model(model.view, req, results, files, report.findings);
  report_io_findings(model.view, results, files, report.findings);
  for (size_t i = 0; i < files.size(); ++i) {
    report.bytes_read += files[i].bytes_read;
    report.files[i].sha256 = files[i].sha256;
  }
  if (!options.deep) return;
  report_value_findings(model.view, results, report.findings);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].scanned) continue;
    report.tensors[i].xxh3 = xxh3_hex(results[i].xxh3);
    report.tensors[i].nan = results[i].nan;
    report.tensors[i].inf = results[i].inf;
  }
}

}  // namespace

std::vector<uint32_t> file_partitions(const ValidationReport& report, uint32_t n) {
  std::vector<uint64_t> sizes;
  std::vector<std::string> names;
  for (const auto& f : report.files) {
    sizes.push_back(f.size);
    names.push_back(f.name);
  }
  return assign_partitions(sizes, names, n);
}

ValidationReport validate_path(const std::string& path, const ValidateOptions& options) {
  auto start = std::chrono::steady_clock::now();
  ValidationReport report;
  report.path = path;
  report.deep = options.deep;
  report.sha256 = options.sha256 || !options.hub_sha256_file.empty();
  if (options.partition.active() && (!options.reference.empty() || !options.hub_sha256_file.empty() ||
                                     is_expert_pack(path))) {
    report.partition = options.partition;
    report.findings.error("VALIDATE_PARTITION", path, "", std::nullopt,
                          "--partition splits the plain --deep / --sha256 scan only; run --reference, --hub-sha256 "
                          "and expert packs in one process");
    return report;
  }
  // An expert pack (`ckpt repack-experts` output) is checked by its own validator.
  if (is_expert_pack(path)) {
    report.format = "expert-pack";
    validate_expert_pack(path, options.reference, options.deep, report.findings);
    // Every listed file of the pack directory is hashed by name (a pack has no shards).
    if (!options.hub_sha256_file.empty()) check_hub_list(options.hub_sha256_file, path, options.hub_every_shard, report);
    report.findings.sort_stable();
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
  }
  StReadOptions read_options;
  read_options.mode = options.mode;
  LoadedModel model;
  if (!load_model(path, read_options, model, report.findings)) {
    claim_partition(options, report);  // nothing to read: the findings stay with partition 0
  } else {
    fill_inventory(model, report);
    report.profile = options.profile == "auto" ? detect_profile(model) : options.profile;
    run_profile(report.profile, model, report.findings);
    if (model.format == ModelFormat::safetensors) {
      QuantScheme q;
      QuantDetectError error;
      if (detect_quant_scheme(model.checkpoint, q, error) && !q.profile.empty()) {
        report.quant_profile = q.profile;
        report.quant_config_file = q.config_file;
      }
    }
    if (!options.reference.empty()) check_against_reference(model, options.reference, options.deep, report.findings);
    std::vector<bool> mine = claim_partition(options, report);
    if (options.deep || report.sha256) {
      ValidateOptions scan_options = options;
      scan_options.sha256 = report.sha256;
      run_scan(model, scan_options, mine, report.profile, report);
    }
    if (!options.hub_sha256_file.empty()) check_hub_list(options.hub_sha256_file, path, options.hub_every_shard, report);
  }
  report.findings.sort_stable();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ckpt

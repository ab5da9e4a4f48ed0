// `ckpt convert IN OUT`: the whole job. Safety checks on the paths (never into the input,
// never into a checkpoint ckptkit did not write), the plan from headers, OUT locked, a
// free-space check, the index and config.json withdrawn, earlier leftovers pruned, then side
// files, shards (each atomic, each with a record), and last the index and config.json.
// Interrupted runs resume.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "convert/finalize.h"
#include "core/partition.h"
#include "plan/plan.h"
#include "convert/records.h"  // record_path: where --resume looks for per-shard records
#include "core/findings.h"
#include "core/outcome.h"
#include "io/lockstep_hasher.h"

namespace ckpt {

struct ConvertOptions {
  std::string input, output;
  ExpertMode experts = ExpertMode::keep;
  RemapOptions remap;      // --experts int8-shift
  bool dry_run = false;
  bool resume = false;     // skip shards whose record proves them (convert/records.h); redo the rest
  bool overwrite = false;  // replace a previous ckptkit output: rewrite every shard, remove what
                           // earlier runs wrote that this plan does not produce (convert/output_dir.h)
  uint64_t memory_budget = 1ull << 30;
  // Scale-out (README "Scaling out"): convert only the shards of partition I of N and
  // their records, never the index/config; or --finalize: verify every shard's record
  // and output, then write the index, config and side files.
  PartitionSpec partition;
  bool finalize = false;
  std::optional<uint32_t> partitions;  // --finalize: the count that names partitions to rerun
  std::function<void(uint64_t done, uint64_t total)> progress;  // output bytes
  // Called once the plan and the disk check are done, before the first byte is written
  // (the CLI prints the plan summary there); may be empty.
  std::function<void(const struct ConvertReport&)> on_plan;
  // Called once every shard of a whole-output run is written, before its final files (the
  // index and config.json, whose absence marks OUT incomplete); false leaves OUT incomplete
  // (the hook has set the report's status and findings). May be empty. `--expect-signature`.
  std::function<bool(struct ConvertReport&)> before_finalize;
  // Hash every input shard (SHA-256, whole file) in the same pass over the disk as the
  // conversion (io/lockstep_hasher.h), into ConvertReport::input_sha256 before
  // before_finalize runs; an input that changed while it was hashed or converted is an
  // error (CONVERT_INPUT_CHANGED) and OUT stays incomplete. Whole-output runs only.
  bool hash_inputs = false;
  // Called under OUT's lock once OUT's last file (index, config.json, the manifest) is
  // written, before the lock is released; false reports a failure (the hook has set the
  // report's status and findings). May be empty. `--sign-key` (sign/provenance.h).
  std::function<bool(struct ConvertReport&)> after_finalize;
  // Files of OUT that after_finalize writes (OUT/model.sig, OUT/model.provenance): listed in
  // OUT's manifest as ckptkit's, withdrawn with the index before anything changes.
  std::vector<std::string> attestation_files;
  // ckpt relayout (relayout/relayout.h) runs this machinery with its own plan and config.json
  // (both empty for convert): make_plan in place of plan_conversion, make_config in place
  // of the convert config rewrite (false with `error`: CFG_PARSE); `command` names the run
  // in lock messages.
  std::function<bool(const LoadedModel&, ConversionPlan&, Findings&)> make_plan;
  std::function<bool(const LoadedModel&, const ConversionPlan&, std::string& config_json, std::string& error)> make_config;
  std::string command = "ckpt convert";
};

enum class ConvertStatus { ok, input_error, usage_error, io_error };
// What a status means for the exit code (core/outcome.h).
inline Outcome outcome_of(ConvertStatus s) {
  static constexpr Outcome kOutcome[] = {Outcome::ok, Outcome::findings, Outcome::usage, Outcome::io};
  return kOutcome[static_cast<int>(s)];
}

struct ConvertReport {
  ConvertStatus status = ConvertStatus::ok;
  bool dry_run = false;
  ConversionPlan plan;
  std::string config_json;  // the rewritten config.json ("" when the input has none)
  std::string params_json;  // the rewritten params.json (Mistral native layout; "" otherwise)
  uint64_t disk_needed = 0, disk_free = 0;
  uint64_t bytes_written = 0;
  uint64_t shards_written = 0, shards_resumed = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  PartitionSpec partition;                  // --partition I/N of this run
  std::vector<uint32_t> shard_partition;    // partition of every planned shard (partitioned runs)
  FinalizeCheck finalize;                   // --finalize
  std::map<size_t, RemapStats> remap_stats;  // per ConversionPlan::fused index (shards written this run)
  // The mode of every file convert creates in OUT (side files keep their own): never more
  // readable than IN's files (io/output_file.h InputSet::output_mode).
  mode_t output_mode = 0644;
  // ConvertOptions::hash_inputs: every input shard's SHA-256, as read beside the conversion.
  std::vector<HashedFile> input_sha256;
  Findings findings;
};

ConvertReport convert_checkpoint(const ConvertOptions& options);

// "1G", "512M", "1048576" -> bytes (binary units); false when unparsable.
bool parse_size(const std::string& text, uint64_t& bytes);

}  // namespace ckpt

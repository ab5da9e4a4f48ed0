// `ckpt relayout --tp N [--ep N] IN OUT`: rewrites a block-FP8 checkpoint so that it loads
// at a TP / EP degree, exactly, without requantizing. The plan is ckpt preflight's analysis
// of that deployment (deploy/relayout_plan.h); the rewrite is convert's machinery
// (convert/convert.h: the OUT lock, shards streamed one by one within the memory budget,
// atomic writes, records for --resume, the index and config.json last) with plan_regrid
// (plan/plan.h): FP8 bytes copied, scales re-gridded, promoted modules dequantized to BF16,
// and the config rewrite of relayout/relayout_config.h. Every other byte is the input's.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "convert/convert.h"
#include "core/partition.h"
#include "core/findings.h"
#include "core/outcome.h"
#include "deploy/preflight.h"
#include "deploy/relayout_plan.h"

namespace ckpt {

struct RelayoutOptions {
  std::string input, output;
  Deployment deployment;
  std::vector<std::string> engines;  // empty: preflight's default (vllm and sglang)
  RelayoutRequest request;
  bool dry_run = false, resume = false, overwrite = false;
  uint64_t memory_budget = 1ull << 30;
  // Scale-out as ckpt convert (docs/scaling-out.md): the shards of partition I of N only, or
  // --finalize: every shard's record verified, then the index, config.json and side files.
  PartitionSpec partition;
  bool finalize = false;
  std::optional<uint32_t> partitions;  // --finalize: the count that names partitions to rerun
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Called once the plan is made and OUT checked, before the first byte is written (the CLI
  // prints the plan there); not called for a dry run.
  std::function<void(const struct RelayoutReport&)> on_plan;
  // Called once every shard is written, before the index and config.json: the one place a
  // finishing step (issue 32's --sign-key) joins the run; false leaves OUT incomplete.
  std::function<bool(ConvertReport&)> before_finalize;
  // Called under OUT's lock once OUT's last file is written (--sign-key), and the files it
  // writes: as ConvertOptions::after_finalize / attestation_files.
  std::function<bool(ConvertReport&)> after_finalize;
  bool hash_inputs = false;  // as ConvertOptions::hash_inputs (a signed relayout's provenance)
  std::vector<std::string> attestation_files;
};

struct RelayoutReport {
  PreflightReport preflight;  // of the input at the target
  RelayoutPlan plan;
  ConvertReport convert;      // the rewrite (empty when it did not run)
  bool ran = false;           // the rewrite ran (or its dry run)
  Findings findings;          // relayout's own (RELAYOUT_*), before the rewrite's
};

RelayoutReport relayout_checkpoint(const RelayoutOptions& options);
Outcome relayout_outcome(const RelayoutReport& r);

}  // namespace ckpt

// Partitioned conversion: which partition converts which output shard, and the check
// `ckpt convert --finalize` runs before it writes the final files (index, config,
// side files): every planned shard has a complete record that matches its input and
// its output. A missing, partial or mismatched shard is an error naming the shard and
// the partition to rerun.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "core/findings.h"
#include "formats/loader.h"

namespace ckpt {

// The partition (0..n-1) of every planned shard: LPT over the output file bytes, from
// the plan alone (headers only), so every process computes the same assignment.
std::vector<uint32_t> shard_partitions(const ConversionPlan& plan, uint32_t n);

struct FinalizeCheck {
  uint32_t partitions = 0;  // the count used to name partitions (0: unknown)
  uint64_t shards_verified = 0, bytes_verified = 0;
  std::vector<uint32_t> rerun;  // partitions to rerun, ascending
};

// Checks OUT against the plan: for every shard its record (present, complete, the same
// identity: tool version, options, output header, recipe, every input byte range it is
// computed from re-hashed; convert/records.h) and its output file (size and xxh3 as
// recorded); shards in parallel. `partitions` (from --partitions or
// CKPT_PARTITIONS) names the partition count; without it the count recorded in the
// records is used. Appends CONVERT_SHARD_MISSING / CONVERT_SHARD_INCOMPLETE /
// CONVERT_SHARD_STALE / CONVERT_SHARD_MISMATCH errors and one CONVERT_RERUN summary;
// returns true when every shard is verified.
bool verify_partitioned_output(const LoadedModel& in, const ConversionPlan& plan, const std::string& out_dir,
                               std::optional<uint32_t> partitions, FinalizeCheck& check, Findings& findings);

}  // namespace ckpt

#include "convert/finalize.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/partition.h"
#include "convert/records.h"
#include "convert/shard_writer.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace {

const char* state_code(ShardState s) {
  switch (s) {
    case ShardState::missing: return "CONVERT_SHARD_MISSING";
    case ShardState::incomplete: return "CONVERT_SHARD_INCOMPLETE";
    case ShardState::stale: return "CONVERT_SHARD_STALE";
    default: return "CONVERT_SHARD_MISMATCH";
  }
}

}  // namespace

std::vector<uint32_t> shard_partitions(const ConversionPlan& plan, uint32_t n) {
  std::vector<uint64_t> bytes;
  std::vector<std::string> names;
  for (const auto& s : plan.shards) {
    bytes.push_back(s.file_bytes);
    names.push_back(s.name);
  }
  return assign_partitions(bytes, names, n);
}

bool verify_partitioned_output(const LoadedModel& in, const ConversionPlan& plan, const std::string& out_dir,
                               std::optional<uint32_t> partitions, FinalizeCheck& check, Findings& findings) {
  // Finalize never redoes a shard: a record written with other options, another tool
  // version or other input bytes is refused with the reason, naming the partition.
  std::vector<ShardVerdict> checks = verify_shards(in, plan, out_dir);
  // The count that names partitions: given, else the one the records carry.
  uint32_t n = partitions.value_or(0);
  if (!partitions)
    for (const auto& c : checks)
      if (c.record) n = std::max(n, c.record->partition_count);
  check.partitions = n;
  std::vector<uint32_t> owner = n ? shard_partitions(plan, n) : std::vector<uint32_t>(plan.shards.size(), 0);
  std::set<uint32_t> rerun;
  for (size_t i = 0; i < checks.size(); ++i) {
    const PlannedShard& shard = plan.shards[i];
    const ShardVerdict& c = checks[i];
    if (c.state == ShardState::ok) {
      ++check.shards_verified;
      check.bytes_verified += shard.file_bytes;
      continue;
    }
    std::string part = n ? std::to_string(owner[i]) + "/" + std::to_string(n) : std::string();
    if (n) rerun.insert(owner[i]);
    std::string what = c.state == ShardState::missing ? "has no record (its partition did not finish it)" : c.detail;
    std::string action = n ? "; rerun partition " + part + " (array/completion index " + std::to_string(owner[i]) + ")"
                           : "; rerun its partition (no record names the partition count: pass --partitions N to "
                             "name it)";
    findings.error(state_code(c.state), shard.name, "", std::nullopt,
                   "shard " + shard.name + (n ? " of partition " + part : std::string()) + ": " + what + action);
  }
  if (check.shards_verified == plan.shards.size()) return true;
  std::string list;
  // Appended in two steps: `(c ? "," : "") + <temporary string>` trips GCC 12's -Wrestrict
  // false positive at -O3 (GCC bug 105329).
  for (uint32_t p : rerun) {
    if (!list.empty()) list += ",";
    list += std::to_string(p);
  }
  check.rerun.assign(rerun.begin(), rerun.end());
  findings.error("CONVERT_RERUN", out_dir, "", std::nullopt,
                 std::to_string(plan.shards.size() - check.shards_verified) + " of " +
                     std::to_string(plan.shards.size()) + " shards are not finished" +
                     (n ? "; rerun partitions " + list + " of " + std::to_string(n) : std::string()) +
                     "; nothing final (index, config.json, side files) was written");
  return false;
}

}  // namespace ckpt

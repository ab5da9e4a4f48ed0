// Partitioning for scale-out runs (Slurm job arrays, Kubernetes Indexed Jobs): a
// deterministic assignment of items (output shards, or files to deep-read) to N bins
// that balances bytes, computed from headers alone so every process agrees on it
// without talking to the others. The tool never schedules anything itself.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ckpt {

struct PartitionSpec {
  uint32_t index = 0;
  uint32_t count = 0;  // 0: not partitioned
  bool active() const { return count > 0; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// The largest N accepted (a job array rarely has more tasks than shards).
inline constexpr uint32_t kMaxPartitions = 100000;

// "I/N" with 0 <= I < N <= kMaxPartitions. False with a message otherwise.
bool parse_partition(const std::string& text, PartitionSpec& spec, std::string& error);

// "--partition env": the index from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (Kubernetes
// Indexed Job); the count from `count` (--partitions N) when given, else CKPT_PARTITIONS,
// else SLURM_ARRAY_TASK_COUNT when the array is exactly 0..COUNT-1 (SLURM_ARRAY_TASK_MIN = 0,
// SLURM_ARRAY_TASK_MAX = COUNT-1). A resubmission of one index (`sbatch --array=3`) has
// COUNT 1, so it needs CKPT_PARTITIONS or --partitions. `getenv` is injectable for tests.
using EnvLookup = std::function<const char*(const char*)>;
bool partition_from_env(const EnvLookup& getenv, std::optional<uint32_t> count, PartitionSpec& spec,
                        std::string& error);
EnvLookup process_env();

// The count alone (for --finalize): `count` when given, else CKPT_PARTITIONS, else nullopt.
std::optional<uint32_t> partition_count_from_env(const EnvLookup& getenv, std::optional<uint32_t> count,
                                                 std::string& error);

// LPT greedy: items sorted by weight descending, then name ascending; each goes to the
// least-loaded bin, ties to the lowest bin index. Returns the bin of every item. The
// result depends only on (weights, names, n), never on input order or timing.
std::vector<uint32_t> assign_partitions(const std::vector<uint64_t>& weights, const std::vector<std::string>& names,
                                        uint32_t n);

// Per-bin totals of an assignment (bytes and item counts), for --dry-run.
struct PartitionBin {
  uint64_t bytes = 0;
  std::vector<size_t> items;  // in input order
};
std::vector<PartitionBin> partition_bins(const std::vector<uint32_t>& assignment, const std::vector<uint64_t>& weights,
                                         uint32_t n);

}  // namespace ckpt

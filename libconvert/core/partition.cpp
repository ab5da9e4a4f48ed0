#include "core/partition.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace ckpt {
namespace {

// A non-negative decimal integer that fits in uint32_t and is at most `max`.
std::optional<uint32_t> parse_u32(const std::string& s, uint64_t max) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint64_t v = std::stoull(s);
  if (v > max) return std::nullopt;
  return static_cast<uint32_t>(v);
}

std::optional<uint32_t> env_u32(const EnvLookup& getenv, const char* name, std::string& error, bool& bad) {
  const char* v = getenv(name);
  if (!v || !*v) return std::nullopt;
  auto n = parse_u32(v, kMaxPartitions);
  if (!n) {
    error = std::string(name) + "='" + v + "' is not an integer in 0.." + std::to_string(kMaxPartitions);
    bad = true;
  }
  return n;
}

}  // namespace

bool parse_partition(const std::string& text, PartitionSpec& spec, std::string& error) {
  auto slash = text.find('/');
  auto index = slash == std::string::npos ? std::nullopt : parse_u32(text.substr(0, slash), kMaxPartitions);
  auto count = slash == std::string::npos ? std::nullopt : parse_u32(text.substr(slash + 1), kMaxPartitions);
  if (!index || !count || *count == 0 || *index >= *count) {
    error = "--partition '" + text + "' is not I/N with 0 <= I < N <= " + std::to_string(kMaxPartitions) +
            " (0-based: the first of 4 is 0/4), nor 'env'";
    return false;
  }
  spec = PartitionSpec{*index, *count};
  return true;
}

EnvLookup process_env() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

std::optional<uint32_t> partition_count_from_env(const EnvLookup& getenv, std::optional<uint32_t> count,
                                                 std::string& error) {
  if (count) return count;
  bool bad = false;
  auto n = env_u32(getenv, "CKPT_PARTITIONS", error, bad);
  if (n && *n == 0) {
    error = "CKPT_PARTITIONS=0: the count must be at least 1";
    return std::nullopt;
  }
  return n;
}

bool partition_from_env(const EnvLookup& getenv, std::optional<uint32_t> count, PartitionSpec& spec,
                        std::string& error) {
  bool bad = false;
  const char* index_var = "SLURM_ARRAY_TASK_ID";
  auto index = env_u32(getenv, index_var, error, bad);
  if (!index && !bad) {
    index_var = "JOB_COMPLETION_INDEX";
    index = env_u32(getenv, index_var, error, bad);
  }
  if (bad) return false;
  if (!index) {
    error = "--partition env: neither SLURM_ARRAY_TASK_ID (Slurm job array) nor JOB_COMPLETION_INDEX "
            "(Kubernetes Indexed Job) is set; pass --partition I/N instead";
    return false;
  }
  auto n = partition_count_from_env(getenv, count, error);
  if (!n && !error.empty()) return false;
  const char* count_source = count ? "--partitions" : "CKPT_PARTITIONS";
  if (!n && std::string(index_var) == "SLURM_ARRAY_TASK_ID") {
    auto total = env_u32(getenv, "SLURM_ARRAY_TASK_COUNT", error, bad);
    auto lo = env_u32(getenv, "SLURM_ARRAY_TASK_MIN", error, bad);
    auto hi = env_u32(getenv, "SLURM_ARRAY_TASK_MAX", error, bad);
    if (bad) return false;
    if (total && *total > 0 && lo && hi && *lo == 0 && *hi + 1 == *total) {
      n = total;
      count_source = "SLURM_ARRAY_TASK_COUNT";
    } else if (total) {
      error = "--partition env: the Slurm array is not 0..COUNT-1 (SLURM_ARRAY_TASK_MIN=" +
              (lo ? std::to_string(*lo) : std::string("?")) + ", MAX=" + (hi ? std::to_string(*hi) : std::string("?")) +
              ", COUNT=" + std::to_string(*total) +
              "), e.g. a resubmission of one index; set CKPT_PARTITIONS=N or pass --partitions N";
      return false;
    }
  }
  if (!n) {
    error = std::string("--partition env: ") + index_var +
            " is set but the partition count is not: set CKPT_PARTITIONS=N (the Job's completions) or pass "
            "--partitions N";
    return false;
  }
  if (*index >= *n) {
    error = std::string("--partition env: ") + index_var + "=" + std::to_string(*index) + " is not below the count " +
            std::to_string(*n) + " (from " + count_source + "); partitions are 0-based: submit --array=0-" +
            std::to_string(*n - 1);
    return false;
  }
  spec = PartitionSpec{*index, *n};
  return true;
}

std::vector<uint32_t> assign_partitions(const std::vector<uint64_t>& weights, const std::vector<std::string>& names,
                                        uint32_t n) {
  std::vector<uint32_t> bin(weights.size(), 0);
  if (n <= 1) return bin;
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (weights[a] != weights[b]) return weights[a] > weights[b];
    return names[a] < names[b];
  });
  std::vector<uint64_t> load(n, 0);
  for (size_t i : order) {
    uint32_t best = 0;  // least loaded, ties to the lowest index
    for (uint32_t b = 1; b < n; ++b)
      if (load[b] < load[best]) best = b;
    bin[i] = best;
    load[best] += weights[i];
  }
  return bin;
}

std::vector<PartitionBin> partition_bins(const std::vector<uint32_t>& assignment, const std::vector<uint64_t>& weights,
                                         uint32_t n) {
  std::vector<PartitionBin> bins(std::max<uint32_t>(n, 1));
  for (size_t i = 0; i < assignment.size(); ++i) {
    bins[assignment[i]].bytes += weights[i];
    bins[assignment[i]].items.push_back(i);
  }
  return bins;
}

}  // namespace ckpt

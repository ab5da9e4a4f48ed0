// Executes one PlannedShard: streams the input tensors through fixed-size buffers
// (read -> dequantize in parallel -> write in order) into a temporary file that is
// fsynced and renamed only when complete. Peak memory is bounded by the budget, not
// by the shard size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "plan/plan.h"
#include "formats/loader.h"

namespace ckpt {

struct ShardWriteOptions {
  uint64_t memory_budget = 1ull << 30;
  std::function<void(uint64_t bytes)> on_progress;  // output bytes just written
};

// What a finished shard is known by: lets --resume skip it and --finalize trust it.
struct ShardRecord {
  std::string shard;
  uint64_t input_size = 0;
  int64_t input_mtime_ns = 0;
  std::string input_header_xxh3;  // the input's length prefix + header
  std::string input_xxh3;         // header plus every tensor's xxh3, in file order
  std::string plan_xxh3;          // the output header this run planned
  uint64_t output_size = 0;
  std::string output_xxh3;        // of the whole output file
  std::string tool_version;
  uint32_t partition_index = 0, partition_count = 0;  // the --partition I/N that wrote it (count 0: none)
};

enum class WriteStatus { ok, input_error, io_error };

struct ShardWriteResult {
  WriteStatus status = WriteStatus::ok;
  std::string message;  // names file, tensor and element or byte offset
  ShardRecord record;
  std::map<size_t, RemapStats> remap_stats;  // per ConversionPlan::fused index written here
};

// Writes `shard` to `out_path`. The final name only ever holds a complete file.
ShardWriteResult write_shard(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                             const std::string& out_path, const ShardWriteOptions& options);

// The cheap identity of an input shard (size, mtime, header hash) and the plan hash,
// compared by --resume before it trusts a record.
bool same_input_identity(const ShardRecord& a, const ShardRecord& b);
ShardRecord input_identity(const LoadedModel& in, const PlannedShard& shard);

// Test hook: when CKPT_TEST_KILL_AT=N is set, the N-th call raises SIGKILL (used by
// the crash/resume tests to stop the converter at exact points). A no-op otherwise.
void kill_point(const char* where);

}  // namespace ckpt

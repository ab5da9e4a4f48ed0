// Executes one PlannedShard: streams the input tensors through fixed-size buffers
// (read -> dequantize in parallel -> write in order) into a temporary file that is
// fsynced and renamed only when complete. Peak memory is bounded by the budget, not
// by the shard size.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"
#include "formats/loader.h"

namespace ckpt {

struct ShardWriteOptions {
  uint64_t memory_budget = 1ull << 30;
  std::function<void(uint64_t bytes)> on_progress;  // output bytes just written
  mode_t mode = 0644;  // the output file's mode (never more readable than IN: io/output_file.h)
};

enum class WriteStatus { ok, input_error, io_error };

struct ShardWriteResult {
  WriteStatus status = WriteStatus::ok;
  std::string message;  // names file, tensor and element or byte offset
  uint64_t output_size = 0;
  uint64_t output_xxh3 = 0;  // of the whole output file, hashed as it was written
  // xxh3 of every input tensor the shard read (view index, digest), hashed from the very
  // bytes that were converted: the shard record's input identity (convert/records.h).
  std::vector<std::pair<size_t, uint64_t>> input_digests;
  std::map<size_t, RemapStats> remap_stats;  // per ConversionPlan::fused index written here
};

// Writes `shard` to `out_path`. The final name only ever holds a complete file.
ShardWriteResult write_shard(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                             const std::string& out_path, const ShardWriteOptions& options);

// Units in flight (read -> transform -> write) within `memory_budget`: what the output
// writer's buffers leave (io/direct_writer.h kDirectWriterBytes: they are counted), divided
// by the largest unit's input + output bytes, 2 to 16.
size_t pipeline_tokens(uint64_t memory_budget, uint64_t largest_unit);

// Threads that transform a shard's units at once (convert, relayout), by default at most
// kDefaultShardWorkers. Measured on the 16-core GPU host (a virtio disk at ~1.7 GB/s,
// docs/benchmarks.md "Sixteenth session", 3 runs each): int8-shift on all 16 cores wrote at
// 0.74x the disk's dd, capped at 6 at 0.91 (at 3: 0.90), keep unchanged (0.91-0.97). Bursts
// of compute on every core keep the writer's threads (and the VM's I/O path) off the CPU
// and the disk's queue runs dry. Six cores still turn out ~20 GB/s of BF16
// (ckpt_bench_dequant: ~3.3 GB/s a core), twice what a PCIe Gen5 drive writes.
inline constexpr unsigned kDefaultShardWorkers = 6;
// `ckpt --threads N` sets N (0: back to the default); the pipeline never uses more than TBB
// allows (tbb::global_control) either.
void set_shard_pipeline_workers(unsigned n);
unsigned shard_pipeline_workers();
// The most units any shard pipeline of this process transformed at once since the last
// reset (tests). Nothing is counted before the first reset: the count costs two atomic
// read-modify-writes a unit, which only a test should pay.
unsigned shard_pipeline_peak_concurrency();
void reset_shard_pipeline_peak_concurrency();

// The output file's first bytes: the 8-byte little-endian header length, then the header.
std::string shard_header_bytes(const PlannedShard& shard);

// Test hook: when CKPT_TEST_KILL_AT=N is set, the N-th call raises SIGKILL (used by
// the crash/resume tests to stop the converter at exact points); with CKPT_TEST_STOP_AT=N
// it raises SIGSTOP instead (the process waits there until SIGCONT: the lock and signal
// tests act on a run frozen at a known point). A no-op otherwise.
void kill_point(const char* where);

// Test hook: when CKPT_TEST_STOP_WHERE equals `where`, raises SIGSTOP there. Not counted by
// CKPT_TEST_KILL_AT / CKPT_TEST_STOP_AT (their numbering stays), for points before OUT is
// locked or written (the race and read-once tests act on a run frozen there).
void stop_point(const char* where);

}  // namespace ckpt

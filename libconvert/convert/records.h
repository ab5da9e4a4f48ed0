// Per-shard records (OUT/.ckptkit/records/<shard>.json): what a finished output shard
// is known by. `--resume` and partition reruns trust a shard only when its record matches
// everything the shard's bytes are a function of; `--finalize` checks every one before
// the index and config are written. docs/notes/h-convert.md describes the format.
//
// The identity of a shard (record version 2):
//   * the tool version and every conversion parameter (--experts, --headroom-bits,
//     --rounding, the config's weight_block_size, the profile whose pairing applied);
//   * plan_xxh3: the exact output header; recipe_xxh3: for every output tensor its action
//     and the name, dtype, shape and byte range of every input tensor it is computed from
//     (plan/plan.h tensor_inputs: its own bytes, its scale wherever that lives, the
//     experts of a fused matrix);
//   * inputs: every one of those byte ranges with the xxh3 of the bytes the writer
//     converted, and input_xxh3 over that list;
//   * output_size and output_xxh3 of the file written.
// Verifying a record re-reads exactly those input ranges (a range shared by several
// shards is hashed once per run) and the output, so reuse is proven by content, not by
// sizes or mtimes; shards that fail a cheap check first are redone without being read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert/shard_writer.h"
#include "formats/loader.h"
#include "plan/plan.h"

namespace ckpt {

inline constexpr int kRecordVersion = 2;

struct RecordRange {
  uint32_t file = 0;  // index into ShardRecord::input_files
  uint64_t offset = 0, length = 0;
  std::string xxh3;  // of the bytes [offset, offset + length) of that file
};

struct ShardRecord {
  int version = 0;          // 0: absent (a 0.1.0 record); only kRecordVersion is trusted
  std::string shard;
  std::string state;        // "writing" (written before the shard) or "done"
  std::string tool_version;
  std::vector<std::pair<std::string, std::string>> params;  // (option, value), fixed order
  std::string plan_xxh3, recipe_xxh3;
  std::vector<std::string> input_files;
  std::vector<RecordRange> inputs;  // sorted by (file, offset)
  std::string input_xxh3;
  uint64_t output_size = UINT64_MAX;
  std::string output_xxh3;
  uint32_t partition_index = 0, partition_count = 0;  // the --partition I/N that wrote it (count 0: none)
  std::vector<size_t> input_tensors;  // not stored: the view tensor of each input range (for messages)
};

// OUT/.ckptkit/records/<shard>.json, or "~<xxh3 of the name>.json" when the shard's name
// is too long for a name with ".json" appended (the record holds the name itself).
std::string record_file_name(const std::string& shard);
std::string record_path(const std::string& out_dir, const std::string& shard);

// The identity this run's plan gives `shard`, state "writing": everything but the hashes.
ShardRecord planned_record(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard);
// Adds the hashes of a finished write and marks it "done". False (an internal error, with
// a message) when the writer read an input tensor the identity does not list.
bool finish_record(const LoadedModel& in, const ShardWriteResult& written, ShardRecord& rec, std::string& error);

std::string record_json(const ShardRecord& rec);
// nullopt when the file is absent, unreadable, over 64 MiB or not a JSON object.
std::optional<ShardRecord> read_record(const std::string& path);

// xxh3 of a whole file, streamed in 1 MiB steps; nullopt when it cannot be read.
std::optional<std::string> file_xxh3(const std::string& path);

enum class ShardState { ok, missing, incomplete, stale, output_missing, output_mismatch };

struct ShardVerdict {
  ShardState state = ShardState::missing;
  std::string detail;  // why it is not ok, in words ("it was written with --rounding half-even, ...")
  std::optional<ShardRecord> record;
};

// Verifies the planned shards with which[i] set (every shard when `which` is empty), in
// parallel. Verdicts of shards not asked for are `missing` with no detail.
std::vector<ShardVerdict> verify_shards(const LoadedModel& in, const ConversionPlan& plan, const std::string& out_dir,
                                        const std::vector<bool>& which = {});

}  // namespace ckpt

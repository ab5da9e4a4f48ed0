// Per-shard records (OUT/.ckptkit/records/<shard>.json): what a finished output shard
// is known by. `--resume` trusts a shard whose record still matches the input and the
// output; partitioned runs write them; `--finalize` checks every one before the index
// and config are written.
#pragma once

#include <optional>
#include <string>

#include "plan/plan.h"
#include "convert/shard_writer.h"
#include "formats/loader.h"

namespace ckpt {

// OUT/.ckptkit/records/<shard>.json
std::string record_path(const std::string& out_dir, const std::string& shard);

std::string record_json(const ShardRecord& rec);
// nullopt when the file is absent, unreadable or not JSON; fields that are missing keep
// their "unknown" values (checked by record_complete).
std::optional<ShardRecord> read_record(const std::string& path);
// Every field a finished shard must have is present (sizes, hashes, plan hash).
bool record_complete(const ShardRecord& rec);

// xxh3 of a whole file, streamed in 1 MiB steps; nullopt when it cannot be read.
std::optional<std::string> file_xxh3(const std::string& path);

// A shard is finished when its record matches this input and plan and the output file
// still hashes to what the record says.
bool shard_already_done(const LoadedModel& in, const PlannedShard& shard, const std::string& out_dir);

}  // namespace ckpt

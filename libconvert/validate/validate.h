// `ckpt validate`: structural checks of the format, the checkpoint directory and
// the model profile; with --deep a single read of every byte (xxh3 per tensor,
// NaN/Inf and reserved codes); with --sha256 / --hub-sha256 per-file SHA-256.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/partition.h"
#include "core/findings.h"
#include "formats/safetensors.h"

namespace ckpt {

struct ValidateOptions {
  std::string profile = "auto";
  bool deep = false;
  bool sha256 = false;
  std::string hub_sha256_file;  // "name sha256" lines; implies sha256
  // Every shard must be listed (convert --hub-sha256): a shard the list lacks is an error,
  // not validate's warning (the Hub lists every LFS file, and shards are LFS files).
  bool hub_every_shard = false;
  std::string reference;        // the unconverted input: check PATH as its conversion
  StMode mode = StMode::strict;
  // --partition I/N: deep-read (and --sha256) only the files of partition I (LPT over
  // file sizes); structural findings only in partition 0, so `validate --merge` of the
  // N partial reports equals a single-process report. Not with reference/hub lists.
  PartitionSpec partition;
  // Called with (bytes done, bytes total) while reading payload; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct TensorReport {
  std::string file, name, type;
  std::vector<uint64_t> shape;
  uint64_t offset = 0, nbytes = 0;
  std::string xxh3;  // with --deep
  uint64_t nan = 0, inf = 0;
};

struct FileReport {
  std::string name;
  uint64_t size = 0;
  std::string sha256;           // with --sha256
  std::string expected_sha256;  // with --hub-sha256
  std::string hub_status;       // "ok", "mismatch", "missing", "extra", "refused" (validate/hub_list.h), or ""
};

struct ValidationReport {
  std::string path;
  std::string format;   // "safetensors" or "gguf"
  std::string profile;  // the profile that ran
  std::string quant_profile;  // the quantization profile (schemas/quant) detected; "" = none
  std::string quant_config_file;  // where it was read (QuantScheme::config_file); "" with no profile
  bool deep = false, sha256 = false;
  uint64_t tensor_count = 0, payload_bytes = 0, bytes_read = 0;
  double seconds = 0;
  std::vector<FileReport> files;
  std::vector<TensorReport> tensors;
  Findings findings;
  // A partial report (--partition): which partition, and the files it read.
  PartitionSpec partition;
  std::vector<std::string> partition_files;
};

// The partition (0..n-1) of every file of the report's inventory: LPT over file sizes.
std::vector<uint32_t> file_partitions(const ValidationReport& report, uint32_t n);

// Runs the validation. Never throws; everything found is in report.findings.
ValidationReport validate_path(const std::string& path, const ValidateOptions& options);

}  // namespace ckpt

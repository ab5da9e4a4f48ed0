// --partition, --partitions and --finalize (apps/ckpt/partition_flags.h).
#include "partition_flags.h"

#include "../cli_common.h"

namespace ckptcli {

bool resolve_partition(const char* cmd, const std::string& text, unsigned partitions, ckpt::PartitionSpec& spec) {
  std::string error;
  std::optional<uint32_t> count;
  if (partitions > 0) count = partitions;
  bool ok = text == "env" ? ckpt::partition_from_env(ckpt::process_env(), count, spec, error)
                          : ckpt::parse_partition(text, spec, error);
  if (!ok) usage_error(cmd, error);
  return ok;
}

bool resolve_scale_out(const char* cmd, std::string_view verb, const std::string& partition, unsigned partitions,
                       bool finalize, ckpt::PartitionSpec& spec, std::optional<uint32_t>& count) {
  if (!partition.empty() && finalize) {
    usage_error(cmd, "--partition " + std::string(verb) +
                         " one partition, --finalize checks them all; run them separately");
    return false;
  }
  if (!partition.empty()) return resolve_partition(cmd, partition, partitions, spec);
  if (!finalize) return true;
  std::string error;
  std::optional<uint32_t> given;
  if (partitions > 0) given = partitions;
  count = ckpt::partition_count_from_env(ckpt::process_env(), given, error);
  if (error.empty()) return true;
  usage_error(cmd, error);
  return false;
}

}  // namespace ckptcli

// --partition I/N|env, --partitions N and --finalize of the commands that split their work
// across processes (validate, convert, relayout): one reading of them, one set of messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/partition.h"

namespace ckptcli {

// --partition I/N or env (+ --partitions N) into a spec; false after printing why.
bool resolve_partition(const char* cmd, const std::string& text, unsigned partitions, ckpt::PartitionSpec& spec);

// convert's and relayout's --partition / --finalize: the two exclude each other ("--partition
// <verb> one partition, --finalize checks them all; ..."), --partition is resolved as above and
// --finalize's count is --partitions N, else CKPT_PARTITIONS, else none (`count`). False after
// printing why.
bool resolve_scale_out(const char* cmd, std::string_view verb, const std::string& partition, unsigned partitions,
                       bool finalize, ckpt::PartitionSpec& spec, std::optional<uint32_t>& count);

}  // namespace ckptcli

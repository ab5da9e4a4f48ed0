// The checkpoint's quantization config (config.json `quantization_config`), read once for
// every job: the block grid of block-scaled FP8 weights.
#pragma once

#include <cstdint>

#include <simdjson.h>

namespace ckpt {

// quantization_config.weight_block_size as [rows, cols]; false when absent or invalid.
bool weight_block_size_from_config(simdjson::dom::element config, uint64_t& rows, uint64_t& cols);

}  // namespace ckpt

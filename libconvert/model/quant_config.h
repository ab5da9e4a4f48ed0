// The checkpoint's quantization config (config.json `quantization_config`), read once for
// every job: the block grid of block-scaled FP8 weights. A weight_block_size that is
// present but not two positive integers is an error naming the value, in every job
// (validate, convert, dump): never silently 128 x 128.
#pragma once

#include <cstdint>
#include <string>

#include <simdjson.h>

namespace ckpt {

struct WeightBlockSize {
  enum Status { absent, valid, invalid };
  Status status = absent;     // absent: no quantization_config, or no weight_block_size in it
  uint64_t rows = 0, cols = 0;  // valid only
  std::string text;           // the value as written (compact JSON), for messages
};

// The largest block accepted: larger is no real quantization (and a grid of one block).
inline constexpr int64_t kMaxWeightBlock = int64_t{1} << 32;

WeightBlockSize read_weight_block_size(simdjson::dom::element config);
// "quantization_config.weight_block_size is [-128,128]; it must be two positive integers
// [rows, cols], e.g. [128, 128]" for an invalid value.
std::string weight_block_size_problem(const WeightBlockSize& w);

// quantization_config.weight_block_size as [rows, cols]; false when absent or invalid.
// A per-tensor or per-channel scheme (Mistral's FP8: "weight_block_size": null) has no block:
// a null weight_block_size is its marker there, not a malformed value.
struct QuantScheme;
bool quant_scheme_ignores_null_block(const QuantScheme& s, const WeightBlockSize& w);

bool weight_block_size_from_config(simdjson::dom::element config, uint64_t& rows, uint64_t& cols);

}  // namespace ckpt

#include "model/quant_config.h"

#include "formats/json.h"
#include "model/quant_scheme.h"

namespace ckpt {

WeightBlockSize read_weight_block_size(simdjson::dom::element config) {
  WeightBlockSize w;
  auto q = json_get(config, "quantization_config");
  if (!q) return w;
  auto value = json_get(*q, "weight_block_size");
  if (!value) return w;
  w.status = WeightBlockSize::invalid;
  w.text = json_to_string(*value);
  if (w.text.size() > 80) w.text = w.text.substr(0, 77) + "...";
  // Exactly two JSON integers (128.0 or 128.5 are not: a block is a count of elements).
  auto dims = json_int_array(*q, "weight_block_size");
  if (!dims || dims->size() != 2) return w;
  for (int64_t d : *dims)
    if (d < 1 || d > kMaxWeightBlock) return w;
  w.status = WeightBlockSize::valid;
  w.rows = static_cast<uint64_t>((*dims)[0]);
  w.cols = static_cast<uint64_t>((*dims)[1]);
  return w;
}

std::string weight_block_size_problem(const WeightBlockSize& w) {
  return "quantization_config.weight_block_size is " + w.text +
         "; it must be two positive integers [rows, cols] (e.g. [128, 128]): the FP8 block grid is read, never "
         "assumed";
}

bool quant_scheme_ignores_null_block(const QuantScheme& s, const WeightBlockSize& w) {
  return w.status == WeightBlockSize::invalid && w.text == "null" &&
         (s.shape == ScaleShape::tensor || s.shape == ScaleShape::channel);
}

bool weight_block_size_from_config(simdjson::dom::element config, uint64_t& rows, uint64_t& cols) {
  WeightBlockSize w = read_weight_block_size(config);
  if (w.status != WeightBlockSize::valid) return false;
  rows = w.rows;
  cols = w.cols;
  return true;
}

}  // namespace ckpt

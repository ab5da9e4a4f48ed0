#include "model/quant_config.h"

#include "formats/json.h"

namespace ckpt {

bool weight_block_size_from_config(simdjson::dom::element config, uint64_t& rows, uint64_t& cols) {
  auto q = json_get(config, "quantization_config");
  if (!q) return false;
  auto wbs = json_int_array(*q, "weight_block_size");
  if (!wbs || wbs->size() != 2 || (*wbs)[0] < 1 || (*wbs)[1] < 1) return false;
  rows = static_cast<uint64_t>((*wbs)[0]);
  cols = static_cast<uint64_t>((*wbs)[1]);
  return true;
}

}  // namespace ckpt

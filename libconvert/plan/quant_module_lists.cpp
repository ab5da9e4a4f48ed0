// quantization_config's module lists (plan/quant_module_lists.h).
#include "plan/quant_module_lists.h"

namespace ckpt {

std::optional<std::vector<std::string>> quant_module_list(simdjson::dom::element qc, std::string_view key,
                                                          std::string& error) {
  std::vector<std::string> names;
  auto v = json_get(qc, key);
  if (!v) return names;
  simdjson::dom::array arr;
  if (v->get_array().get(arr)) {
    error = "quantization_config." + std::string(key) + " is not an array";
    return std::nullopt;
  }
  for (auto item : arr) {
    std::string_view s;
    if (item.get_string().get(s)) {
      error = "quantization_config." + std::string(key) + " holds a non-string entry";
      return std::nullopt;
    }
    names.emplace_back(s);
  }
  return names;
}

}  // namespace ckpt

// quantization_config's module lists: the modules a quantized checkpoint keeps unquantized
// (ignored_layers, modules_to_not_convert), as the rewrites of convert and relayout read
// them from the input's config.json before adding the modules they leave in BF16.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/json.h"

namespace ckpt {

inline constexpr std::string_view kIgnoredLayers = "ignored_layers";
inline constexpr std::string_view kNotConvert = "modules_to_not_convert";

// The names the list `key` of `quantization_config` (the object `qc`) holds, empty when it
// has no such member; nullopt with `error` ("quantization_config.KEY is not an array" / "...
// holds a non-string entry") when the member is not an array of strings, since silently
// dropping entries there would re-quantise modules someone asked to keep in BF16.
std::optional<std::vector<std::string>> quant_module_list(simdjson::dom::element qc, std::string_view key,
                                                          std::string& error);

}  // namespace ckpt

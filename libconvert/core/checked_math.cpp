#include "core/checked_math.h"

namespace ckpt {

std::string shape_to_string(std::span<const uint64_t> shape, std::string_view separator, bool brackets) {
  std::string s = brackets ? "[" : "";
  // Appended piece by piece: `(i ? sep : "") + std::to_string(...)` trips GCC 12's
  // -Wrestrict false positive at -O3 (GCC bug 105329, std::string::insert inlined).
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += separator;
    s += std::to_string(shape[i]);
  }
  if (brackets) s += ']';
  return s;
}

}  // namespace ckpt

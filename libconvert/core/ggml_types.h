// The ggml tensor type table, ids 0..42 (gguf.md §4). Block sizes and type sizes
// come from ggml-common.h's static_asserts; removed ids keep their historical
// names so a file that uses one is rejected by name ("removed type Q4_2").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ckpt {

inline constexpr int32_t kGgmlTypeCount = 43;  // GGML_TYPE_COUNT

// The ids this code refers to by name; the full list is the table in ggml_types.cpp.
enum GgmlTypeId : int32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8, kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13,
  kGgmlQ6_K = 14, kGgmlQ8_K = 15, kGgmlIQ2_XXS = 16, kGgmlIQ2_XS = 17, kGgmlIQ3_XXS = 18,
  kGgmlIQ1_S = 19, kGgmlIQ4_NL = 20, kGgmlIQ3_S = 21, kGgmlIQ2_S = 22, kGgmlIQ4_XS = 23,
  kGgmlI8 = 24, kGgmlI16 = 25, kGgmlI32 = 26, kGgmlI64 = 27, kGgmlF64 = 28, kGgmlIQ1_M = 29,
  kGgmlBF16 = 30, kGgmlTQ1_0 = 34, kGgmlTQ2_0 = 35, kGgmlMXFP4 = 39, kGgmlNVFP4 = 40,
  kGgmlQ1_0 = 41, kGgmlQ2_0 = 42,
};

struct GgmlTypeInfo {
  int32_t id;
  const char* name;     // gguf-py spelling: "F32", "Q4_K", "IQ3_XXS"
  uint32_t block_size;  // elements per block (0 for removed ids)
  uint32_t type_size;   // bytes per block (0 for removed ids)
  bool removed;
};

// nullptr outside 0..42.
const GgmlTypeInfo* ggml_type_info(int32_t id);
// "Q4_K", "removed type Q4_2", or "unknown type 99".
std::string ggml_type_name(int32_t id);
// Id of a live type by exact name ("Q4_K"); nullopt for unknown or removed names.
std::optional<int32_t> ggml_type_from_name(const std::string& name);

// Bytes of a tensor of live type `id` with dims ne[0..3]: (ne0 / block) * type_size * ne1 * ne2 * ne3,
// dividing first (ggml_nbytes multiplies first and can wrap). nullopt for a removed or unknown
// type, ne0 not a multiple of the block size, or 64-bit overflow.
std::optional<uint64_t> ggml_nbytes(int32_t id, const uint64_t ne[4]);

}  // namespace ckpt

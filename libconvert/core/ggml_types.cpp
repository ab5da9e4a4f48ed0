#include "core/ggml_types.h"

#include "core/checked_math.h"

namespace ckpt {

namespace {

constexpr uint32_t kQK_K = 256;  // super-block size of the K and IQ families

// Indexed by id; every row's id equals its index (checked by the tests).
constexpr GgmlTypeInfo kTypes[kGgmlTypeCount] = {
    {0, "F32", 1, 4, false},
    {1, "F16", 1, 2, false},
    {2, "Q4_0", 32, 18, false},
    {3, "Q4_1", 32, 20, false},
    {4, "Q4_2", 0, 0, true},
    {5, "Q4_3", 0, 0, true},
    {6, "Q5_0", 32, 22, false},
    {7, "Q5_1", 32, 24, false},
    {8, "Q8_0", 32, 34, false},
    {9, "Q8_1", 32, 36, false},
    {10, "Q2_K", kQK_K, 84, false},
    {11, "Q3_K", kQK_K, 110, false},
    {12, "Q4_K", kQK_K, 144, false},
    {13, "Q5_K", kQK_K, 176, false},
    {14, "Q6_K", kQK_K, 210, false},
    {15, "Q8_K", kQK_K, 292, false},
    {16, "IQ2_XXS", kQK_K, 66, false},
    {17, "IQ2_XS", kQK_K, 74, false},
    {18, "IQ3_XXS", kQK_K, 98, false},
    {19, "IQ1_S", kQK_K, 50, false},
    {20, "IQ4_NL", 32, 18, false},
    {21, "IQ3_S", kQK_K, 110, false},
    {22, "IQ2_S", kQK_K, 82, false},
    {23, "IQ4_XS", kQK_K, 136, false},
    {24, "I8", 1, 1, false},
    {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},
    {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},
    {29, "IQ1_M", kQK_K, 56, false},
    {30, "BF16", 1, 2, false},
    {31, "Q4_0_4_4", 0, 0, true},
    {32, "Q4_0_4_8", 0, 0, true},
    {33, "Q4_0_8_8", 0, 0, true},
    {34, "TQ1_0", kQK_K, 54, false},
    {35, "TQ2_0", kQK_K, 66, false},
    {36, "IQ4_NL_4_4", 0, 0, true},
    {37, "IQ4_NL_4_8", 0, 0, true},
    {38, "IQ4_NL_8_8", 0, 0, true},
    {39, "MXFP4", 32, 17, false},
    {40, "NVFP4", 64, 36, false},
    {41, "Q1_0", 128, 18, false},
    {42, "Q2_0", 64, 18, false},
};

}  // namespace

const GgmlTypeInfo* ggml_type_info(int32_t id) {
  if (id < 0 || id >= kGgmlTypeCount) return nullptr;
  return &kTypes[id];
}

std::string ggml_type_name(int32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  if (t == nullptr) return "unknown type " + std::to_string(id);
  if (t->removed) return std::string("removed type ") + t->name;
  return t->name;
}

std::optional<int32_t> ggml_type_from_name(const std::string& name) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (!t.removed && name == t.name) return t.id;
  }
  return std::nullopt;
}

std::optional<uint64_t> ggml_nbytes(int32_t id, const uint64_t ne[4]) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  if (t == nullptr || t->removed || ne[0] % t->block_size != 0) return std::nullopt;
  const uint64_t factors[4] = {ne[0] / t->block_size, ne[1], ne[2], ne[3]};
  auto elements = checked_product(factors);
  if (!elements) {
    // A zero anywhere makes the size 0 even when a partial product of the others wraps.
    for (uint64_t f : factors) {
      if (f == 0) return 0;
    }
    return std::nullopt;
  }
  return checked_mul(*elements, t->type_size);
}

}  // namespace ckpt

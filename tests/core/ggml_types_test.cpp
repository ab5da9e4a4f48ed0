#include "core/ggml_types.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

TEST(GgmlTypes, TableIdsMatchIndexAndRange) {
  for (int32_t id = 0; id < kGgmlTypeCount; ++id) {
    const GgmlTypeInfo* t = ggml_type_info(id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_EQ(t->id, id);
    EXPECT_EQ(t->removed, t->block_size == 0) << t->name;
    EXPECT_EQ(t->removed, t->type_size == 0) << t->name;
  }
  EXPECT_EQ(ggml_type_info(-1), nullptr);
  EXPECT_EQ(ggml_type_info(43), nullptr);
  EXPECT_EQ(ggml_type_info(99), nullptr);
}

// gguf.md §4, every row.
TEST(GgmlTypes, SizesMatchSpecTable) {
  struct Row { int32_t id; const char* name; uint32_t block, bytes; };
  const Row rows[] = {
      {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
      {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
      {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
      {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
      {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
      {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
      {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
      {40, "NVFP4", 64, 36},   {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
  };
  EXPECT_EQ(std::size(rows) + 8, static_cast<size_t>(kGgmlTypeCount));  // + 8 removed ids
  for (const Row& r : rows) {
    const GgmlTypeInfo* t = ggml_type_info(r.id);
    ASSERT_NE(t, nullptr);
    EXPECT_STREQ(t->name, r.name);
    EXPECT_EQ(t->block_size, r.block) << r.name;
    EXPECT_EQ(t->type_size, r.bytes) << r.name;
    EXPECT_FALSE(t->removed) << r.name;
    EXPECT_EQ(ggml_type_from_name(r.name), r.id);
  }
}

TEST(GgmlTypes, RemovedIdsAreNamedAndRejected) {
  const std::pair<int32_t, const char*> removed[] = {{4, "Q4_2"},        {5, "Q4_3"},       {31, "Q4_0_4_4"},
                                                     {32, "Q4_0_4_8"},    {33, "Q4_0_8_8"},  {36, "IQ4_NL_4_4"},
                                                     {37, "IQ4_NL_4_8"},  {38, "IQ4_NL_8_8"}};
  for (const auto& [id, name] : removed) {
    ASSERT_NE(ggml_type_info(id), nullptr);
    EXPECT_TRUE(ggml_type_info(id)->removed) << id;
    EXPECT_EQ(ggml_type_name(id), std::string("removed type ") + name);
    EXPECT_FALSE(ggml_type_from_name(name).has_value());
    const uint64_t ne[4] = {256, 1, 1, 1};
    EXPECT_FALSE(ggml_nbytes(id, ne).has_value());
  }
}

TEST(GgmlTypes, Names) {
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(4), "removed type Q4_2");
  EXPECT_EQ(ggml_type_name(99), "unknown type 99");
  EXPECT_EQ(ggml_type_name(-1), "unknown type -1");
  EXPECT_EQ(ggml_type_name(43), "unknown type 43");
}

TEST(GgmlTypes, NbytesDividesFirstAndChecksOverflow) {
  const uint64_t q4k[4] = {2048, 512, 512, 1};  // 80B-A3B ffn_gate_exps (gguf.md §8)
  EXPECT_EQ(ggml_nbytes(kGgmlQ4_K, q4k), 301989888u);
  const uint64_t bad_block[4] = {100, 1, 1, 1};
  EXPECT_FALSE(ggml_nbytes(kGgmlQ4_K, bad_block).has_value());
  // Q4_0 with ne0 = 2^62: ggml's multiply-first wraps; divide-first gives 2^57 * 18.
  const uint64_t huge_q4[4] = {uint64_t{1} << 62, 1, 1, 1};
  EXPECT_EQ(ggml_nbytes(kGgmlQ4_0, huge_q4), (uint64_t{1} << 57) * 18);
  const uint64_t f32_wrap[4] = {uint64_t{1} << 62, 1, 1, 1};
  EXPECT_FALSE(ggml_nbytes(kGgmlF32, f32_wrap).has_value());
  const uint64_t zero_late[4] = {uint64_t{1} << 40, uint64_t{1} << 40, 0, 1};
  EXPECT_EQ(ggml_nbytes(kGgmlF32, zero_late), 0u);
  EXPECT_FALSE(ggml_nbytes(99, q4k).has_value());
}

}  // namespace
}  // namespace ckpt

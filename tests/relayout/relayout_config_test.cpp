// config.json of a relayout output (libconvert/relayout/relayout_config.h): the block set, the
// family's exclusion list extended (or both lists when it has none), the record replaced in
// place on a re-run, every other member and the key order kept; a malformed record refused.
#include <gtest/gtest.h>

#include "formats/json.h"
#include "relayout/relayout_config.h"

namespace ckpt {
namespace {

RelayoutPlan plan_with(std::vector<std::string> excluded) {
  RelayoutPlan p;
  p.old_n = p.old_k = 128;
  p.block_n = 64;
  p.block_k = 128;
  p.min_n = p.min_k = 16;
  p.excluded = std::move(excluded);
  return p;
}

std::string rewrite(const std::string& in, const RelayoutPlan& p) {
  std::string out, error;
  EXPECT_TRUE(rewrite_relayout_config(in, p, RelayoutTarget{2, 1, {"vllm", "sglang"}}, "abc", out, error)) << error;
  return out;
}

TEST(RelayoutConfig, TheBlockIsSetAndTheFamilysOwnExclusionListExtended) {
  const std::string in = R"({"model_type": "qwen3_moe", "torch_dtype": "bfloat16", "quantization_config":
    {"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}, "zz": 1})";
  const std::string out = rewrite(in, plan_with({"model.layers.0.mlp.experts"}));
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(out, error)) << error;
  auto q = *json_get(doc.root(), "quantization_config");
  EXPECT_EQ(json_to_string(*json_get(q, "weight_block_size")), "[64,128]");
  EXPECT_EQ(json_to_string(*json_get(q, "modules_to_not_convert")), R"(["lm_head","model.layers.0.mlp.experts"])");
  EXPECT_FALSE(json_get(q, "ignored_layers"));  // not invented beside the family's own list
  EXPECT_EQ(json_string(doc.root(), "torch_dtype"), "bfloat16");
  // Key order kept, the record appended last.
  EXPECT_LT(out.find("\"zz\""), out.find("\"ckptkit_relayout\""));
  EXPECT_LT(out.find("\"model_type\""), out.find("\"zz\""));
}

TEST(RelayoutConfig, WithNoExclusionListBothAreWrittenAndAReRunReplacesTheRecordInPlace) {
  const std::string in = R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  const RelayoutPlan p = plan_with({"model.layers.3.self_attn.o_proj"});
  const std::string once = rewrite(in, p);
  EXPECT_NE(once.find("\"ignored_layers\""), std::string::npos) << once;
  EXPECT_NE(once.find("\"modules_to_not_convert\""), std::string::npos) << once;
  EXPECT_EQ(rewrite(once, p), once);  // idempotent: lists not doubled, the record replaced
  RelayoutRecord rec;
  std::string error;
  JsonDoc doc;
  ASSERT_TRUE(doc.parse(once, error));
  ASSERT_TRUE(read_relayout_record(doc.root(), rec, error)) << error;
  EXPECT_EQ(rec.block_n, 64u);
  EXPECT_EQ(rec.old_k, 128u);
  EXPECT_EQ(rec.bf16_modules, std::vector<std::string>{"model.layers.3.self_attn.o_proj"});
  // A module inside an entry counts; a module whose name only begins like it does not.
  EXPECT_EQ(promoted_weights(rec, {"model.layers.3.self_attn.o_proj.weight", "model.layers.3.self_attn.o_proj_x.weight"}),
            std::vector<std::string>{"model.layers.3.self_attn.o_proj.weight"});
}

TEST(RelayoutConfig, WhatCannotBeRewrittenOrReadBackIsRefused) {
  std::string out, error;
  const RelayoutTarget t{2, 1, {}};
  EXPECT_FALSE(rewrite_relayout_config(R"({"model_type": "x"})", plan_with({}), t, "", out, error));
  EXPECT_NE(error.find("no quantization_config"), std::string::npos);
  EXPECT_FALSE(rewrite_relayout_config(R"({"quantization_config": {"quant_method": "fp8"}})", plan_with({}), t, "", out, error));
  EXPECT_NE(error.find("no weight_block_size"), std::string::npos);
  EXPECT_FALSE(rewrite_relayout_config(
      R"({"quantization_config": {"weight_block_size": [128, 128], "ignored_layers": "lm_head"}})", plan_with({}), t, "", out,
      error));
  EXPECT_FALSE(rewrite_relayout_config("[1, 2]", plan_with({}), t, "", out, error));
  for (const char* bad : {R"({"ckptkit_relayout": 3})",
                          R"({"ckptkit_relayout": {"weight_block_size": [0, 64], "weight_block_size_before": [128, 128], "bf16_modules": []}})",
                          R"({"ckptkit_relayout": {"weight_block_size": [64, 64], "weight_block_size_before": [128, 128], "bf16_modules": [""]}})",
                          R"({"ckptkit_relayout": {"weight_block_size": [64, 64], "bf16_modules": []}})"}) {
    JsonDoc doc;
    ASSERT_TRUE(doc.parse(bad, error)) << bad;
    RelayoutRecord rec;
    EXPECT_FALSE(read_relayout_record(doc.root(), rec, error)) << bad;
  }
}

}  // namespace
}  // namespace ckpt

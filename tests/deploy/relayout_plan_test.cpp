// ckpt relayout's plan (libconvert/deploy/relayout_plan.h) from preflight's analysis, on the
// published configs (tests/fixtures/preflight/): the block chosen, block_k changed only when a
// row-split module needs it, promotion below --min-block, --block and --bf16, and the refusals.
#include <filesystem>

#include <gtest/gtest.h>

#include "deploy/preflight.h"
#include "deploy/relayout_plan.h"
#include "test_util.h"

namespace ckpt {
namespace {

PreflightReport at(const std::string& name, uint32_t tp, uint32_t ep = 1) {
  PreflightOptions o;
  o.deployment = {tp, ep, 1};
  return preflight(test::fixture("preflight/" + name), o);
}

TEST(RelayoutPlan, Qwen3_235BAtTp8ReblocksTo64x64AndSaysBlockKChanges) {
  const auto r = at("qwen3-235b-a22b-fp8", 8);
  const RelayoutPlan p = plan_relayout(r, RelayoutRequest{});
  ASSERT_EQ(p.problem, "");
  EXPECT_TRUE(p.needed);
  EXPECT_EQ(p.block_n, 64u);
  EXPECT_EQ(p.block_k, 64u);
  EXPECT_TRUE(p.promoted.empty());
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes[0].find("block_k changes from 128 to 64"), std::string::npos) << p.notes[0];
  EXPECT_GT(p.scale_bytes, 0);
  // The fix preflight prints is this plan.
  EXPECT_NE(relayout_summary(p).find("re-block to 64x64, +" + std::to_string(p.scale_bytes) + " bytes of scales"),
            std::string::npos);
  bool says_not_in_build = false;
  for (const auto& f : r.findings.items()) says_not_in_build |= f.message.find("not in this build") != std::string::npos;
  EXPECT_FALSE(says_not_in_build);
}

// The notes name the engine code by file and line (engines.json block_sizes); transformers has
// one kernel for every block, so it gets no "not its fastest" note, and its default
// --min-block is Triton's 16x16.
TEST(RelayoutPlan, AReblockNotesEachEnginesFallbackWithItsCitedLine) {
  const RelayoutPlan p = plan_relayout(at("qwen3-235b-a22b-fp8", 8), RelayoutRequest{});
  ASSERT_EQ(p.problem, "");
  bool vllm = false, sglang = false;
  for (const auto& n : p.notes) {
    vllm |= n.rfind("vllm:", 0) == 0 && n.find("fp8_utils.py:891-898 w8a8_triton_block_scaled_mm") != std::string::npos;
    sglang |= n.rfind("sglang:", 0) == 0 && n.find("fp8_kernel.py:1125-1134 w8a8_block_fp8_matmul_triton") != std::string::npos &&
              n.find("--fp8-gemm-backend triton") != std::string::npos;
  }
  EXPECT_TRUE(vllm);
  EXPECT_TRUE(sglang);

  PreflightOptions o;
  o.deployment = {8, 1, 1};
  o.engines = {"transformers"};
  const RelayoutPlan t = plan_relayout(preflight(test::fixture("preflight/qwen3-235b-a22b-fp8"), o), RelayoutRequest{});
  EXPECT_EQ(t.min_n, 16u);
  EXPECT_EQ(t.min_k, 16u);
  for (const auto& n : t.notes) EXPECT_EQ(n.find("fastest kernels"), std::string::npos) << n;
}

TEST(RelayoutPlan, ADeploymentThatLoadsNeedsNothing) {
  const RelayoutPlan p = plan_relayout(at("qwen3-235b-a22b-fp8", 4), RelayoutRequest{});
  EXPECT_EQ(p.problem, "");
  EXPECT_FALSE(p.needed);
  EXPECT_FALSE(p.changes_block());
}

TEST(RelayoutPlan, AClassNeedingABlockBelowMinBlockIsPromotedAndTheRestReblocked) {
  RelayoutRequest q;
  q.min_n = q.min_k = 128;  // nothing smaller than the checkpoint's own block
  const RelayoutPlan p = plan_relayout(at("qwen3-235b-a22b-fp8", 8), q);
  // Every failing class is the routed experts: promoting them is everything.
  EXPECT_EQ(p.block_n, 128u);
  EXPECT_EQ(p.block_k, 128u);
  ASSERT_EQ(p.choices.size(), 1u);
  EXPECT_EQ(p.choices[0].action, RelayoutAction::bf16);
  EXPECT_EQ(p.choices[0].unit, "FusedMoE (routed experts)");
  EXPECT_GT(p.bf16_bytes, 0);
  ASSERT_FALSE(p.excluded.empty());
  EXPECT_EQ(p.excluded.front(), "model.layers.0.mlp.experts");
}

TEST(RelayoutPlan, DeepSeekR1AtTp32NeedsBlock64OnlyInTheDenseLayers) {
  const RelayoutPlan p = plan_relayout(at("deepseek-r1-fp8", 32), RelayoutRequest{});
  ASSERT_EQ(p.problem, "");
  EXPECT_EQ(p.block_n, 64u);  // 18432 / 32 = 576 = 9 x 64
  EXPECT_EQ(p.block_k, 64u);  // down_proj's 576 columns a rank
}

TEST(RelayoutPlan, BlockAndBf16RequestsAreCheckedAgainstTheCheckpoint) {
  const auto r = at("qwen3-235b-a22b-fp8", 8);
  RelayoutRequest bad_block;
  bad_block.block_n = 96;
  bad_block.block_k = 128;
  EXPECT_NE(plan_relayout(r, bad_block).problem.find("does not divide"), std::string::npos);
  RelayoutRequest forced;
  forced.block_n = forced.block_k = 128;  // the experts do not fit: promoted
  const RelayoutPlan f = plan_relayout(r, forced);
  EXPECT_EQ(f.problem, "");
  ASSERT_FALSE(f.promoted.empty());
  RelayoutRequest unknown;
  unknown.bf16 = {"model.layers.0.mlp.not_a_module"};
  EXPECT_NE(plan_relayout(r, unknown).problem.find("names no block-FP8 module"), std::string::npos);
  RelayoutRequest everything;
  everything.bf16 = {"*"};
  EXPECT_NE(plan_relayout(r, everything).problem.find("ckpt convert"), std::string::npos);
}

// A Qwen3-Next / Qwen3.5-style hybrid from config.json alone (sglang#19045's shape): the
// GatedDeltaNet in_proj_ba has 2 x 32 value heads = 64 rows, 8 a rank at TP 8, below any
// kernel's block: that class alone is promoted to BF16 (it is small); the experts re-block.
TEST(RelayoutPlan, AGatedDeltaNetProjectionOf8RowsARankIsPromotedAndTheExpertsReblocked) {
  test::TempDir tmp;
  std::filesystem::create_directories(tmp.str("cfg"));
  test::write_text(tmp.str("cfg/config.json"), R"({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048, "num_hidden_layers": 4, "vocab_size": 1024, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "num_experts": 8, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "full_attention_interval": 4,
    "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]}})");
  PreflightOptions o;
  o.deployment = {8, 1, 1};
  const auto r = preflight(tmp.str("cfg"), o);
  ASSERT_FALSE(r.loads());
  const RelayoutPlan p = plan_relayout(r, RelayoutRequest{});
  ASSERT_EQ(p.problem, "");
  EXPECT_EQ(p.block_n, 64u);  // moe_intermediate_size 512 / 8
  EXPECT_EQ(p.block_k, 64u);
  bool ba_promoted = false;
  for (const auto& c : p.choices)
    if (c.action == RelayoutAction::bf16) {
      EXPECT_NE(c.unit.find("in_proj_ba"), std::string::npos) << c.unit;  // nothing else
      EXPECT_NE(c.why.find("below --min-block 16x16"), std::string::npos) << c.why;
      ba_promoted = true;
    }
  EXPECT_TRUE(ba_promoted);
  EXPECT_EQ(p.promoted.size(), 3u);  // layers 0-2 (layer 3 is full attention)
  EXPECT_LT(p.bf16_bytes, 3 * 64 * 2048);  // small: 64 rows x 2048 a layer
  // Preflight's own fix text names the same plan.
  bool fix_names_it = false;
  for (const auto& f : r.findings.items())
    fix_names_it |= f.message.find("BF16 for ColumnParallelLinear in_proj_ba") != std::string::npos;
  EXPECT_TRUE(fix_names_it);
}

// A Llama whose K/V projections (2 heads of 64) are 64 rows a rank at TP 2: block_n alone
// would do (64x128), but vLLM groups activations by block_n and asserts groups of block_k
// (engines.json block_sizes.vllm.square_block): with vLLM asked about the block is square and
// the note says why; SGLang alone keeps block_k; a non-square --block is refused for vLLM.
TEST(RelayoutPlan, VllmNeedsASquareBlockSoBlockKFollowsBlockN) {
  test::TempDir tmp;
  std::filesystem::create_directories(tmp.str("cfg"));
  test::write_text(tmp.str("cfg/config.json"), R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 2, "vocab_size": 1024,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]}})");
  auto plan_for = [&](std::vector<std::string> engines, RelayoutRequest q = {}) {
    PreflightOptions o;
    o.deployment = {2, 1, 1};
    o.engines = std::move(engines);
    return plan_relayout(preflight(tmp.str("cfg"), o), q);
  };
  const RelayoutPlan both = plan_for({});
  ASSERT_EQ(both.problem, "");
  EXPECT_EQ(both.block_n, 64u);
  EXPECT_EQ(both.block_k, 64u);
  bool says_why = false;
  for (const auto& n : both.notes)
    says_why |= n.find("vllm needs a square block") != std::string::npos &&
                n.find("vllm/model_executor/layers/quantization/fp8.py:299-305") != std::string::npos;
  EXPECT_TRUE(says_why);
  const RelayoutPlan sglang = plan_for({"sglang"});
  ASSERT_EQ(sglang.problem, "");
  EXPECT_EQ(sglang.block_n, 64u);
  EXPECT_EQ(sglang.block_k, 128u);  // block_n only, as the issue prefers
  RelayoutRequest oblong;
  oblong.block_n = 64;
  oblong.block_k = 128;
  EXPECT_NE(plan_for({"vllm"}, oblong).problem.find("vllm needs a square block"), std::string::npos);
  EXPECT_EQ(plan_for({"sglang"}, oblong).problem, "");
}

TEST(RelayoutPlan, ABf16CheckpointHasNothingToReblock) {
  EXPECT_NE(plan_relayout(at("deepseek-r1-bf16", 32), RelayoutRequest{}).problem.find("no block-FP8 weights"),
            std::string::npos);
}

}  // namespace
}  // namespace ckpt

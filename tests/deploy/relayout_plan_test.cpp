// ckpt relayout's plan (libconvert/deploy/relayout_plan.h) from preflight's analysis, on the
// published configs (tests/fixtures/preflight/): the block chosen, block_k changed only when a
// row-split module needs it, promotion below --min-block, --block and --bf16, and the refusals.
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

TEST(RelayoutPlan, ABf16CheckpointHasNothingToReblock) {
  EXPECT_NE(plan_relayout(at("deepseek-r1-bf16", 32), RelayoutRequest{}).problem.find("no block-FP8 weights"),
            std::string::npos);
}

}  // namespace
}  // namespace ckpt

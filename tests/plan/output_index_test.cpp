// plan_writes_index (plan/output_index.h): the one rule convert writes the index by and
// validate --reference expects it by.
#include <gtest/gtest.h>

#include "formats/loader.h"
#include "plan/output_index.h"
#include "plan/plan.h"

namespace ckpt {
namespace {

ConversionPlan plan_with_shards(size_t n) {
  ConversionPlan plan;
  for (size_t i = 0; i < n; ++i) {
    PlannedShard shard;
    shard.name = "model-" + std::to_string(i) + ".safetensors";
    plan.shards.push_back(shard);
  }
  return plan;
}

TEST(PlanWritesIndex, OneShardFromAnInputWithoutAnIndexStaysWithoutOne) {
  LoadedModel in;
  EXPECT_FALSE(plan_writes_index(in, plan_with_shards(1)));
}

TEST(PlanWritesIndex, AnInputThatHadAnIndexKeepsOneEvenWithOneShard) {
  LoadedModel in;
  in.checkpoint.index.present = true;
  EXPECT_TRUE(plan_writes_index(in, plan_with_shards(1)));
}

TEST(PlanWritesIndex, SeveralShardsGetAnIndexSoThatLoadersFindTheirTensors) {
  LoadedModel in;
  EXPECT_TRUE(plan_writes_index(in, plan_with_shards(2)));
}

}  // namespace
}  // namespace ckpt

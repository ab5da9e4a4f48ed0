// The partition model (libconvert/deploy/partition_model.h): how an engine splits each
// module across TP / EP ranks, from the family data in schemas/deploy/partitions.json.
#include <gtest/gtest.h>

#include "deploy/partition_model.h"

namespace ckpt {
namespace {

TEST(PartitionModel, EveryFamilyOfTheDataParses) {
  ASSERT_GE(architecture_families().size(), 6u);
  for (const char* t : {"deepseek_v3", "deepseek_v4", "qwen3_moe", "qwen3_next", "gpt_oss", "llama", "mistral", "phi3"})
    EXPECT_NE(architecture_for(t), nullptr) << t;
  for (const auto& f : architecture_families())
    for (const auto& m : f.modules) EXPECT_NE(m.split, Split::none) << f.family << " " << m.match;
}

TEST(PartitionModel, ModuleClassesComeFromTheFamilyData) {
  const ArchitectureRules* q = architecture_for("qwen3_moe");
  ASSERT_NE(q, nullptr);
  const ModuleRule* r = classify_module(*q, module_of("model.layers.3.mlp.experts.7.gate_proj.weight"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->split, Split::expert_column);
  EXPECT_EQ(r->merged, "gate_up");
  r = classify_module(*q, module_of("model.layers.3.mlp.gate.weight"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->split, Split::replicated);  // the router, not gate_proj
  r = classify_module(*q, module_of("model.layers.3.self_attn.o_proj.weight_scale_inv"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->split, Split::row);
  const ArchitectureRules* d = architecture_for("deepseek_v3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(classify_module(*d, "model.layers.0.self_attn.kv_a_proj_with_mqa")->split, Split::replicated);
  EXPECT_EQ(classify_module(*d, "model.layers.5.mlp.shared_experts.down_proj")->split, Split::row);
  std::string role;
  EXPECT_EQ(module_of("model.layers.0.mlp.experts.gate_up_proj_blocks", &role), "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(role, "weight");
  EXPECT_EQ(layer_of("model.layers.12.mlp.gate.weight"), 12);
  EXPECT_EQ(layer_of("lm_head.weight"), -1);
}

TEST(PartitionModel, ColumnSplitsRowsAndRowSplitsColumns) {
  const Deployment d{8, 1, 1};
  auto c = partition_tensor(Split::column, {8192, 4096}, d, {});
  EXPECT_EQ(c.rank_rows, 1024u);
  EXPECT_EQ(c.rank_cols, 4096u);
  auto r = partition_tensor(Split::row, {4096, 8192}, d, {});
  EXPECT_EQ(r.rank_rows, 4096u);
  EXPECT_EQ(r.rank_cols, 1024u);
  auto rep = partition_tensor(Split::replicated, {576, 7168}, d, {});
  EXPECT_EQ(rep.rank_rows, 576u);
  EXPECT_EQ(rep.degree, 1u);
  auto bad = partition_tensor(Split::column, {100, 64}, d, {});
  EXPECT_FALSE(bad.problem.empty());
}

TEST(PartitionModel, KvHeadsAreReplicatedWhenFewerThanTp) {
  const HeadGeometry h{64, 4, 128};
  auto k8 = partition_tensor(Split::column_kv, {512, 4096}, {8, 1, 1}, h);
  ASSERT_EQ(k8.parts.size(), 1u);
  EXPECT_EQ(k8.rank_rows, 128u);  // one head of 128 on each rank
  EXPECT_EQ(k8.parts[0].replicas, 2u);
  auto k2 = partition_tensor(Split::column_kv, {512, 4096}, {2, 1, 1}, h);
  EXPECT_EQ(k2.rank_rows, 256u);
  EXPECT_EQ(k2.parts[0].replicas, 1u);
}

TEST(PartitionModel, ExpertsAreWholePerRankUnderEpAndSplitByIntermediateWithout) {
  auto tp = partition_tensor(Split::expert_column, {1536, 4096}, {8, 1, 1}, {});
  EXPECT_EQ(tp.rank_rows, 192u);
  auto ep = partition_tensor(Split::expert_column, {1536, 4096}, {8, 8, 1}, {});
  EXPECT_EQ(ep.rank_rows, 1536u);
  EXPECT_EQ(ep.degree, 1u);
  auto half = partition_tensor(Split::expert_row, {4096, 1536}, {8, 2, 1}, {});
  EXPECT_EQ(half.degree, 4u);  // tp / ep
  EXPECT_EQ(half.rank_cols, 384u);
  // gpt-oss: every expert in one tensor, [E, 2I, ...]: EP divides the experts.
  auto fused = partition_tensor(Split::expert_fused_column, {32, 5760, 2880}, {4, 4, 1}, {}, 2880);
  EXPECT_EQ(fused.experts, 32u);
  EXPECT_EQ(fused.experts_per_rank, 8u);
  EXPECT_EQ(fused.rank_rows, 5760u);
}

TEST(PartitionModel, FusedQkvSplitsEachPart) {
  const HeadGeometry h{4, 1, 32};
  auto t = partition_tensor(Split::fused_qkv, {192, 128}, {1, 1, 1}, h);
  ASSERT_EQ(t.parts.size(), 3u);
  EXPECT_EQ(t.parts[0].size, 128u);
  EXPECT_EQ(t.parts[1].begin, 128u);
  EXPECT_EQ(t.parts[1].size, 32u);
  EXPECT_EQ(t.parts[2].begin, 160u);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

TEST(PartitionModel, ADegreeIsAtLeastOneWhateverTheRequest) {
  for (Deployment d : {Deployment{0, 1, 1}, Deployment{2, 8, 1}, Deployment{0, 0, 0}}) {
    auto c = partition_tensor(Split::column, {128, 64}, d, {});
    EXPECT_GE(c.degree, 1u);
    auto e = partition_tensor(Split::expert_row, {64, 128}, d, {});
    EXPECT_GE(e.degree, 1u);
  }
}

}  // namespace
}  // namespace ckpt

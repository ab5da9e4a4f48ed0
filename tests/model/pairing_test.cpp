#include "model/pairing.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include <gtest/gtest.h>
#include <simdjson.h>

#include "test_util.h"

namespace ckpt {
namespace {

using test::fixture;


std::string dump(const Findings& f) {
  std::string s;
  for (const auto& x : f.items())
    s += std::string(severity_name(x.severity)) + " " + x.code + " " + x.file + " " + x.tensor + ": " + x.message +
         "\n";
  return s;
}

TEST(Pairing, Dsv4EdgeGenericGivesExactlyOneError) {
  auto loaded = test::load_model_checked(fixture("oracle/dsv4-edge"));
  const ModelView& v = loaded->view;
  Findings f;
  check_fp8_pairing(v, PairingOptions{}, f);
  ASSERT_EQ(f.count(Severity::error), 1u) << dump(f);
  const Finding* err = nullptr;
  for (const auto& x : f.items())
    if (x.severity == Severity::error) err = &x;
  EXPECT_EQ(err->code, "FP8_UNPAIRED");
  EXPECT_EQ(err->tensor, "layers.0.attn.small_scale");
  EXPECT_EQ(err->file, "model-00001-of-00002.safetensors");
  EXPECT_NE(err->message.find("layers.0.attn.small_scale.scale"), std::string::npos) << err->message;
  // split_pair's scale lives in the other shard: a warning naming both files.
  ASSERT_EQ(f.count_code("SCALE_CROSS_SHARD"), 1u) << dump(f);
  for (const auto& x : f.items())
    if (x.code == "SCALE_CROSS_SHARD") {
      EXPECT_EQ(x.tensor, "layers.0.attn.split_pair.weight");
      EXPECT_NE(x.message.find("model-00002-of-00002.safetensors"), std::string::npos) << x.message;
      EXPECT_NE(x.message.find("model-00001-of-00002.safetensors"), std::string::npos) << x.message;
    }
}

TEST(Pairing, Dsv4EdgeWithBareNamesAllowedPasses) {
  auto loaded = test::load_model_checked(fixture("oracle/dsv4-edge"));
  const ModelView& v = loaded->view;
  PairingOptions o;
  o.allow_bare_fp8_names = true;
  Findings f;
  check_fp8_pairing(v, o, f);
  EXPECT_EQ(f.count(Severity::error), 0u) << dump(f);
}

TEST(Pairing, Dsv3TinyWeightScaleInvPasses) {
  auto loaded = test::load_model_checked(fixture("oracle/dsv3-tiny"));
  const ModelView& v = loaded->view;
  Findings f;
  check_fp8_pairing(v, PairingOptions{}, f);
  EXPECT_EQ(f.items().size(), 0u) << dump(f);
}

TEST(Pairing, Dsv4TinyPassesAndFailsWithWrongBlockSize) {
  auto loaded = test::load_model_checked(fixture("oracle/dsv4-tiny"));
  const ModelView& v = loaded->view;
  Findings ok;
  check_fp8_pairing(v, PairingOptions{}, ok);
  EXPECT_EQ(ok.items().size(), 0u) << dump(ok);
  PairingOptions o32;
  o32.block_rows = o32.block_cols = 32;
  Findings bad;
  check_fp8_pairing(v, o32, bad);
  EXPECT_GT(bad.count_code("SCALE_GRID_MISMATCH"), 0u);
  EXPECT_EQ(bad.count(Severity::error), bad.count_code("SCALE_GRID_MISMATCH"));
}

// QW's output on dsv4-edge keeps BF16 leftovers of scales it could not pair.
TEST(Pairing, QwEdgeOutputHasStrayScales) {
  auto loaded = test::load_model_checked(fixture("oracle/dsv4-edge.qw-bf16"));
  const ModelView& v = loaded->view;
  Findings f;
  check_fp8_pairing(v, PairingOptions{}, f);
  EXPECT_GE(f.count_code("SCALE_STRAY"), 1u) << dump(f);
  bool split = false;
  for (const auto& x : f.items()) split |= x.code == "SCALE_STRAY" && x.tensor == "layers.0.attn.split_pair.scale";
  EXPECT_TRUE(split) << dump(f);
}

// ---- table of hand-made views: one defect per row.

struct T {
  const char* name;
  const char* dtype;
  std::vector<uint64_t> shape;
  uint32_t file = 0;
};

struct Case {
  const char* what;
  std::vector<T> tensors;
  const char* code;  // nullptr: no findings at all
  bool allow_bare = false;
};

ModelView make_view(const std::vector<T>& ts) {
  ModelView v;
  v.files = {"a.safetensors", "b.safetensors"};
  for (const auto& t : ts) {
    ModelTensor m;
    m.name = t.name;
    m.type = t.dtype;
    m.dtype = dtype_from_name(t.dtype);
    m.shape = t.shape;
    m.file = t.file;
    v.add(std::move(m));
  }
  return v;
}

TEST(Pairing, DefectTable) {
  const Case cases[] = {
      {"ragged rows accepted", {{"w.weight", "F8_E4M3", {200, 256}}, {"w.scale", "F8_E8M0", {2, 2}}}, nullptr},
      {"ragged both accepted", {{"w.weight", "F8_E4M3", {129, 300}}, {"w.scale", "F8_E8M0", {2, 3}}}, nullptr},
      {"V3 shape accepted", {{"w.weight", "F8_E4M3", {576, 7168}}, {"w.weight_scale_inv", "F32", {5, 56}}}, nullptr},
      {"floor grid rejected", {{"w.weight", "F8_E4M3", {200, 256}}, {"w.scale", "F8_E8M0", {1, 2}}},
       "SCALE_GRID_MISMATCH"},
      {"grid too large", {{"w.weight", "F8_E4M3", {256, 256}}, {"w.scale", "F8_E8M0", {2, 3}}}, "SCALE_GRID_MISMATCH"},
      {"grid not 2-D", {{"w.weight", "F8_E4M3", {256, 256}}, {"w.scale", "F8_E8M0", {4}}}, "SCALE_GRID_MISMATCH"},
      {"missing scale", {{"w.weight", "F8_E4M3", {256, 256}}}, "FP8_UNPAIRED"},
      {"bare name, allowed, no scale", {{"w", "F8_E4M3", {128, 128}}}, "FP8_UNPAIRED", true},
      {"stray E8M0 scale", {{"w.scale", "F8_E8M0", {2, 2}}}, "SCALE_STRAY"},
      {"stray scale_inv", {{"w.weight_scale_inv", "F32", {2, 2}}}, "SCALE_STRAY"},
      {"BF16 leftover beside BF16 weight", {{"w.weight", "BF16", {256, 256}}, {"w.scale", "BF16", {2, 2}}},
       "SCALE_STRAY"},
      {"unrelated .scale is ignored", {{"norm.scale", "F32", {64}}}, nullptr},
      {"scale dtype BF16", {{"w.weight", "F8_E4M3", {256, 256}}, {"w.scale", "BF16", {2, 2}}}, "SCALE_DTYPE"},
      {"scale_inv dtype E8M0", {{"w.weight", "F8_E4M3", {256, 256}}, {"w.weight_scale_inv", "F8_E8M0", {2, 2}}},
       "SCALE_DTYPE"},
      {"FP8 weight 3-D", {{"w.weight", "F8_E4M3", {2, 128, 128}}, {"w.scale", "F8_E8M0", {1, 1}}}, "FP8_NOT_2D"},
      {"cross shard is a warning", {{"w.weight", "F8_E4M3", {128, 128}, 0}, {"w.scale", "F8_E8M0", {1, 1}, 1}},
       "SCALE_CROSS_SHARD"},
      {"expert ok",
       {{"layers.3.ffn.experts.17.w2.weight", "I8", {4096, 1024}}, {"layers.3.ffn.experts.17.w2.scale", "F8_E8M0", {4096, 64}}},
       nullptr},
      {"expert scale missing", {{"mtp.0.ffn.experts.0.w1.weight", "I8", {2048, 2048}}}, "MXFP4_SCALE_MISSING"},
      {"expert scale shape",
       {{"layers.0.ffn.experts.0.w3.weight", "I8", {2048, 2048}}, {"layers.0.ffn.experts.0.w3.scale", "F8_E8M0", {2048, 64}}},
       "MXFP4_SCALE_SHAPE"},
      {"expert ragged group",
       {{"layers.0.ffn.experts.0.w1.weight", "I8", {64, 24}}, {"layers.0.ffn.experts.0.w1.scale", "F8_E8M0", {64, 1}}},
       "MXFP4_SCALE_SHAPE"},
      {"expert scale dtype",
       {{"layers.0.ffn.experts.0.w1.weight", "I8", {64, 128}}, {"layers.0.ffn.experts.0.w1.scale", "U8", {64, 8}}},
       "SCALE_DTYPE"},
      {"non-expert I8 ignored", {{"layers.0.ffn.gate.weight", "I8", {8, 8}}}, nullptr},
  };
  for (const auto& c : cases) {
    ModelView v = make_view(c.tensors);
    PairingOptions o;
    o.allow_bare_fp8_names = c.allow_bare;
    Findings f;
    check_fp8_pairing(v, o, f);
    if (!c.code) {
      EXPECT_EQ(f.items().size(), 0u) << c.what << "\n" << dump(f);
    } else {
      EXPECT_EQ(f.items().size(), 1u) << c.what << "\n" << dump(f);
      EXPECT_TRUE(f.has_code(c.code)) << c.what << "\n" << dump(f);
    }
  }
}

TEST(Pairing, ZeroBlockSizeIsAnErrorNotADivision) {
  ModelView v = make_view({{"w.weight", "F8_E4M3", {128, 128}}, {"w.scale", "F8_E8M0", {1, 1}}});
  PairingOptions o;
  o.block_rows = 0;
  Findings f;
  check_fp8_pairing(v, o, f);
  EXPECT_TRUE(f.has_errors());
}

}  // namespace
}  // namespace ckpt

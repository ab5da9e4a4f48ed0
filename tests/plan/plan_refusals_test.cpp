// What the plan refuses rather than writes: an output name made twice across shards, a
// quantized layout no profile describes, MXFP4 blocks whose header claims work its bytes do
// not hold (the config rewrite's refusal is in config_rewrite_test.cpp).
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "../model/tiny_checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;
const char* const kGptOss = R"({"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"}})";

// A gpt-oss X_blocks in one shard and a BF16 X in another: the base exited 0 and wrote X twice.
TEST(PlanRefusals, AnOutputNameMadeTwiceAcrossShardsIsAFindingNamingBothSources) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  const std::string x = "model.layers.0.mlp.experts.down_proj";
  test::write_tiny_checkpoint(in, kGptOss,
                              {{{x + "_blocks", "U8", {1, 2, 1, 16}, std::vector<uint8_t>(32, 0x22)},
                                {x + "_scales", "U8", {1, 2, 1}, {127, 127}}},
                               {{x, "BF16", {1, 32, 2}, std::vector<uint8_t>(128, 0)}}});
  auto r = test::run_ckpt("convert -q --experts bf16 " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string text = r.out + r.err;
  EXPECT_NE(text.find("CONVERT_PLAN"), std::string::npos) << text;
  EXPECT_NE(text.find("two output tensors would be named " + x + ":"), std::string::npos) << text;
  EXPECT_NE(text.find(x + "_blocks of model-00001-of-00002.safetensors (dequantized)"), std::string::npos) << text;
  EXPECT_NE(text.find(x + " of model-00002-of-00002.safetensors (copied)"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(out + "/model-00001-of-00002.safetensors"));
}

// 304 bytes whose X_blocks is [100000000, 0, 1, 16]: the base validated it, then convert
// --experts bf16 made one work unit per expert and died with std::bad_alloc.
TEST(PlanRefusals, Mxfp4BlocksWithAnEmptyDimensionAreRefusedNotExpandedPerExpert) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  const std::string x = "model.layers.0.mlp.experts.gate_up_proj";
  test::write_tiny_checkpoint(in, kGptOss,
                              {{{x + "_blocks", "U8", {100000000, 0, 1, 16}, {}},
                                {x + "_scales", "U8", {100000000, 0, 1}, {}}}});
  auto v = test::run_ckpt("validate --deep " + q(in));
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("MXFP4_SCALE_SHAPE"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("a dimension of 0 holds no weight"), std::string::npos) << v.out;
  auto c = test::run_ckpt("convert -q --experts bf16 " + q(in) + " " + q(out));
  EXPECT_EQ(c.exit_code, 1) << c.out << c.err;  // a finding, not a crash
  EXPECT_EQ(c.err.find("bad_alloc"), std::string::npos) << c.err;
  test::dump_fuzz_seed("safetensors_header", "gpt-oss blocks of 1e8 empty experts",
                       test::read_file(in + "/model.safetensors"));
}

// An NVFP4-style model without its quantization config: U8 weights, F8_E4M3 weight_scale,
// F32 weight_scale_2. The base passed validate --deep, then convert copied the scales and
// wrote an FP8 quantization_config (scale_fmt ue8m0, weight_block_size) the input never had.
TEST(PlanRefusals, AQuantizedLayoutNoProfileDescribesIsRefusedByValidateAndConvert) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  const std::string m = "model.layers.0.mlp.up_proj";
  test::write_tiny_checkpoint(in, R"({"model_type": "llama", "torch_dtype": "bfloat16"})",
                              {{{m + ".weight", "U8", {4, 16}, std::vector<uint8_t>(64, 0x21)},
                                {m + ".weight_scale", "F8_E4M3", {4, 2}, std::vector<uint8_t>(8, 0x38)},
                                {m + ".weight_scale_2", "F32", {}, test::f32_bytes({0.5f})},
                                {m + ".input_scale", "F32", {}, test::f32_bytes({1.0f})},
                                {"model.norm.weight", "BF16", {4}, std::vector<uint8_t>(8, 0x3F)}}});
  auto v = test::run_ckpt("validate --deep " + q(in));
  EXPECT_EQ(v.exit_code, 1) << v.out;
  EXPECT_NE(v.out.find("QUANT_LAYOUT_UNKNOWN"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(m + ".weight_scale]"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(m + ".weight_scale_2]"), std::string::npos) << v.out;
  auto c = test::run_ckpt("convert -q " + q(in) + " " + q(out));
  EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
  test::dump_fuzz_seed("safetensors_header", "nvfp4 layout without config", test::read_file(in + "/model.safetensors"));
}

}  // namespace
}  // namespace ckpt

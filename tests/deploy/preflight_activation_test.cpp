// Block FP8 with static activation scales (quantization_config.activation_scheme "static"):
// vLLM and SGLang refuse the config at start-up whatever the degrees (engines.json
// block_rules activation_scheme, with its sources), so preflight blocks at TP 1, names the
// fix (convert to BF16), and relayout, which keeps the quantization, refuses it.
#include <filesystem>

#include <gtest/gtest.h>

#include "deploy/preflight.h"
#include "formats/json.h"
#include "relayout/relayout.h"
#include "test_util.h"

namespace ckpt {
namespace {

// families/dsv3-fp8 (block FP8, 128 x 128) with its activation_scheme set to `scheme`.
std::string with_scheme(const test::TempDir& tmp, const std::string& scheme) {
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("families/dsv3-fp8/in"), in);
  std::string config = test::read_text(in + "/config.json");
  const std::string dynamic = "\"activation_scheme\": \"dynamic\"";
  const auto at = config.find(dynamic);
  EXPECT_NE(at, std::string::npos) << config;
  if (at != std::string::npos) config.replace(at, dynamic.size(), "\"activation_scheme\": \"" + scheme + "\"");
  test::write_text(in + "/config.json", config);
  return in;
}

PreflightReport run(const std::string& path, std::vector<std::string> engines) {
  PreflightOptions o;
  o.deployment = {1, 1, 1};
  o.engines = std::move(engines);
  return preflight(path, o);
}

TEST(PreflightActivation, StaticActivationWithBlockFp8IsRefusedByTheEnginesThatRefuseItAtEveryDegree) {
  test::TempDir tmp;
  const std::string in = with_scheme(tmp, "static");
  const PreflightReport r = run(in, {"vllm", "sglang", "transformers"});
  ASSERT_TRUE(r.findings.has_code("PREFLIGHT_ACTIVATION_SCHEME")) << test::describe(r.findings);
  const std::string all = test::describe(r.findings);
  EXPECT_NE(all.find("only supports dynamic activation scheme"), std::string::npos) << all;
  EXPECT_NE(all.find("ckpt convert IN OUT"), std::string::npos) << all;
  EXPECT_NE(all.find("fp8.py:"), std::string::npos) << all;  // the engine line it mirrors
  ASSERT_EQ(r.per_engine.size(), 3u);
  EXPECT_FALSE(r.per_engine[0].loads);
  EXPECT_EQ(r.per_engine[0].why, "PREFLIGHT_ACTIVATION_SCHEME");
  EXPECT_FALSE(r.per_engine[1].loads);
  EXPECT_EQ(r.per_engine[1].why, "PREFLIGHT_ACTIVATION_SCHEME");
  EXPECT_FALSE(r.loads());
}

TEST(PreflightActivation, DynamicActivationIsNoFinding) {
  test::TempDir tmp;
  const PreflightReport r = run(with_scheme(tmp, "dynamic"), {"vllm", "sglang"});
  EXPECT_FALSE(r.findings.has_code("PREFLIGHT_ACTIVATION_SCHEME")) << test::describe(r.findings);
  EXPECT_TRUE(r.loads()) << test::describe(r.findings);
}

TEST(PreflightActivation, RelayoutRefusesWhatNoLayoutMends) {
  test::TempDir tmp;
  RelayoutOptions o;
  o.input = with_scheme(tmp, "static");
  o.output = tmp.str("out");
  o.deployment = {2, 1, 1};
  const RelayoutReport r = relayout_checkpoint(o);
  EXPECT_NE(relayout_outcome(r), Outcome::ok);
  EXPECT_TRUE(r.findings.has_code("PREFLIGHT_ACTIVATION_SCHEME")) << test::describe(r.findings);
  EXPECT_TRUE(r.findings.has_code("RELAYOUT_INPUT")) << test::describe(r.findings);
  EXPECT_FALSE(std::filesystem::exists(tmp.str("out")));
}

}  // namespace
}  // namespace ckpt

// `ckpt preflight` end to end: the seed's DeepSeek-V4-Flash layout (FP8 dense + MXFP4
// experts) has no kernels on an A100 (sm80); ckptkit's own `convert --experts bf16` output
// has. Exit codes 0 / 1 / 2 / 3 and the JSON report on stdout.
#include <gtest/gtest.h>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::run_ckpt;
using test::shell_quote;

TEST(PreflightCli, SynthDsv4TinyFailsSm80NamingTheConversionAndItsBf16ConversionPasses) {
  test::TempDir tmp;
  const std::string in = tmp.str("dsv4"), out = tmp.str("dsv4-bf16");
  ASSERT_EQ(run_ckpt("synth deepseek-v4-flash-0731 --tiny -q " + shell_quote(in)).exit_code, 0);
  auto seed = run_ckpt("preflight --gpu sm80 " + shell_quote(in));
  EXPECT_EQ(seed.exit_code, 1) << seed.out << seed.err;
  EXPECT_NE(seed.out.find("PREFLIGHT_KERNEL"), std::string::npos) << seed.out;
  EXPECT_NE(seed.out.find("sm80 has no kernel for MXFP4"), std::string::npos) << seed.out;
  EXPECT_NE(seed.out.find("ckpt convert --experts bf16 IN OUT"), std::string::npos) << seed.out;
  // Block FP8 has a weight-only Marlin path on sm80 in both engines: not refused, listed.
  EXPECT_EQ(seed.out.find("sm80 has no kernel for FP8 E4M3 weights with 2-D block scales"), std::string::npos) << seed.out;
  EXPECT_NE(seed.out.find("kernel sm80 fp8_block sglang: fallback via Marlin FP8"), std::string::npos) << seed.out;
  // Engines differ: vLLM has weight-only Marlin kernels for both formats on sm80.
  EXPECT_NE(seed.out.find("  vllm: loads"), std::string::npos) << seed.out;
  EXPECT_NE(seed.out.find("  sglang: does not load right (PREFLIGHT_KERNEL)"), std::string::npos) << seed.out;
  // The same checkpoint on a Hopper GPU loads.
  auto hopper = run_ckpt("preflight --gpu sm90 " + shell_quote(in));
  EXPECT_EQ(hopper.exit_code, 0) << hopper.out << hopper.err;
  ASSERT_EQ(run_ckpt("convert -q --experts bf16 " + shell_quote(in) + " " + shell_quote(out)).exit_code, 0);
  auto converted = run_ckpt("preflight --gpu sm80 " + shell_quote(out));
  EXPECT_EQ(converted.exit_code, 0) << converted.out << converted.err;
  EXPECT_NE(converted.out.find("preflight: LOADS at tp 1 on sm80"), std::string::npos) << converted.out;
}

TEST(PreflightCli, ExitCodesAndTheJsonReport) {
  const std::string q235 = shell_quote(test::fixture("preflight/qwen3-235b-a22b-fp8"));
  auto blocked = run_ckpt("preflight --tp 8 --json - " + q235);
  EXPECT_EQ(blocked.exit_code, 1) << blocked.err;
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(blocked.out, error)) << error << blocked.out;
  EXPECT_EQ(json_string(doc.root(), "schema").value_or(""), "ckptkit/preflight-report/v1");
  EXPECT_EQ(json_string(doc.root(), "source").value_or(""), "config");
  bool loads = true;
  ASSERT_EQ(doc.root()["loads"].get(loads), simdjson::SUCCESS);
  EXPECT_FALSE(loads);
  EXPECT_EQ(run_ckpt("preflight -q --tp 8 --ep 8 " + q235).exit_code, 0);
  EXPECT_EQ(run_ckpt("preflight --tp 8 --ep 3 " + q235).exit_code, 2);
  EXPECT_EQ(run_ckpt("preflight --gpu sm42 " + q235).exit_code, 2);
  EXPECT_EQ(run_ckpt("preflight --gpu-memory lots " + q235).exit_code, 2);
  EXPECT_EQ(run_ckpt("preflight --engine tensorrt " + q235).exit_code, 2);
  EXPECT_EQ(run_ckpt("preflight /nonexistent/checkpoint").exit_code, 3);
  auto quiet = run_ckpt("preflight -q --tp 2 --gpu-memory 80G " + q235);
  EXPECT_EQ(quiet.exit_code, 1);
  EXPECT_NE(quiet.err.find("PREFLIGHT_MEMORY"), std::string::npos) << quiet.err;
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

TEST(PreflightCli, ValidateWithTpOrGpuRunsThePreflightChecks) {
  const std::string q = test::shell_quote(test::fixture("families/qwen3moe-fp8/in"));
  auto plain = test::run_ckpt("validate " + q);
  EXPECT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  // Two KV heads of 64 rows at TP 4: one head a rank, half a 128-row block.
  auto tp4 = test::run_ckpt("validate --tp 4 --max-findings 0 " + q);
  EXPECT_EQ(tp4.exit_code, 1) << tp4.out << tp4.err;
  EXPECT_NE((tp4.out + tp4.err).find("PREFLIGHT_"), std::string::npos) << tp4.out << tp4.err;
  EXPECT_EQ(test::run_ckpt("validate --tp 1 " + q).exit_code, 0);
  auto sm80 = test::run_ckpt("validate --gpu sm80 --max-findings 0 " + test::shell_quote(test::fixture("oracle/dsv4-tiny")));
  EXPECT_EQ(sm80.exit_code, 1);
  EXPECT_NE((sm80.out + sm80.err).find("PREFLIGHT_KERNEL"), std::string::npos) << sm80.out << sm80.err;
  EXPECT_EQ(test::run_ckpt("validate --gpu sm42 " + q).exit_code, 2);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// ckptkit's own INT8-shift expert layout runs only in the deployment's SGLang patch.
TEST(PreflightCli, TheInt8ShiftLayoutLoadsInSglangOnlyOnSm80) {
  test::TempDir tmp;
  const std::string out = tmp.str("i8");
  ASSERT_EQ(test::run_ckpt("convert -q --experts int8-shift " + test::shell_quote(test::fixture("oracle/dsv4-tiny")) + " " +
                           test::shell_quote(out)).exit_code, 0);
  auto both = test::run_ckpt("preflight --gpu sm80 " + test::shell_quote(out));
  EXPECT_EQ(both.exit_code, 1) << both.out;
  EXPECT_NE(both.out.find("kernel sm80 int8_shift vllm: refused"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("  sglang: loads"), std::string::npos) << both.out;
  EXPECT_EQ(test::run_ckpt("preflight -q --gpu sm80 --engine sglang " + test::shell_quote(out)).exit_code, 0);
}

}  // namespace
}  // namespace ckpt

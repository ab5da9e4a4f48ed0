// The ckpt binary as users and scripts see it: exit codes, verdict line, JSON
// output, and the real-size synthetic 0731 checkpoint.
#include <algorithm>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

JsonDoc parse_json(const std::string& text) {
  JsonDoc doc;
  std::string error;
  EXPECT_TRUE(doc.parse(text, error)) << error << "\n" << text.substr(0, 500);
  return doc;
}

TEST(Cli, ExitCodesAreTheDocumentedOnes) {
  EXPECT_EQ(test::run_ckpt("--version").exit_code, 0);
  EXPECT_EQ(test::run_ckpt("").exit_code, 2);
  EXPECT_EQ(test::run_ckpt("validate").exit_code, 2);
  EXPECT_EQ(test::run_ckpt("validate --no-such-flag x").exit_code, 2);
  EXPECT_EQ(test::run_ckpt("validate --profile no-such-profile " + q(test::fixture("oracle/dsv4-tiny"))).exit_code, 2);
  auto missing = test::run_ckpt("validate /nonexistent/ckpt");
  EXPECT_EQ(missing.exit_code, 3) << missing.out << missing.err;
  auto ok = test::run_ckpt("validate " + q(test::fixture("oracle/dsv4-tiny")));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("VERDICT: PASS"), std::string::npos) << ok.out;
  auto bad = test::run_ckpt("validate --profile generic " + q(test::fixture("oracle/dsv4-edge")));
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("FP8_UNPAIRED"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("VERDICT: FAIL"), std::string::npos) << bad.out;
}

TEST(Cli, QuietPrintsOnlyTheVerdict) {
  auto r = test::run_ckpt("validate -q " + q(test::fixture("oracle/dsv3-tiny")));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("VERDICT: PASS", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

TEST(Cli, ValidateJsonReport) {
  auto r = test::run_ckpt("validate --deep --sha256 --json - " + q(test::fixture("ggml/qwen3next-tiny.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto doc = parse_json(r.out);
  EXPECT_EQ(json_string(doc.root(), "schema"), "ckptkit/validation-report/v1");
  EXPECT_EQ(json_string(doc.root(), "profile"), "qwen3next");
  auto summary = json_get(doc.root(), "summary");
  ASSERT_TRUE(summary);
  EXPECT_EQ(json_string(*summary, "verdict"), "pass");
  EXPECT_EQ(json_int(*summary, "tensors"), 51);
  EXPECT_EQ(json_int(*summary, "bytes_read"), 7895936);
}

TEST(Cli, InspectJsonReportsTheStructureHash) {
  auto r = test::run_ckpt("inspect --json " + q(test::fixture("oracle/dsv4-tiny")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = parse_json(r.out);
  EXPECT_EQ(json_int(doc.root(), "tensors"), 416);
  EXPECT_EQ(json_int(doc.root(), "files"), 7);
  EXPECT_EQ(json_int(doc.root(), "payload_bytes"), 5175259);
  // Independently computed with Python's json.dumps(sort_keys=True) over the headers.
  EXPECT_EQ(json_string(doc.root(), "structure_sha256"),
            "faa0e66be4285d5520f7bd7f22f673558e05494402d228498be76fb2d4a410e0");
  EXPECT_EQ(json_string(doc.root(), "architecture"), "DeepseekV4ForCausalLM");
  auto human = test::run_ckpt("inspect " + q(test::fixture("ggml/qwen3next-tiny.gguf")));
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.out.find("qwen3next"), std::string::npos);
  EXPECT_NE(human.out.find("IQ3_S"), std::string::npos);
}

TEST(Cli, Synth0731SparseHasTheReleaseStructure) {
  test::TempDir tmp;
  std::string out = tmp.str("dsv4-0731");
  auto s = test::run_ckpt("synth deepseek-v4-flash-0731 " + q(out) + " --sparse");
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  auto r = test::run_ckpt("inspect --json " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = parse_json(r.out);
  EXPECT_EQ(json_int(doc.root(), "tensors"), 72317);
  EXPECT_EQ(json_int(doc.root(), "files"), 48);
  EXPECT_EQ(json_int(doc.root(), "payload_bytes"), 166878536440);
  EXPECT_EQ(json_string(doc.root(), "structure_sha256"),
            "18285fe60ca3655be488bbabb88b59489b8ee03cff7fc4f4729424051ca83e0e");
  auto v = test::run_ckpt("validate " + q(out));
  EXPECT_EQ(v.exit_code, 0) << v.out.substr(0, 4000);
}

TEST(Cli, SynthTinyValidatesDeep) {
  test::TempDir tmp;
  std::string out = tmp.str("tiny");
  ASSERT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(out) + " --tiny").exit_code, 0);
  auto v = test::run_ckpt("validate --deep " + q(out));
  EXPECT_EQ(v.exit_code, 0) << v.out.substr(0, 4000);
  EXPECT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(tmp.str("x"))).exit_code, 2);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// The chain for GGUF: repack, then the pack and its dense.gguf validate clean and
// the dense tensors dump exactly as in the source.
TEST(Cli, RepackedDenseGgufValidatesAndDumpsLikeTheSource) {
  test::TempDir tmp;
  std::string src = test::fixture("ggml/qwen3next-tiny.gguf"), pack = tmp.str("pack");
  ASSERT_EQ(test::run_ckpt("repack-experts -q " + q(src) + " " + q(pack)).exit_code, 0);
  auto dense = test::run_ckpt("validate --deep " + q(pack + "/dense.gguf"));
  EXPECT_EQ(dense.exit_code, 0) << dense.out;
  EXPECT_NE(dense.out.find("profile qwen3next"), std::string::npos) << dense.out;
  auto whole = test::run_ckpt("validate --deep --reference " + q(src) + " " + q(pack));
  EXPECT_EQ(whole.exit_code, 0) << whole.out;
  for (const char* name : {"token_embd.weight", "blk.0.attn_norm.weight", "blk.3.ffn_gate_inp.weight"}) {
    auto a = test::run_ckpt("dump " + q(src) + " " + name + " -o " + q(tmp.str("a")));
    auto b = test::run_ckpt("dump " + q(pack + "/dense.gguf") + " " + name + " -o " + q(tmp.str("b")));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(test::read_file(tmp.str("a")), test::read_file(tmp.str("b"))) << name;
  }
}

}  // namespace
}  // namespace ckpt

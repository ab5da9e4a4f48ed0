// validate --deep's value ranges (deepseek-v4.md §10.6): E8M0 scales of FP8 weights keep
// exponents -124..119, where FP8 x E8M0 is exact in BF16; hash-routing tables (tid2eid)
// hold expert ids in [0, n_routed_experts). Findings name tensor and element.
#include "validate/deep_scan.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

void poke(const std::string& dir, const std::string& tensor, uint64_t byte, const std::vector<uint8_t>& value) {
  auto m = test::load_model_checked(dir);
  const ModelTensor* t = m->view.find(tensor);
  ASSERT_NE(t, nullptr) << tensor;
  const std::string path = m->view.file_paths[t->file];
  const uint64_t at = t->offset + byte;
  m.reset();
  auto bytes = test::read_file(path);
  std::copy(value.begin(), value.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
  test::write_file(path, bytes);
}

const Finding* find(const Findings& f, const std::string& code) {
  for (const auto& x : f.items())
    if (x.code == code) return &x;
  return nullptr;
}

ValidationReport deep(const std::string& dir, bool on = true) {
  ValidateOptions o;
  o.deep = on;
  return validate_path(dir, o);
}

TEST(ValidateDeep, ScaleExponentOutsideTheExactRangeNamesTensorAndElement) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(find(deep(in).findings, "FP8_SCALE_RANGE"), nullptr);
  poke(in, "layers.0.attn.wo_b.scale", 2, {250});  // [2, 2]: element (1, 0)
  poke(in, "layers.0.attn.wo_b.scale", 3, {2});    // and (1, 1): BF16-subnormal products
  auto r = deep(in);
  const Finding* f = find(r.findings, "FP8_SCALE_RANGE");
  ASSERT_NE(f, nullptr) << test::describe(r.findings);
  EXPECT_EQ(f->severity, Severity::error);
  EXPECT_EQ(f->tensor, "layers.0.attn.wo_b.scale");
  EXPECT_NE(f->message.find("holds 2 exponents outside -124..119"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find("first at element 2 (row 1, column 0): byte 250 = 2^123"), std::string::npos) << f->message;
  EXPECT_EQ(find(deep(in, false).findings, "FP8_SCALE_RANGE"), nullptr) << "a payload check: --deep only";
  auto cli = test::run_ckpt("validate --deep " + q(in));
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.out.find("FP8_SCALE_RANGE"), std::string::npos) << cli.out;
}

TEST(ValidateDeep, Tid2eidOutsideTheExpertsNamesTensorAndElement) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(find(deep(in).findings, "EXPERT_ID_RANGE"), nullptr);
  // [512, 2] I64, n_routed_experts 8: element (5, 1) = 8 and (7, 0) = -1.
  poke(in, "layers.0.ffn.gate.tid2eid", 8 * (5 * 2 + 1), {8, 0, 0, 0, 0, 0, 0, 0});
  poke(in, "layers.0.ffn.gate.tid2eid", 8 * (7 * 2 + 0), std::vector<uint8_t>(8, 0xFF));
  auto r = deep(in);
  const Finding* f = find(r.findings, "EXPERT_ID_RANGE");
  ASSERT_NE(f, nullptr) << test::describe(r.findings);
  EXPECT_EQ(f->tensor, "layers.0.ffn.gate.tid2eid");
  EXPECT_NE(f->message.find("holds 2 expert ids outside [0, 8)"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find("first at element 11 (row 5, column 1): 8"), std::string::npos) << f->message;
}

}  // namespace
}  // namespace ckpt

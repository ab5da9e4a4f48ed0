// validate --reference compares every file beside the tensors (validate/reference.h
// compare_model_files): config.json member by member (only the documented rewrite may
// differ), every copied side file byte for byte, and an added or missing file is a finding.
#include <filesystem>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using test::describe;

// dsv3-tiny with the config members a loader reads and two side files convert copies.
class ReferenceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    test::copy_tree(test::fixture("oracle/dsv3-tiny"), in_);
    std::string cfg = test::read_text(in_ + "/config.json");
    cfg.replace(cfg.find("\"torch_dtype\""), 0,
                "\"num_hidden_layers\": 2,\n  \"rope_theta\": 10000.0,\n  \"vocab_size\": 129280,\n  ");
    test::write_text(in_ + "/config.json", cfg);
    test::write_text(in_ + "/generation_config.json", "{\"temperature\": 0.6, \"top_p\": 0.95}\n");
    test::write_text(in_ + "/tokenizer.json", "{\"version\": \"1.0\"}\n");
    ConvertOptions o;
    o.input = in_;
    o.output = out_;
    ASSERT_EQ(convert_checkpoint(o).status, ConvertStatus::ok);
  }
  ValidationReport check(bool deep = true) {
    ValidateOptions o;
    o.reference = in_;
    o.deep = deep;
    return validate_path(out_, o);
  }
  void replace_in(const std::string& file, const std::string& from, const std::string& to) {
    std::string text = test::read_text(out_ + "/" + file);
    ASSERT_NE(text.find(from), std::string::npos) << text;
    text.replace(text.find(from), from.size(), to);
    test::write_text(out_ + "/" + file, text);
  }

  test::TempDir tmp_;
  const std::string in_ = tmp_.str("in"), out_ = tmp_.str("out");
};

TEST_F(ReferenceFiles, AnUntouchedConversionHasNoFileFinding) {
  auto r = check();
  EXPECT_FALSE(r.findings.has_errors()) << describe(r.findings);
}

TEST_F(ReferenceFiles, ChangedConfigMembersAreFindingsNamingTheMember) {
  replace_in("config.json", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
  replace_in("config.json", "\"rope_theta\": 10000.0", "\"rope_theta\": 50000.0");
  replace_in("config.json", "\"vocab_size\": 129280,", "");  // dropped
  replace_in("config.json", "\"model_type\"", "\"max_position_embeddings\": 4096,\n  \"model_type\"");  // added
  auto r = check();
  const std::string text = describe(r.findings);
  EXPECT_TRUE(r.findings.has_code("REF_CONFIG")) << text;
  for (const char* member : {"num_hidden_layers is 3", "rope_theta is 5", "lacks vocab_size",
                             "has max_position_embeddings"})
    EXPECT_NE(text.find(member), std::string::npos) << member << "\n" << text;
}

TEST_F(ReferenceFiles, AChangedSideFileAndAnAddedFileAreFindings) {
  replace_in("generation_config.json", "0.6", "0.9");
  test::write_text(out_ + "/chat_template.jinja", "{{ messages }}");
  auto r = check(false);
  const std::string text = describe(r.findings);
  EXPECT_TRUE(r.findings.has_code("REF_SIDE_FILE")) << text;
  EXPECT_NE(text.find("generation_config.json differs from the input's at byte 18"), std::string::npos) << text;
  EXPECT_TRUE(r.findings.has_code("REF_EXTRA_FILE")) << text;
  EXPECT_NE(text.find("chat_template.jinja"), std::string::npos) << text;
}

TEST_F(ReferenceFiles, AMissingSideFileIsAFinding) {
  fs::remove(out_ + "/tokenizer.json");
  auto r = check(false);
  EXPECT_TRUE(r.findings.has_code("REF_MISSING_FILE")) << describe(r.findings);
  EXPECT_NE(describe(r.findings).find("tokenizer.json"), std::string::npos) << describe(r.findings);
}

TEST_F(ReferenceFiles, TheCliFailsOnAChangedGenerationConfig) {
  replace_in("generation_config.json", "0.95", "0.50");
  auto r = test::run_ckpt("validate --deep --reference " + test::shell_quote(in_) + " " + test::shell_quote(out_));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("REF_SIDE_FILE"), std::string::npos) << r.out << r.err;
}

// ckpt-gpu verify OUT --reference IN runs the same comparison (check_against_reference).
TEST_F(ReferenceFiles, TheVerifierFailsOnAChangedConfigMember) {
  replace_in("config.json", "\"vocab_size\": 129280", "\"vocab_size\": 129281");
  auto r = test::run_tool("ckpt-gpu", "", "verify --backend emulate " + test::shell_quote(out_) + " --reference " +
                                              test::shell_quote(in_));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("vocab_size"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace ckpt

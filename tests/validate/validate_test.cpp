// End-to-end validation of the fixtures written by other implementations: the
// valid ones pass under the auto-detected profile, the broken ones are named.
#include "validate/validate.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::string describe(const ValidationReport& r) {
  std::string s = r.profile + ": ";
  for (const auto& f : r.findings.items())
    s += std::string(severity_name(f.severity)) + " " + f.code + " " + f.file + " [" + f.tensor + "] " + f.message +
         "\n";
  return s;
}

ValidationReport run(const std::string& path, const std::string& profile = "auto", bool deep = false) {
  ValidateOptions o;
  o.profile = profile;
  o.deep = deep;
  return validate_path(path, o);
}

class FixtureValidates : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(FixtureValidates, WithNoErrorsUnderTheAutoProfile) {
  auto [rel, profile] = GetParam();
  for (bool deep : {false, true}) {
    auto r = run(test::fixture(rel), "auto", deep);
    EXPECT_EQ(r.profile, profile) << rel;
    EXPECT_EQ(r.findings.count(Severity::error), 0u) << rel << (deep ? " --deep\n" : "\n") << describe(r);
    EXPECT_FALSE(r.format.empty());
    if (deep) {
      for (const auto& t : r.tensors) EXPECT_EQ(t.xxh3.size(), 16u) << t.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Oracle, FixtureValidates,
    ::testing::Values(std::make_pair("oracle/dsv4-tiny", "deepseek-v4-flash"),
                      std::make_pair("oracle/dsv4-tiny.qw-bf16", "deepseek-v4-flash"),
                      std::make_pair("oracle/dsv3-tiny", "generic"),
                      std::make_pair("oracle/dsv3-tiny.v3-bf16", "generic"),
                      std::make_pair("ggml/qwen3next-tiny.gguf", "qwen3next"),
                      std::make_pair("external/gguf/llama-2-tiny-random.gguf", "generic"),
                      std::make_pair("external/gguf/llama-gguf-example-dummy.gguf", "generic"),
                      std::make_pair("external/gguf/ggml-vocab-gpt-2.gguf", "generic"),
                      std::make_pair("external/gguf/ggml-vocab-deepseek-coder.gguf", "generic"),
                      std::make_pair("external/gguf/ggml-vocab-bert-bge.gguf", "generic"),
                      std::make_pair("external/gguf/ggml-vocab-llama-spm.gguf", "generic"),
                      std::make_pair("external/gguf/ggml-vocab-phi-3.gguf", "generic"),
                      std::make_pair("external/safetensors/burn-mnist.safetensors", "generic"),
                      std::make_pair("external/safetensors/hf-samples/overall.safetensors", "generic")));

TEST(ValidateFixtures, EveryExternalFileButTheAbuseAttemptPasses) {
  size_t checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(test::fixture("external"))) {
    auto ext = e.path().extension();
    if (ext != ".safetensors" && ext != ".gguf") continue;
    auto r = run(e.path().string(), "auto", true);
    if (e.path().filename() == "syoyo-abuse-attempt-1.safetensors") {
      EXPECT_TRUE(r.findings.has_code("ST_HEADER_PAST_EOF")) << describe(r);
    } else {
      EXPECT_FALSE(r.findings.has_errors()) << e.path() << "\n" << describe(r);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 29u);  // external/README.md: 29 files
}

TEST(ValidateFixtures, EdgeUnderGenericReportsOnlyTheUnpairedFp8Tensor) {
  auto r = run(test::fixture("oracle/dsv4-edge"), "generic");
  ASSERT_EQ(r.findings.count(Severity::error), 1u) << describe(r);
  for (const auto& f : r.findings.items()) {
    if (f.severity == Severity::error) {
      EXPECT_EQ(f.code, "FP8_UNPAIRED");
      EXPECT_EQ(f.tensor, "layers.0.attn.small_scale");
    }
  }
}

TEST(ValidateFixtures, EdgeUnderAutoAlsoReportsMissingCatalogueTensors) {
  auto r = run(test::fixture("oracle/dsv4-edge"));
  EXPECT_EQ(r.profile, "deepseek-v4-flash");
  EXPECT_TRUE(r.findings.has_code("CAT_MISSING_TENSOR")) << describe(r);
  // The DeepSeek pairing rule pairs the bare FP8 name with its .scale.
  EXPECT_FALSE(r.findings.has_code("FP8_UNPAIRED")) << describe(r);
  // The split pair is resolved through the index, across shards: a warning, not an error.
  EXPECT_TRUE(r.findings.has_code("SCALE_CROSS_SHARD")) << describe(r);
}

TEST(ValidateFixtures, Sha256MatchesThePublishedDigests) {
  ValidateOptions o;
  o.sha256 = true;
  auto r = validate_path(test::fixture("external/gguf/llama-gguf-example-dummy.gguf"), o);
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].sha256, "7385b2af3ab26964fa7bde41d19a9d248f435dd716fcd21c72e8cbb0d1d920a8");
  auto s = validate_path(test::fixture("external/safetensors/burn-mnist.safetensors"), o);
  ASSERT_EQ(s.files.size(), 1u);
  EXPECT_EQ(s.files[0].sha256, "f23a34cfa782d2a61cf65d70d7813c7f4d4e9a1e79d81ee7bb0695dda1606fe4");
  EXPECT_EQ(s.bytes_read, 1509296u);
}

TEST(ValidateFixtures, HubHashListReportsOkMismatchMissingAndExtra) {
  test::TempDir tmp;
  std::string dir = tmp.str("ck");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), dir);
  auto one = test::read_file(dir + "/model-00001-of-00002.safetensors");
  std::string good = sha256_hex(std::string_view(reinterpret_cast<const char*>(one.data()), one.size()));
  test::write_text(tmp.str("hashes.txt"), "# from the Hub tree API\n"
                                          "model-00001-of-00002.safetensors " + good + "\n" +
                                          std::string(64, 'a') + "  model-00002-of-00002.safetensors\n" +
                                          "model-00003-of-00002.safetensors " + std::string(64, 'b') + "\n");
  ValidateOptions o;
  o.hub_sha256_file = tmp.str("hashes.txt");
  auto r = validate_path(dir, o);
  std::map<std::string, std::string> status;
  for (const auto& f : r.files) status[f.name] = f.hub_status;
  EXPECT_EQ(status["model-00001-of-00002.safetensors"], "ok");
  EXPECT_EQ(status["model-00002-of-00002.safetensors"], "mismatch");
  EXPECT_EQ(status["model-00003-of-00002.safetensors"], "missing");
  EXPECT_TRUE(r.findings.has_code("HUB_SHA256_MISMATCH"));
  EXPECT_TRUE(r.findings.has_code("HUB_FILE_MISSING"));
}

TEST(ValidateFixtures, DeepHashesAreStableAndPerTensor) {
  auto a = run(test::fixture("oracle/dsv4-tiny"), "auto", true);
  auto b = run(test::fixture("oracle/dsv4-tiny"), "auto", true);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_EQ(a.tensors[i].xxh3, b.tensors[i].xxh3);
  EXPECT_EQ(a.bytes_read, a.payload_bytes);
  EXPECT_EQ(a.payload_bytes, 5175259u);  // the index's metadata.total_size
}

}  // namespace
}  // namespace ckpt

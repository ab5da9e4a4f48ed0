// A JSON object that names a key twice means two things (simdjson answers the first value,
// Python's json keeps the last): every JSON document ckptkit reads for meaning is refused
// with the key and the path of its object, never read with either value.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/json.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

TEST(JsonDuplicateKey, AnObjectNamingAKeyTwiceIsAParseErrorNamingKeyAndPath) {
  JsonDoc doc;
  std::string err;
  EXPECT_FALSE(doc.parse(R"({"a": {"b": 1, "c": 2, "b": 3}})", err));
  EXPECT_NE(err.find("duplicate key \"b\" in /a"), std::string::npos) << err;
  EXPECT_FALSE(doc.parse(R"({"x": [0, {"k~/": 1, "k~/": 2}]})", err));
  EXPECT_NE(err.find("in /x/1"), std::string::npos) << err;
  EXPECT_FALSE(doc.parse(R"({"top": 1, "top": 1})", err));  // even with equal values
  EXPECT_NE(err.find("duplicate key \"top\" in /"), std::string::npos) << err;
  EXPECT_FALSE(doc.parse(R"({"a": {"b~c/d": {"z": 1, "z": 2}}})", err));
  EXPECT_NE(err.find("in /a/b~0c~1d"), std::string::npos) << err;  // RFC 6901 escaping
  EXPECT_TRUE(doc.parse(R"({"a": {"b": 1}, "b": {"a": 2}, "c": [{"b": 1}, {"b": 2}]})", err)) << err;
}

// config.json listing weight_block_size twice: the base converted with the first value,
// where transformers, vLLM and DeepSeek's script use the last.
TEST(JsonDuplicateKey, ConfigWithWeightBlockSizeTwiceIsRefusedByValidateAndConvert) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  std::string text = test::read_text(in + "/config.json");
  const size_t at = text.find("\"weight_block_size\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"weight_block_size\": [64, 64],\n    ");
  test::write_text(in + "/config.json", text);
  auto v = test::run_ckpt("validate " + q(in));
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("duplicate key \"weight_block_size\" in /quantization_config"), std::string::npos) << v.out;
  auto c = test::run_ckpt("convert -q " + q(in) + " " + q(out));
  EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
  EXPECT_NE((c.out + c.err).find("weight_block_size"), std::string::npos) << c.out << c.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/model-00001-of-00002.safetensors"));
  test::dump_fuzz_seed("config_dsv4", "duplicate weight_block_size", std::vector<uint8_t>(text.begin(), text.end()));
}

// The quantization side files (hf_quant_config.json, params.json) and the generation config
// are read through the same parse: a duplicate there is an error naming the file.
TEST(JsonDuplicateKey, SideConfigWithADuplicateKeyIsAnErrorNamingTheFile) {
  for (const char* name : {"hf_quant_config.json", "params.json", "generation_config.json"}) {
    SCOPED_TRACE(name);
    test::TempDir tmp;
    const std::string in = tmp.str("in");
    test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
    test::write_text(in + "/" + name, R"({"quantization": {"quant_algo": "FP8", "quant_algo": "NVFP4"}})");
    ValidationReport r = validate_path(in, ValidateOptions{});
    bool found = false;
    for (const auto& f : r.findings.items())
      if (f.severity == Severity::error && f.file == name &&
          f.message.find("duplicate key \"quant_algo\" in /quantization") != std::string::npos)
        found = true;
    EXPECT_TRUE(found) << test::describe(r.findings);
  }
}

// The index's own reader (on demand) already refused a second weight_map or metadata; a
// second metadata.total_size was taken silently.
TEST(JsonDuplicateKey, AnIndexListingTotalSizeTwiceIsRefused) {
  const std::string text = R"({"metadata": {"total_size": 10, "total_size": 20}, "weight_map": {"a": "model-00001-of-00001.safetensors"}})";
  CheckpointIndex index;
  Findings f;
  parse_index_text(text, index, f);
  EXPECT_FALSE(index.parsed);
  bool found = false;
  for (const auto& x : f.items())
    if (x.code == "IDX_DUPLICATE_KEY" && x.message.find("'total_size' twice") != std::string::npos) found = true;
  EXPECT_TRUE(found) << test::describe(f);
  test::dump_fuzz_seed("index_json", "duplicate total_size", std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace
}  // namespace ckpt

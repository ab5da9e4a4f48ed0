// quantization_config.weight_block_size is read, never assumed: a value that is present but
// not two positive integers is a config error naming it, in validate and convert alike.
#include "model/quant_config.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

WeightBlockSize parse(const std::string& value) {
  JsonDoc doc;
  std::string error;
  EXPECT_TRUE(doc.parse("{\"quantization_config\": {\"weight_block_size\": " + value + "}}", error)) << error;
  return read_weight_block_size(doc.root());
}

const char* const kMalformed[] = {"[-128,128]", "[128.5,128]", "[128,128,128]", "[0,128]", "[128]", "[]",
                                  "[128.0,128]", "\"128\"", "[\"128\",128]", "null", "[18446744073709551615,1]",
                                  "[8589934593,128]"};

TEST(QuantConfig, MalformedWeightBlockSizeIsAnErrorNamingTheValue) {
  for (const char* bad : kMalformed) {
    SCOPED_TRACE(bad);
    JsonDoc value;
    std::string error;
    ASSERT_TRUE(value.parse(bad, error)) << error;
    WeightBlockSize w = parse(bad);
    EXPECT_EQ(w.status, WeightBlockSize::invalid);
    EXPECT_NE(weight_block_size_problem(w).find("weight_block_size is " + json_to_string(value.root())),
              std::string::npos)
        << weight_block_size_problem(w);
  }
  WeightBlockSize ok = parse("[128, 32]");
  EXPECT_EQ(ok.status, WeightBlockSize::valid);
  EXPECT_EQ(ok.rows, 128u);
  EXPECT_EQ(ok.cols, 32u);
  JsonDoc none;
  std::string error;
  ASSERT_TRUE(none.parse("{\"quantization_config\": {\"quant_method\": \"fp8\"}}", error));
  EXPECT_EQ(read_weight_block_size(none.root()).status, WeightBlockSize::absent);
}

std::string with_block_size(const std::string& fixture, const std::string& dir, const std::string& value) {
  test::copy_tree(test::fixture(fixture), dir);
  std::string config = test::read_text(dir + "/config.json");
  auto at = config.find("\"weight_block_size\"");
  auto end = config.find(']', at);
  config.replace(at, end + 1 - at, "\"weight_block_size\": " + value);
  test::write_text(dir + "/config.json", config);
  return dir;
}

// Both profiles (generic: dsv3-tiny, deepseek-v4-flash: dsv4-tiny), both commands.
TEST(QuantConfig, ValidateAndConvertRefuseAMalformedBlockSize) {
  test::TempDir tmp;
  int n = 0;
  for (const char* fixture : {"oracle/dsv3-tiny", "oracle/dsv4-tiny"})
    for (const char* bad : {"[-128,128]", "[128.5,128]", "[128,128,128]"}) {
      SCOPED_TRACE(std::string(fixture) + " " + bad);
      const std::string in = with_block_size(fixture, tmp.str("in" + std::to_string(++n)), bad);
      const std::string shown = std::string("weight_block_size is ") + bad;
      auto v = test::run_ckpt("validate " + q(in));
      EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
      EXPECT_NE(v.out.find(shown), std::string::npos) << v.out;
      const std::string out = tmp.str("out" + std::to_string(n));
      auto c = test::run_ckpt("convert -q " + q(in) + " " + q(out));
      EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
      EXPECT_NE(c.err.find("CFG_WEIGHT_BLOCK_SIZE"), std::string::npos) << c.err;
      EXPECT_NE(c.err.find(shown), std::string::npos) << c.err;
      EXPECT_FALSE(fs::exists(out));
    }
}

}  // namespace
}  // namespace ckpt

// io/output_file.h: the InputSet conflict rule and the checked writes behind every output.
#include "io/output_file.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

TEST(OutputFile, ConflictNamesTheInput) {
  test::TempDir tmp;
  fs::create_directories(tmp.str("in/sub"));
  test::write_text(tmp.str("in/a.safetensors"), "x");
  test::write_text(tmp.str("lone.gguf"), "y");
  InputSet in;
  in.add_checkpoint(tmp.str("in"));
  in.add_checkpoint(tmp.str("lone.gguf"));
  EXPECT_NE(in.conflict(tmp.str("in/a.safetensors")).find("it is the input"), std::string::npos);
  EXPECT_NE(in.conflict(tmp.str("in/new.json")).find("inside the input directory"), std::string::npos);
  EXPECT_NE(in.conflict(tmp.str("in/sub/deeper/new.json")).find("inside the input directory"), std::string::npos);
  EXPECT_NE(in.conflict(tmp.str("in")).find("input directory"), std::string::npos);
  EXPECT_NE(in.conflict(tmp.str("lone.gguf")).find(tmp.str("lone.gguf")), std::string::npos);
  EXPECT_EQ(in.conflict(tmp.str("report.json")), "");
  EXPECT_EQ(in.conflict(tmp.str("in2/report.json")), "");  // a sibling with a common prefix
  EXPECT_EQ(in.conflict("/dev/null"), "");
}

TEST(OutputFile, RefusedWriteLeavesTheInputAndReturnsUsage) {
  test::TempDir tmp;
  test::write_text(tmp.str("shard"), "payload");
  InputSet in;
  in.add_file(tmp.str("shard"));
  std::string error;
  EXPECT_EQ(write_output(tmp.str("shard"), "{}", in, error), Outcome::usage);
  EXPECT_NE(error.find(tmp.str("shard")), std::string::npos) << error;
  EXPECT_EQ(test::read_text(tmp.str("shard")), "payload");
  EXPECT_EQ(write_output(tmp.str("report"), "{}", in, error), Outcome::ok) << error;
  EXPECT_EQ(test::read_text(tmp.str("report")), "{}");
}

TEST(OutputFile, AFullDeviceIsAnIoError) {
  InputSet none;
  std::string error;
  EXPECT_EQ(write_output("/dev/full", std::string(100000, 'x'), none, error), Outcome::io);
  EXPECT_NE(error.find("/dev/full"), std::string::npos) << error;
}

}  // namespace
}  // namespace ckpt

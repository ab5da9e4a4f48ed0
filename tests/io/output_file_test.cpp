// io/output_file.h: the InputSet conflict rule and the checked writes behind every output.
#include "io/output_file.h"

#include <sys/stat.h>

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

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
}

// An output is never readable by more users than its inputs: a 0600 input gives a 0600
// output, a 0640 one 0640, an input directory others may not enter hides its outputs from
// others (before: every output was created 0644, whatever the inputs).
TEST(OutputFile, AnOutputIsNoMoreReadableThanItsInputs) {
  test::TempDir tmp;
  const mode_t mask = ::umask(022);
  ::umask(mask);
  struct Case {
    mode_t file, dir, want;
  };
  for (const Case& c : {Case{0644, 0755, 0644}, Case{0600, 0755, 0600}, Case{0640, 0755, 0640},
                        Case{0604, 0755, 0604}, Case{0644, 0750, 0640}, Case{0644, 0711, 0644},
                        Case{0644, 0700, 0600}}) {
    SCOPED_TRACE(std::to_string(c.file) + " in " + std::to_string(c.dir));
    const std::string dir = tmp.str("in" + std::to_string(c.file) + "_" + std::to_string(c.dir));
    fs::create_directories(dir);
    test::write_text(dir + "/a.safetensors", "x");
    ::chmod((dir + "/a.safetensors").c_str(), c.file);
    ::chmod(dir.c_str(), c.dir);
    InputSet in;
    in.add_checkpoint(dir);
    EXPECT_EQ(in.output_mode(), c.want);
    std::string error;
    const std::string out = dir + ".report.json";
    ASSERT_EQ(write_output(out, "{}", in, error), Outcome::ok) << error;
    EXPECT_EQ(mode_of(out), c.want & ~mask);
    ::chmod(dir.c_str(), 0755);  // for the cleanup
  }
  InputSet none;
  EXPECT_EQ(none.output_mode(), 0644u);
  EXPECT_EQ(output_directory_mode(0600), 0700u);
  EXPECT_EQ(output_directory_mode(0640), 0750u);
  EXPECT_EQ(output_directory_mode(0644), 0755u);
}

}  // namespace
}  // namespace ckpt

// synth writes only into an empty or new directory (or with --overwrite): a typo that
// names a real checkpoint must not replace its shards and config.
#include <filesystem>

#include <gtest/gtest.h>

#include <unistd.h>

#include "io/output_lock.h"
#include "synth/synth_dsv4.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

TEST(Synth, RefusesANonEmptyDirectoryUnlessOverwrite) {
  test::TempDir tmp;
  const std::string dir = tmp.str("model");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), dir);
  const auto config = test::read_file(dir + "/config.json");
  std::string error;
  EXPECT_FALSE(synth_deepseek_v4_flash_0731(dir, SynthSize::tiny, 1, error));
  EXPECT_NE(error.find("is not empty"), std::string::npos) << error;
  auto r = test::run_ckpt("synth deepseek-v4-flash-0731 " + q(dir) + " --tiny");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("pass --overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_file(dir + "/config.json"), config) << "the checkpoint was changed";
  EXPECT_FALSE(fs::exists(dir + "/model-00001-of-00008.safetensors"));
  r = test::run_ckpt("synth deepseek-v4-flash-0731 " + q(dir) + " --tiny --overwrite");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(test::read_file(dir + "/config.json"), config);
  // An empty directory (or a new one) needs nothing.
  fs::create_directories(tmp.str("empty"));
  EXPECT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(tmp.str("empty")) + " --tiny").exit_code, 0);
  EXPECT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(tmp.str("new/dir")) + " --tiny").exit_code, 0);
}

// synth holds the directory's lock (io/output_lock.h) from its check to its last rename: a
// run while another holds it is refused naming the holder, exit 2, and writes nothing (before:
// it took no lock, so two runs both exited 0 and left a mix of their files).
TEST(Synth, ALockedDirectoryIsRefused) {
  test::TempDir tmp;
  const std::string dir = tmp.str("model");
  FileLock held;
  std::string message;
  ASSERT_EQ(lock_output_dir(dir, FileLock::Mode::exclusive, "ckpt convert", held, message), FileLock::Result::acquired);
  auto r = test::run_ckpt("synth deepseek-v4-flash-0731 " + q(dir) + " --tiny --overwrite");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("pid " + std::to_string(::getpid()) + " ckpt convert"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/config.json"));
  std::string error;
  Outcome why = Outcome::ok;
  EXPECT_FALSE(synth_deepseek_v4_flash_0731(dir, SynthSize::tiny, 1, error, true, &why));
  EXPECT_EQ(why, Outcome::usage) << error;
  held.release();
  EXPECT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(dir) + " --tiny").exit_code, 0);
}

}  // namespace
}  // namespace ckpt

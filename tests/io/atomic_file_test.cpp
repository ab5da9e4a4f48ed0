#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "test_util.h"

namespace ckpt {
namespace {

TEST(AtomicFile, WritesAWholeFileUnderItsFinalNameOnly) {
  test::TempDir tmp;
  std::string error;
  ASSERT_TRUE(write_file_atomic(tmp.str("report.json"), "{}\n", error)) << error;
  EXPECT_EQ(test::read_text(tmp.str("report.json")), "{}\n");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) entries += e.exists();
  EXPECT_EQ(entries, 1u) << "no temporary left behind";
}

// `--json /dev/null`, `hash -o /dev/null`: renaming a temporary over the device would
// replace it with a regular file for every process on the machine.
TEST(AtomicFile, ADeviceTargetIsWrittenInPlaceNotReplaced) {
  std::string error;
  ASSERT_TRUE(write_file_atomic("/dev/null", "discarded\n", error)) << error;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// A destination of NAME_MAX bytes still has a temporary: a fixed 35-byte name beside it,
// created exclusively, that names its destination by hash (for partitions' cleanup).
TEST(AtomicFile, TemporariesHaveShortExclusiveNames) {
  test::TempDir tmp;
  const std::string dest_name = std::string(243, 'n') + ".safetensors";
  ASSERT_EQ(dest_name.size(), 255u);
  AtomicOutput out(tmp.str(dest_name));
  std::string error;
  ASSERT_TRUE(out.open(error)) << error;
  const std::string temp = fs::path(out.temp_path()).filename().string();
  EXPECT_EQ(temp.size(), 35u) << temp;
  EXPECT_TRUE(temp.starts_with(".ckpt-tmp-")) << temp;
  EXPECT_TRUE(is_temp_name(temp));
  EXPECT_TRUE(is_temp_for(temp, dest_name));
  EXPECT_FALSE(is_temp_for(temp, "other.safetensors"));
  EXPECT_EQ(live_temporaries(), 1u);
  AtomicOutput twin(tmp.str(dest_name));
  ASSERT_TRUE(twin.open(error)) << error;
  EXPECT_NE(twin.temp_path(), out.temp_path());
  const uint8_t bytes[3] = {1, 2, 3};
  ASSERT_TRUE(out.write(bytes, 3, error)) << error;
  ASSERT_TRUE(out.commit(error)) << error;
  EXPECT_EQ(test::read_file(tmp.str(dest_name)), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(live_temporaries(), 1u);  // the twin's, until it goes
  // 0.1.0 names are still recognised as temporaries (and their destinations).
  EXPECT_TRUE(is_temp_name(".model.safetensors.tmp.4242"));
  EXPECT_TRUE(is_temp_for(".model.safetensors.tmp.4242", "model.safetensors"));
  EXPECT_FALSE(is_temp_name("model.safetensors"));
  EXPECT_FALSE(is_temp_name(".ckpt-tmp-0123456789abcdeX-01234567"));
}

int failing_sync(int) {
  errno = EIO;
  return -1;
}

// fsync of the directory makes the rename durable: its failure is an error, not ignored.
TEST(AtomicFile, AFailedDirectoryFsyncIsReported) {
  test::TempDir tmp;
  set_directory_sync_for_testing(failing_sync);
  std::string error;
  EXPECT_FALSE(write_file_atomic(tmp.str("report.json"), "{}\n", error));
  EXPECT_NE(error.find("is not durable: fsync of directory"), std::string::npos) << error;
  EXPECT_NE(error.find("Input/output error"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(create_directories_durable(tmp.str("a/b"), error));
  EXPECT_NE(error.find("fsync of directory"), std::string::npos) << error;
  set_directory_sync_for_testing(nullptr);
  EXPECT_TRUE(create_directories_durable(tmp.str("a/b/c"), error)) << error;
  EXPECT_TRUE(fs::is_directory(tmp.str("a/b/c")));
}

// The signal handler (in a forked child, so the test survives): SIGTERM with two live
// temporaries removes both, and the process dies of SIGTERM.
TEST(Signals, SigtermRemovesEveryLiveTemporaryAndDiesOfIt) {
  test::TempDir tmp;
  const std::string list = tmp.str("temps");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    install_signal_cleanup();
    AtomicOutput a(tmp.str("a.bin")), b(tmp.str("b.bin"));
    std::string error;
    if (!a.open(error) || !b.open(error)) _exit(10);
    const uint8_t byte = 7;
    if (!a.write(&byte, 1, error)) _exit(11);
    std::string names = a.temp_path() + "\n" + b.temp_path() + "\n";
    if (!write_file_atomic(list, names, error)) _exit(12);
    raise(SIGTERM);
    _exit(13);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  const std::string names = test::read_text(list);
  ASSERT_EQ(std::count(names.begin(), names.end(), '\n'), 2);
  for (size_t at = 0, nl; (nl = names.find('\n', at)) != std::string::npos; at = nl + 1)
    EXPECT_FALSE(fs::exists(names.substr(at, nl - at))) << names.substr(at, nl - at);
  EXPECT_FALSE(fs::exists(tmp.str("a.bin")));
}

}  // namespace
}  // namespace ckpt

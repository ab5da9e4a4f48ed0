// flock on the output directory's lock file: exclusive holders exclude everyone, shared
// holders (partitions) each other not; a refused caller learns the holder's pid.
#include "io/output_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

TEST(OutputLock, ASecondHolderIsRefusedNamingThePid) {
  test::TempDir tmp;
  const std::string path = tmp.str("lock");
  std::string message;
  FileLock first, second;
  ASSERT_EQ(first.acquire(path, FileLock::Mode::exclusive, "ckpt convert", message), FileLock::Result::acquired)
      << message;
  EXPECT_EQ(second.acquire(path, FileLock::Mode::exclusive, "ckpt convert", message), FileLock::Result::busy);
  EXPECT_EQ(message, "pid " + std::to_string(::getpid()) + " ckpt convert");
  EXPECT_EQ(second.acquire(path, FileLock::Mode::shared, "x", message), FileLock::Result::busy);
  first.release();
  EXPECT_EQ(second.acquire(path, FileLock::Mode::exclusive, "y", message), FileLock::Result::acquired) << message;
}

TEST(OutputLock, SharedHoldersCoexistAndExcludeAnExclusiveOne) {
  test::TempDir tmp;
  const std::string path = tmp.str("lock");
  std::string message;
  FileLock a, b, c;
  ASSERT_EQ(a.acquire(path, FileLock::Mode::shared, "ckpt convert --partition 0/2", message), FileLock::Result::acquired);
  ASSERT_EQ(b.acquire(path, FileLock::Mode::shared, "ckpt convert --partition 1/2", message), FileLock::Result::acquired);
  EXPECT_EQ(c.acquire(path, FileLock::Mode::exclusive, "ckpt convert", message), FileLock::Result::busy);
  EXPECT_NE(message.find("ckpt convert --partition"), std::string::npos) << message;
  // A lock file that is a symlink is refused (O_NOFOLLOW).
  std::filesystem::create_symlink(path, tmp.str("link"));
  EXPECT_EQ(c.acquire(tmp.str("link"), FileLock::Mode::exclusive, "z", message), FileLock::Result::error);
}

// The one lock of an output directory: DIR/.ckptkit/lock, DIR created when missing; a second
// holder is refused naming the first; DIR with only .ckptkit in it counts as empty.
TEST(OutputLock, AnOutputDirectoryHasOneLock) {
  test::TempDir tmp;
  const std::string dir = tmp.str("new/out");
  std::string message;
  FileLock first, second;
  ASSERT_EQ(lock_output_dir(dir, FileLock::Mode::exclusive, "ckpt synth", first, message), FileLock::Result::acquired)
      << message;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/.ckptkit/lock"));
  EXPECT_EQ(output_dir_lock_path(dir), dir + "/.ckptkit/lock");
  EXPECT_TRUE(output_dir_is_empty(dir));
  EXPECT_EQ(lock_output_dir(dir, FileLock::Mode::exclusive, "ckpt repack-experts", second, message),
            FileLock::Result::busy);
  EXPECT_NE(output_dir_busy_message(dir, message).find("pid " + std::to_string(::getpid()) + " ckpt synth"),
            std::string::npos);
  test::write_text(dir + "/x", "1");
  EXPECT_FALSE(output_dir_is_empty(dir));
}

// DIR/.ckptkit that is a symlink (or a file) is refused before anything is created: the
// lock and the run's records would otherwise land wherever it points. The commands that
// write a directory (convert, repack-experts) all take this path.
TEST(OutputLock, AStateDirectoryThatIsALinkIsNeitherFollowedNorReplaced) {
  test::TempDir tmp;
  const std::string elsewhere = tmp.str("elsewhere");
  std::filesystem::create_directories(elsewhere);
  std::filesystem::create_directories(tmp.str("out"));
  std::filesystem::create_directory_symlink(elsewhere, tmp.str("out/.ckptkit"));
  std::string message;
  FileLock lock;
  EXPECT_EQ(lock_output_dir(tmp.str("out"), FileLock::Mode::exclusive, "ckpt convert", lock, message),
            FileLock::Result::error);
  EXPECT_NE(message.find(tmp.str("out/.ckptkit") + " is a symlink"), std::string::npos) << message;
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere));
  std::filesystem::create_directories(tmp.str("file"));
  test::write_text(tmp.str("file/.ckptkit"), "x");
  EXPECT_EQ(lock_output_dir(tmp.str("file"), FileLock::Mode::exclusive, "ckpt convert", lock, message),
            FileLock::Result::error);
  EXPECT_NE(message.find("is not a directory"), std::string::npos) << message;
  const auto q = test::shell_quote;
  for (const std::string& cmd : {"convert -q " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(tmp.str("out")),
                                 "repack-experts -q " + q(test::fixture("ggml/qwen3next-tiny.gguf")) + " " +
                                     q(tmp.str("out"))}) {
    const auto r = test::run_ckpt(cmd);
    EXPECT_EQ(r.exit_code, 3) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("is a symlink"), std::string::npos) << r.err;
    EXPECT_TRUE(std::filesystem::is_empty(elsewhere)) << cmd;
  }
}

// A FIFO where the lock file belongs is an error, never a hang or a lock on it.
TEST(OutputLock, AFifoAsTheLockFileIsAnError) {
  test::TempDir tmp;
  const std::string path = tmp.str("lock");
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  std::string message;
  FileLock lock;
  EXPECT_EQ(lock.acquire(path, FileLock::Mode::exclusive, "ckpt convert", message), FileLock::Result::error);
  EXPECT_NE(message.find("not a regular file"), std::string::npos) << message;
}

}  // namespace
}  // namespace ckpt

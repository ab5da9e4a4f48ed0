// flock on the output directory's lock file: exclusive holders exclude everyone, shared
// holders (partitions) each other not; a refused caller learns the holder's pid.
#include "io/output_lock.h"

#include <unistd.h>

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

}  // namespace
}  // namespace ckpt

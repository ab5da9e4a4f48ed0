// io/free_space.h: the one free-space check of the commands that write large outputs.
#include "io/free_space.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

TEST(FreeSpace, AnOutputThatFitsIsNoRefusalAndOneThatDoesNotNamesBothSizesAndTheDirectory) {
  EXPECT_EQ(no_space_message("the repack", 100, "/out", 100), "");
  EXPECT_EQ(no_space_message("the repack", 0, "/out", 0), "");
  EXPECT_EQ(no_space_message("the repack", 101, "/out", 100),
            "the repack needs 101 bytes but /out has 100 free; nothing was written");
}

TEST(FreeSpace, APathNotYetMadeIsMeasuredOnItsNearestExistingParent) {
  test::TempDir tmp;
  ::unsetenv("CKPT_TEST_FREE_BYTES");
  const uint64_t here = free_bytes(tmp.str());
  EXPECT_GT(here, 0u);
  EXPECT_LT(here, UINT64_MAX) << "statvfs of an existing directory";
  const uint64_t below = free_bytes(tmp.str("a/b/c"));
  EXPECT_LT(below, UINT64_MAX);
  // Another writer on the host may take or free space between the two calls.
  EXPECT_NEAR(static_cast<double>(below), static_cast<double>(here), 1e9);
}

TEST(FreeSpace, TheTestHookGivesTheFreeBytes) {
  ::setenv("CKPT_TEST_FREE_BYTES", "4096", 1);
  EXPECT_EQ(free_bytes("/"), 4096u);
  ::setenv("CKPT_TEST_FREE_BYTES", "12x", 1);  // not a number: the disk's own figure
  EXPECT_NE(free_bytes("/"), 12u);
  ::unsetenv("CKPT_TEST_FREE_BYTES");
}

}  // namespace
}  // namespace ckpt

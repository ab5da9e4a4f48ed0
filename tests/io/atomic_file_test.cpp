#include <gtest/gtest.h>

#include <filesystem>

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

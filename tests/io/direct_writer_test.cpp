// Bulk outputs through io/direct_writer.h: the bytes are exactly those given whatever the
// size (the O_DIRECT tail is padded, then cut back), O_DIRECT is really in use where the
// filesystem takes it, a refusing filesystem falls back to buffered writes (said once),
// --buffered forces that, and a failed write leaves no file at the destination.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/atomic_file.h"
#include "io/direct_writer.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

// Whether the filesystem of `dir` takes O_DIRECT (probed with a file of its own).
bool takes_o_direct(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// Writes `bytes` as a bulk output in pieces of `piece` bytes; returns the commit's answer.
bool write_bulk(const std::string& path, const std::vector<uint8_t>& bytes, size_t piece, std::string& error,
                bool* was_direct = nullptr, int* open_flags = nullptr) {
  AtomicOutput out(path, kOutputFileMode, OutputUse::bulk);
  if (!out.open(error)) return false;
  if (was_direct) *was_direct = out.direct();
  if (open_flags) *open_flags = ::fcntl(out.fd(), F_GETFL);
  for (size_t at = 0; at < bytes.size(); at += piece)
    if (!out.write(bytes.data() + at, std::min(piece, bytes.size() - at), error)) return false;
  return out.commit(error);
}

// Leaves the process-wide settings as the other tests expect them.
struct ResetOutputIo {
  ~ResetOutputIo() {
    set_output_io(OutputIo::direct);
    set_refuse_direct_for_testing(false);
    set_direct_write_failure_for_testing(0);
    set_output_io_notice(nullptr);
    reset_output_io_notice_for_testing();
  }
};

const std::vector<size_t> kSizes = {0, 1, 4095, 4096, 4097, 3 * kDirectBufferBytes + 12345};

void expect_exact_bytes_for_every_size(const test::TempDir& tmp) {
  for (size_t size : kSizes) {
    for (size_t piece : {size_t{1000}, size_t{3} << 20}) {
      if (size > (1u << 20) && piece == 1000) continue;  // the ragged pieces on the small sizes
      const std::string path = tmp.str("out-" + std::to_string(size) + "-" + std::to_string(piece));
      const auto bytes = pattern(size, static_cast<uint32_t>(size + piece));
      std::string error;
      ASSERT_TRUE(write_bulk(path, bytes, piece, error)) << error;
      EXPECT_EQ(fs::file_size(path), size) << path;
      EXPECT_EQ(test::read_file(path), bytes) << path;
    }
  }
}

TEST(DirectWriter, OutputBytesAreExactForUnalignedSizesThroughODirect) {
  ResetOutputIo reset;
  test::TempDir tmp;
  if (!takes_o_direct(tmp.str())) GTEST_SKIP() << "the filesystem of " << tmp.str() << " refuses O_DIRECT";
  const uint64_t before = direct_write_requests();
  expect_exact_bytes_for_every_size(tmp);
  EXPECT_GT(direct_write_requests(), before) << "no write went through O_DIRECT";
}

TEST(DirectWriter, ABulkOutputIsOpenWithODirectWhereTheFilesystemTakesIt) {
  ResetOutputIo reset;
  test::TempDir tmp;
  if (!takes_o_direct(tmp.str())) GTEST_SKIP() << "the filesystem of " << tmp.str() << " refuses O_DIRECT";
  bool was_direct = false;
  int flags = 0;
  std::string error;
  const uint64_t before = direct_write_requests(), buffered_before = buffered_write_requests();
  ASSERT_TRUE(write_bulk(tmp.str("out"), pattern(kDirectBufferBytes + 1, 7), 1u << 20, error, &was_direct, &flags))
      << error;
  EXPECT_TRUE(was_direct);
  EXPECT_NE(flags & O_DIRECT, 0);
  EXPECT_EQ(direct_write_requests() - before, 2u);  // one full buffer, one padded tail
  EXPECT_EQ(buffered_write_requests(), buffered_before);
}

// reserve(): the planned size allocated before the first write (so no O_DIRECT write
// extends the file); the committed file is cut to the bytes given, whether the plan was
// exact or larger and whether the tail was padded, through O_DIRECT and the fallback.
TEST(DirectWriter, AReservedOutputIsCutToTheBytesGiven) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const size_t big = 2 * kDirectBufferBytes + 4097;
  const std::vector<std::pair<size_t, uint64_t>> cases = {
      {big, big}, {big, big + 3 * kDirectBufferBytes}, {3 * kDirectAlign, 3 * kDirectAlign}, {0, kDirectAlign}, {5, 1}};
  for (const bool refuse : {false, true}) {
    set_refuse_direct_for_testing(refuse);
    for (const auto& [size, planned] : cases) {
      const std::string path = tmp.str("out-" + std::to_string(refuse) + "-" + std::to_string(size) + "-" +
                                       std::to_string(planned));
      const auto bytes = pattern(size, static_cast<uint32_t>(size + planned));
      AtomicOutput out(path, kOutputFileMode, OutputUse::bulk);
      std::string error;
      ASSERT_TRUE(out.open(error)) << error;
      const uint64_t before = reserved_outputs();
      ASSERT_TRUE(out.reserve(planned, error)) << error;
      if (reserved_outputs() == before) GTEST_SKIP() << "the filesystem of " << tmp.str() << " has no fallocate";
      for (size_t at = 0; at < bytes.size(); at += 1u << 20)
        ASSERT_TRUE(out.write(bytes.data() + at, std::min<size_t>(1u << 20, bytes.size() - at), error)) << error;
      ASSERT_TRUE(out.commit(error)) << error;
      EXPECT_EQ(fs::file_size(path), size) << path;
      EXPECT_EQ(test::read_file(path), bytes) << path;
    }
  }
}

// A planned size the disk cannot hold is said at once, before gigabytes are written.
TEST(DirectWriter, AReserveTheDiskCannotHoldIsAnErrorBeforeAnyWrite) {
  ResetOutputIo reset;
  test::TempDir tmp;
  AtomicOutput out(tmp.str("out"), kOutputFileMode, OutputUse::bulk);
  std::string error;
  ASSERT_TRUE(out.open(error)) << error;
  const uint64_t before = reserved_outputs();
  if (out.reserve(uint64_t{1} << 60, error)) {
    ASSERT_EQ(reserved_outputs(), before) << "1 EiB reserved";
    GTEST_SKIP() << "the filesystem of " << tmp.str() << " has no fallocate";
  }
  // Named by its destination, not by the hidden temporary it is written as.
  EXPECT_NE(error.find("cannot reserve 1152921504606846976 bytes for " + tmp.str("out") + ": "), std::string::npos)
      << error;
}

TEST(DirectWriter, ASmallOutputIsNotWrittenWithODirect) {
  ResetOutputIo reset;
  test::TempDir tmp;
  AtomicOutput out(tmp.str("report.json"));
  std::string error;
  ASSERT_TRUE(out.open(error)) << error;
  EXPECT_FALSE(out.direct());
  EXPECT_EQ(::fcntl(out.fd(), F_GETFL) & O_DIRECT, 0);
}

std::vector<std::string> g_notices;
void record_notice(const std::string& file, const std::string& message) { g_notices.push_back(file + ": " + message); }

TEST(DirectWriter, AFilesystemRefusingODirectFallsBackToBufferedWritesSaidOnce) {
  ResetOutputIo reset;
  test::TempDir tmp;
  g_notices.clear();
  reset_output_io_notice_for_testing();
  set_output_io_notice(&record_notice);
  set_refuse_direct_for_testing(true);
  const uint64_t direct_before = direct_write_requests(), buffered_before = buffered_write_requests();
  bool was_direct = true;
  int flags = 0;
  std::string error;
  ASSERT_TRUE(write_bulk(tmp.str("first"), pattern(kDirectBufferBytes + 3, 1), 1u << 20, error, &was_direct, &flags))
      << error;
  EXPECT_FALSE(was_direct);
  EXPECT_EQ(flags & O_DIRECT, 0);
  expect_exact_bytes_for_every_size(tmp);
  EXPECT_EQ(direct_write_requests(), direct_before);
  EXPECT_GT(buffered_write_requests(), buffered_before);
  ASSERT_EQ(g_notices.size(), 1u) << "the fallback is said once per process";
  EXPECT_NE(g_notices[0].find("refuses O_DIRECT"), std::string::npos) << g_notices[0];
  EXPECT_EQ(g_notices[0].rfind(tmp.str() + ":", 0), 0u) << g_notices[0];
}

TEST(DirectWriter, BufferedForcesThePageCachePathWithoutANotice) {
  ResetOutputIo reset;
  test::TempDir tmp;
  g_notices.clear();
  reset_output_io_notice_for_testing();
  set_output_io_notice(&record_notice);
  set_output_io(OutputIo::buffered);
  bool was_direct = true;
  int flags = 0;
  std::string error;
  const auto bytes = pattern(2 * kDirectBufferBytes + 5, 3);
  ASSERT_TRUE(write_bulk(tmp.str("out"), bytes, 1u << 20, error, &was_direct, &flags)) << error;
  EXPECT_FALSE(was_direct);
  EXPECT_EQ(flags & O_DIRECT, 0);
  EXPECT_EQ(test::read_file(tmp.str("out")), bytes);
  EXPECT_TRUE(g_notices.empty());
}

// A write failing mid-file (an injected EIO at byte 9 MiB, in the second buffer) fails
// the output: nothing at the destination, the temporary removed.
TEST(DirectWriter, AWriteFailingMidFileLeavesNoOutputAndNoTemporary) {
  ResetOutputIo reset;
  test::TempDir tmp;
  set_direct_write_failure_for_testing(9u << 20);
  std::string error;
  EXPECT_FALSE(write_bulk(tmp.str("out"), pattern(4 * kDirectBufferBytes, 5), 1u << 20, error));
  EXPECT_NE(error.find("injected at byte 9437184"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "the temporary is removed";
  EXPECT_EQ(live_temporaries(), 0u);
}

// repack-experts ends experts.bin's writes before dense.gguf's first (one writer's buffers
// at a time): the file is complete at its true size before the commit, and a later write
// is refused rather than landing at offset 0.
TEST(DirectWriter, EndWritesCompletesTheFileBeforeTheCommitAndRefusesLaterWrites) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const auto bytes = pattern(kDirectBufferBytes + 4097, 11);
  AtomicOutput out(tmp.str("out"), kOutputFileMode, OutputUse::bulk);
  std::string error;
  ASSERT_TRUE(out.open(error)) << error;
  ASSERT_TRUE(out.write(bytes.data(), bytes.size(), error)) << error;
  ASSERT_TRUE(out.end_writes(error)) << error;
  EXPECT_FALSE(out.direct()) << "the writer is gone";
  EXPECT_EQ(fs::file_size(out.temp_path()), bytes.size());
  EXPECT_FALSE(out.write(bytes.data(), 1, error));
  ASSERT_TRUE(out.commit(error)) << error;
  EXPECT_EQ(test::read_file(tmp.str("out")), bytes);
}

}  // namespace
}  // namespace ckpt

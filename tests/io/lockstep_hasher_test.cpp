// io/lockstep_hasher.h: a conversion's inputs hashed beside it, never more than `lead`
// files ahead, through its own descriptors, and refused when a file changed in between.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "io/hash.h"
#include "io/input_file.h"
#include "io/lockstep_hasher.h"
#include "test_util.h"

namespace ckpt {
namespace {

using namespace std::chrono_literals;

// `count` files of different sizes (one empty), opened as a conversion opens its inputs.
struct Inputs {
  test::TempDir tmp;
  std::vector<std::string> paths, names;
  std::vector<std::unique_ptr<InputFile>> files;
  explicit Inputs(size_t count, size_t first_bytes = 7) {
    for (size_t k = 0; k < count; ++k) {
      names.push_back("shard-" + std::to_string(k));
      paths.push_back(tmp.str(names.back()));
      std::vector<uint8_t> bytes(k == 0 ? first_bytes : k == 1 ? 0 : 100000 * k + 7);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + k);
      test::write_file(paths.back(), bytes);
      files.push_back(std::make_unique<InputFile>());
      IoError err;
      EXPECT_TRUE(files.back()->open(paths.back(), err)) << err.message;
    }
  }
  std::vector<const InputFile*> views() const {
    std::vector<const InputFile*> v;
    for (const auto& f : files) v.push_back(f.get());
    return v;
  }
};

// started() once it has stopped moving (the hasher's threads are idle or waiting).
size_t settled_started(const LockstepHasher& h) {
  size_t last = h.started();
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(25ms);
    if (h.started() == last && i >= 3) break;
    last = h.started();
  }
  return last;
}

TEST(LockstepHasher, DigestsAreEachWholeFilesSha256InTheConversionsOrder) {
  Inputs in(4);
  LockstepHasher h(in.views(), in.names);
  const auto out = h.finish();
  ASSERT_EQ(out.size(), 4u);
  for (size_t k = 0; k < out.size(); ++k) {
    EXPECT_EQ(out[k].name, in.names[k]);
    EXPECT_EQ(out[k].error, "");
    EXPECT_EQ(out[k].size, in.files[k]->size());
    EXPECT_EQ(out[k].sha256, sha256_hex(test::read_text(in.paths[k])));
  }
}

TEST(LockstepHasher, NeverStartsAFileMoreThanLeadFilesAheadOfTheConversion) {
  Inputs in(6);
  LockstepHasher h(in.views(), in.names, /*lead=*/1, /*threads=*/2);
  EXPECT_EQ(settled_started(h), 2u);  // the conversion at file 0: files 0 and 1
  h.reached(2);
  EXPECT_EQ(settled_started(h), 4u);
  h.reached(1);  // never backward
  EXPECT_EQ(settled_started(h), 4u);
  const auto out = h.finish();  // the conversion is done: the rest at once
  EXPECT_EQ(h.started(), 6u);
  for (const auto& f : out) EXPECT_EQ(f.error, "") << f.name;
}

// The other side of the lockstep: a hash slower than the conversion holds it back, so the
// hash never falls more than a file behind (and out of the page cache).
TEST(LockstepHasher, TheConversionDoesNotStartAFileBeforeTheOnesBeforeItAreHashed) {
  Inputs in(3, size_t{48} << 20);  // file 0 takes a while to hash
  LockstepHasher h(in.views(), in.names);
  h.reached(1);
  EXPECT_GE(h.hashed_prefix(), 1u);
  h.reached(3);  // past the last: every file hashed
  EXPECT_EQ(h.hashed_prefix(), 3u);
  for (const auto& f : h.finish()) EXPECT_EQ(f.error, "") << f.name;
}

TEST(LockstepHasher, AFileWrittenAfterItWasHashedIsReportedChanged) {
  Inputs in(3);
  LockstepHasher h(in.views(), in.names);
  h.reached(2);
  std::this_thread::sleep_for(50ms);  // past the file system's timestamp granularity
  // Same size, one byte different, written in place: the descriptor's inode changed.
  std::vector<uint8_t> bytes = test::read_file(in.paths[2]);
  bytes[bytes.size() / 2] ^= 1;
  test::write_file(in.paths[2], bytes);
  const auto out = h.finish();
  EXPECT_EQ(out[0].error, "");
  EXPECT_EQ(out[2].sha256, "");
  EXPECT_NE(out[2].error.find("changed after it was hashed"), std::string::npos) << out[2].error;
}

TEST(LockstepHasher, APathReplacedByAnotherFileIsReportedChanged) {
  Inputs in(2);
  LockstepHasher h(in.views(), in.names);
  const std::string other = in.tmp.str("other");
  test::write_file(other, test::read_file(in.paths[0]));  // the same bytes, another inode
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(std::rename(other.c_str(), in.paths[0].c_str()), 0);
  const auto out = h.finish();
  EXPECT_NE(out[0].error.find("replaced"), std::string::npos) << out[0].error;
}

TEST(LockstepHasher, AFileThatShrankBeforeItWasHashedIsNotHashed) {
  Inputs in(4);
  LockstepHasher h(in.views(), in.names);
  EXPECT_EQ(settled_started(h), 2u);
  std::filesystem::resize_file(in.paths[3], 10);  // not started yet (the gate holds it)
  const auto out = h.finish();
  EXPECT_EQ(out[3].sha256, "");
  EXPECT_NE(out[3].error.find("changed after the conversion opened it"), std::string::npos) << out[3].error;
  EXPECT_EQ(out[2].error, "");
}

// Written in place before its turn to be hashed: the hash would cover the new bytes while
// the conversion may already have read the old ones (its header, at least).
TEST(LockstepHasher, AFileWrittenAfterTheConversionOpenedItIsNotHashed) {
  Inputs in(4);
  LockstepHasher h(in.views(), in.names);
  EXPECT_EQ(settled_started(h), 2u);
  std::this_thread::sleep_for(50ms);
  std::vector<uint8_t> bytes = test::read_file(in.paths[3]);
  bytes[0] ^= 1;
  test::write_file(in.paths[3], bytes);
  const auto out = h.finish();
  EXPECT_EQ(out[3].sha256, "");
  EXPECT_NE(out[3].error.find("changed after the conversion opened it"), std::string::npos) << out[3].error;
}

TEST(LockstepHasher, AConversionThatStopsEarlyDoesNotWaitForTheRest) {
  Inputs in(5);
  auto t0 = std::chrono::steady_clock::now();
  { LockstepHasher h(in.views(), in.names); }  // destroyed at file 0: stops, joins
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

}  // namespace
}  // namespace ckpt

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <vector>

#include <openssl/evp.h>

#include "io/hash.h"
#include "io/mapped_file.h"
#include "io/read_ahead.h"
#include "test_util.h"

namespace ckpt {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size()));
}

// OpenSSL's one-shot digest, the reference.
std::string one_shot_sha256(const std::vector<uint8_t>& v) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(v.data(), v.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    static const char* d = "0123456789abcdef";
    hex += d[md[i] >> 4];
    hex += d[md[i] & 15];
  }
  return hex;
}

// Sizes around the read-ahead block and the ring of buffers, and SHA-256's 64-byte block.
TEST(ReadAhead, Sha256OfAFileEqualsOpenSslOneShotAtEdgeSizes) {
  test::TempDir tmp;
  const size_t block = 4096;
  const std::vector<size_t> sizes = {0,         1,         55,        56,        63,        64,         65,
                                     block - 1, block,     block + 1, 2 * block, 3 * block, 3 * block + 1,
                                     4 * block - 1, 7 * block + 5, 64 * block + 17};
  for (unsigned buffers : {2u, 3u, 5u}) {
    for (size_t n : sizes) {
      const auto bytes = random_bytes(n, n * 31 + buffers);
      const std::string path = tmp.str("f" + std::to_string(n));
      write_bytes(path, bytes);
      MappedFile f;
      IoError err;
      ASSERT_TRUE(f.open(path, err)) << err.message;
      std::string hex, error;
      ASSERT_TRUE(sha256_file(f, hex, error, block, buffers)) << error;
      EXPECT_EQ(hex, one_shot_sha256(bytes)) << n << " bytes, " << buffers << " buffers";
    }
  }
  // The default (4 MiB blocks) over several blocks.
  const auto bytes = random_bytes((size_t{9} << 20) + 3, 7);
  write_bytes(tmp.str("big"), bytes);
  MappedFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("big"), err));
  std::string hex, error;
  ASSERT_TRUE(sha256_file(f, hex, error)) << error;
  EXPECT_EQ(hex, one_shot_sha256(bytes));
}

// The caller's ranges (straddling blocks, gaps, the very end) come back byte-exact while the
// tap sees every byte of the file in order.
TEST(ReadAhead, ReadsStraddleBlocksAndTheTapSeesEveryByte) {
  test::TempDir tmp;
  const size_t block = 1000;
  const auto bytes = random_bytes(10 * block + 333, 11);
  write_bytes(tmp.str("f"), bytes);
  MappedFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("f"), err));
  std::vector<uint8_t> tapped;
  {
    ReadAheadOptions o;
    o.block_bytes = block;
    o.buffers = 2;
    o.tap = [&](std::span<const uint8_t> b) { tapped.insert(tapped.end(), b.begin(), b.end()); };
    ReadAhead ra(f, std::move(o));
    const std::vector<std::pair<uint64_t, uint64_t>> reads = {
        {0, 10}, {10, 990}, {1000, 1000}, {2500, 1000}, {3999, 2}, {4001, 0}, {5000, 1}, {8000, 999}, {9300, 1000},
        {bytes.size() - 5, 5}};
    for (auto [pos, n] : reads) {
      std::span<const uint8_t> got;
      std::string error;
      ASSERT_TRUE(ra.read(pos, n, got, error)) << pos << ": " << error;
      ASSERT_EQ(got.size(), n);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + static_cast<ptrdiff_t>(pos))) << pos;
    }
    std::span<const uint8_t> got;
    std::string error;
    EXPECT_FALSE(ra.read(bytes.size() - 1, 2, got, error)) << "past the end";
    EXPECT_FALSE(ra.read(bytes.size(), block + 1, got, error)) << "more than a block";
    ASSERT_TRUE(ra.finish(error)) << error;
  }
  EXPECT_EQ(tapped, bytes);
}

// A consumer that stops early (an error elsewhere) does not hang the reader or the tap.
TEST(ReadAhead, StoppingEarlyJoinsTheThreads) {
  test::TempDir tmp;
  const auto bytes = random_bytes(50000, 3);
  write_bytes(tmp.str("f"), bytes);
  MappedFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("f"), err));
  for (int with_tap = 0; with_tap < 2; ++with_tap) {
    ReadAheadOptions o;
    o.block_bytes = 512;
    if (with_tap) o.tap = [](std::span<const uint8_t>) {};
    ReadAhead ra(f, std::move(o));
    std::span<const uint8_t> got;
    std::string error;
    ASSERT_TRUE(ra.read(100, 10, got, error));
  }  // destructors join
}

// A file that shrinks after opening is an I/O error from finish(), not a short hash.
TEST(ReadAhead, AFileThatShrinksIsAnErrorNotAShortHash) {
  test::TempDir tmp;
  const auto bytes = random_bytes(100000, 5);
  write_bytes(tmp.str("f"), bytes);
  MappedFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("f"), err));
  std::filesystem::resize_file(tmp.str("f"), 40000);
  std::string hex, error;
  EXPECT_FALSE(sha256_file(f, hex, error, 4096, 3));
  EXPECT_FALSE(error.empty());
  ReadAheadOptions o;
  o.block_bytes = 4096;
  o.tap = [](std::span<const uint8_t>) {};
  ReadAhead ra(f, std::move(o));
  std::span<const uint8_t> got;
  ASSERT_TRUE(ra.read(0, 100, got, error));  // before the cut: fine
  EXPECT_FALSE(ra.finish(error)) << "the tap met the cut";
}

}  // namespace
}  // namespace ckpt

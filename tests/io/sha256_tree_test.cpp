// io/sha256_tree.h: the tree of a file equals a value computed independently (Python's
// hashlib for a known answer, OpenSSL's one-shot digest over the chunks at edge sizes),
// a one-byte change moves exactly its chunk, the chunk-size bounds, read errors.
#include "io/sha256_tree.h"

#include <filesystem>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "test_util.h"

namespace ckpt {
namespace {

Sha256Digest one_shot(const uint8_t* data, size_t n) {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_Digest(data, n, d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

// The definition written out again (io/sha256_tree.h): chunk digests, then the root over
// scheme, NUL, u64be chunk size, u64be size, digests; one OpenSSL one-shot each.
Sha256Digest independent_root(const std::vector<uint8_t>& bytes, uint64_t chunk) {
  std::vector<uint8_t> input;
  for (char c : std::string("ckptkit-sha256-tree/v1")) input.push_back(static_cast<uint8_t>(c));
  input.push_back(0);
  for (uint64_t v : {chunk, static_cast<uint64_t>(bytes.size())})
    for (int shift = 56; shift >= 0; shift -= 8) input.push_back(static_cast<uint8_t>(v >> shift));
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const auto d = one_shot(bytes.data() + at, std::min<size_t>(chunk, bytes.size() - at));
    input.insert(input.end(), d.begin(), d.end());
  }
  return one_shot(input.data(), input.size());
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

Sha256Digest tree_of(const std::string& path, uint64_t chunk, std::vector<Sha256Digest>* chunks_out = nullptr) {
  InputFile f;
  IoError err;
  EXPECT_TRUE(f.open(path, err)) << err.message;
  std::vector<Sha256Digest> chunks;
  EXPECT_TRUE(sha256_tree_file(f, chunk, chunks, err)) << err.message;
  EXPECT_EQ(chunks.size(), sha256_tree_chunk_count(f.size(), chunk));
  if (chunks_out) *chunks_out = chunks;
  return sha256_tree_root(chunk, f.size(), chunks);
}

// Known answer, from Python: bytes (7 i + 3) mod 256 for i < 3 * 65536 + 1, chunks of 65536:
//   hashlib.sha256(b"ckptkit-sha256-tree/v1\0" + struct.pack(">QQ", cs, n) + b"".join(chunk digests))
TEST(Sha256Tree, KnownAnswerFromPython) {
  test::TempDir tmp;
  std::vector<uint8_t> bytes(3 * 65536 + 1);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  test::write_file(tmp.str("f"), bytes);
  EXPECT_EQ(sha256_hex(tree_of(tmp.str("f"), 65536)), "997fbef004ecd276aa35803d8de3d4265620d092e3bb898bea32d36272ec8e89");
  // An empty file has no chunks: the root covers the prefix alone.
  test::write_file(tmp.str("empty"), {});
  EXPECT_EQ(sha256_hex(tree_of(tmp.str("empty"), 65536)), "f5ab1cc004c5c664aed479a47bd0ac8617e6cfeaf5d068e832095d93aa641026");
}

// Around the chunk size and the 1 MiB read block, and chunks larger than the block.
TEST(Sha256Tree, RootEqualsIndependentComputationAtEdgeSizes) {
  test::TempDir tmp;
  const uint64_t k64 = 65536, m1 = uint64_t{1} << 20;
  const std::pair<uint64_t, uint64_t> cases[] = {{1, k64},         {k64 - 1, k64},     {k64, k64},
                                                 {k64 + 1, k64},   {5 * k64 + 7, k64}, {m1 + 3, 2 * m1},
                                                 {2 * m1, 2 * m1}, {3 * m1 + 1, m1},   {m1 - 1, 4 * m1},
                                                 {9 * m1 + 5, 4 * m1}};
  for (const auto& [size, chunk] : cases) {
    const auto bytes = random_bytes(static_cast<size_t>(size), size ^ chunk);
    test::write_file(tmp.str("f"), bytes);
    EXPECT_EQ(sha256_hex(tree_of(tmp.str("f"), chunk)), sha256_hex(independent_root(bytes, chunk)))
        << size << " bytes, chunks of " << chunk;
  }
  // The root binds the chunk size and the size: the same bytes in other chunks differ.
  const auto bytes = random_bytes(4 * k64, 1);
  test::write_file(tmp.str("g"), bytes);
  EXPECT_NE(tree_of(tmp.str("g"), k64), tree_of(tmp.str("g"), 2 * k64));
}

TEST(Sha256Tree, OneByteChangeMovesOnlyItsChunk) {
  test::TempDir tmp;
  const uint64_t chunk = 65536;
  auto bytes = random_bytes(7 * chunk + 100, 7);
  test::write_file(tmp.str("f"), bytes);
  std::vector<Sha256Digest> base;
  const auto base_root = tree_of(tmp.str("f"), chunk, &base);
  for (size_t c = 0; c < base.size(); ++c) {
    const size_t at = std::min(bytes.size() - 1, c * chunk + (c * 9973) % chunk);
    bytes[at] ^= 0x80;
    test::write_file(tmp.str("f"), bytes);
    std::vector<Sha256Digest> got;
    EXPECT_NE(tree_of(tmp.str("f"), chunk, &got), base_root) << c;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i] != base[i], i == c) << "changed chunk " << c << ", chunk " << i;
    bytes[at] ^= 0x80;
  }
}

TEST(Sha256Tree, ChunkSizeBounds) {
  EXPECT_FALSE(sha256_tree_chunk_size_ok(0));
  EXPECT_FALSE(sha256_tree_chunk_size_ok(1));
  EXPECT_FALSE(sha256_tree_chunk_size_ok(kSha256TreeMinChunk / 2));
  EXPECT_TRUE(sha256_tree_chunk_size_ok(kSha256TreeMinChunk));
  EXPECT_FALSE(sha256_tree_chunk_size_ok(3 * kSha256TreeMinChunk));
  EXPECT_TRUE(sha256_tree_chunk_size_ok(kSha256TreeDefaultChunk));
  EXPECT_TRUE(sha256_tree_chunk_size_ok(kSha256TreeMaxChunk));
  EXPECT_FALSE(sha256_tree_chunk_size_ok(kSha256TreeMaxChunk * 2));
  EXPECT_FALSE(sha256_tree_chunk_size_ok(uint64_t{1} << 63));
  EXPECT_EQ(sha256_tree_chunk_count(0, 65536), 0u);
  EXPECT_EQ(sha256_tree_chunk_count(65536, 65536), 1u);
  EXPECT_EQ(sha256_tree_chunk_count(65537, 65536), 2u);
  EXPECT_EQ(sha256_tree_chunk_count((uint64_t{1} << 56) - 1, 65536), uint64_t{1} << 40);
}

// A file that shrinks after open: false, the error from the lowest failing chunk.
TEST(Sha256Tree, ReadErrorNamesTheOffset) {
  test::TempDir tmp;
  test::write_file(tmp.str("f"), random_bytes(6 * 65536, 3));
  InputFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("f"), err));
  std::filesystem::resize_file(tmp.str("f"), 2 * 65536 + 10);
  std::vector<Sha256Digest> chunks;
  uint64_t at = 0;
  EXPECT_FALSE(sha256_tree_file(f, 65536, chunks, err, nullptr, nullptr, &at));
  EXPECT_EQ(at, 2u * 65536);
  EXPECT_NE(err.message.find("131082"), std::string::npos) << err.message;  // where the file now ends
}

TEST(Sha256Tree, StopGivesUpWithoutAnError) {
  test::TempDir tmp;
  test::write_file(tmp.str("f"), random_bytes(4 * 65536, 5));
  InputFile f;
  IoError err;
  ASSERT_TRUE(f.open(tmp.str("f"), err));
  std::atomic<bool> stop{true};
  std::vector<Sha256Digest> chunks;
  EXPECT_FALSE(sha256_tree_file(f, 65536, chunks, err, &stop));
  EXPECT_TRUE(err.message.empty()) << err.message;
}

TEST(Sha256Tree, HexParsingIsStrict) {
  Sha256Digest d{};
  const std::string good = "997fbef004ecd276aa35803d8de3d4265620d092e3bb898bea32d36272ec8e89";
  ASSERT_TRUE(parse_sha256_hex(good, d));
  EXPECT_EQ(sha256_hex(d), good);
  std::string upper = good;
  upper[0] = 'F';
  EXPECT_FALSE(parse_sha256_hex(upper, d));  // the schemas' ^[0-9a-f]{64}$
  EXPECT_FALSE(parse_sha256_hex(good.substr(1), d));
  EXPECT_FALSE(parse_sha256_hex(good + "0", d));
  EXPECT_FALSE(parse_sha256_hex(std::string(63, '0') + "g", d));
  EXPECT_FALSE(parse_sha256_hex("", d));
}

}  // namespace
}  // namespace ckpt

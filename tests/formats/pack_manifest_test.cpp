// formats/pack_manifest.h: $.source.sha256_tree is optional (a manifest without it parses
// as before), parsed into digests when well formed, and every bad member is a
// PACK_MANIFEST_FIELD finding naming its JSON path: scheme, chunk sizes 0 / not a power of
// two / absurd, a chunk count that does not fit source.size, malformed hex, a root that is
// not the root of the chunks, and never an allocation sized by a claimed count.
#include "formats/pack_manifest.h"

#include <gtest/gtest.h>

#include "core/display.h"
#include "io/sha256_tree.h"

namespace ckpt {
namespace {

constexpr uint64_t kSize = 3 * 65536 + 5;  // 4 chunks of 65536
constexpr uint64_t kChunk = 65536;

std::string digest_of(int i) { return sha256_hex("chunk " + std::to_string(i)); }

std::string root_of(uint64_t chunk, uint64_t size, int count) {
  std::vector<Sha256Digest> chunks;
  for (int i = 0; i < count; ++i) {
    Sha256Digest d{};
    EXPECT_TRUE(parse_sha256_hex(digest_of(i), d));
    chunks.push_back(d);
  }
  return sha256_hex(sha256_tree_root(chunk, size, chunks));
}

std::string chunks_json(int count) {
  std::string s = "[";
  for (int i = 0; i < count; ++i) s += (i ? ",\"" : "\"") + digest_of(i) + "\"";
  return s + "]";
}

std::string tree_json(const std::string& scheme, const std::string& chunk, const std::string& root, const std::string& chunks) {
  return "{\"scheme\":" + scheme + ",\"chunk_size\":" + chunk + ",\"root\":" + root + ",\"chunks\":" + chunks + "}";
}

std::string good_tree() {
  return tree_json("\"ckptkit-sha256-tree/v1\"", std::to_string(kChunk), "\"" + root_of(kChunk, kSize, 4) + "\"", chunks_json(4));
}

// A manifest with no blobs: everything but the tree is as the reader wants it.
std::string manifest(const std::string& tree /* "" for none */) {
  return "{\"schema\":\"ckptkit/expert-pack-manifest/v1\",\"tool\":{\"name\":\"ckptkit\",\"version\":\"0\"},"
         "\"source\":{\"path\":\"in.gguf\",\"name\":\"in.gguf\",\"size\":" + std::to_string(kSize) +
         ",\"sha256\":\"" + std::string(64, 'a') + "\"" + (tree.empty() ? "" : ",\"sha256_tree\":" + tree) +
         "},\"alignment\":4096,\"a_log\":\"fixed\",\"experts_file\":{\"name\":\"experts.bin\",\"size\":0},"
         "\"dense_file\":{\"name\":\"dense.gguf\",\"size\":0},\"layers\":[],\"blobs\":[]}";
}

std::string all(const Findings& f) {
  std::string s;
  for (const auto& x : f.items()) s += x.code + ": " + x.message + "\n";
  return s;
}

TEST(PackManifestTree, AbsentTreeParsesAsBefore) {
  PackManifest m;
  Findings f;
  EXPECT_TRUE(parse_pack_manifest(manifest(""), "manifest.json", m, f)) << all(f);
  EXPECT_FALSE(m.source_tree.has_value());
}

TEST(PackManifestTree, GoodTreeIsParsed) {
  PackManifest m;
  Findings f;
  ASSERT_TRUE(parse_pack_manifest(manifest(good_tree()), "manifest.json", m, f)) << all(f);
  ASSERT_TRUE(m.source_tree.has_value());
  EXPECT_EQ(m.source_tree->chunk_size, kChunk);
  ASSERT_EQ(m.source_tree->chunks.size(), 4u);
  EXPECT_EQ(sha256_hex(m.source_tree->chunks[3]), digest_of(3));
  EXPECT_EQ(sha256_hex(m.source_tree->root), root_of(kChunk, kSize, 4));
}

TEST(PackManifestTree, BadMembersAreFieldFindings) {
  const std::string scheme = "\"ckptkit-sha256-tree/v1\"", chunk = std::to_string(kChunk);
  const std::string root = "\"" + root_of(kChunk, kSize, 4) + "\"";
  std::string upper = root;
  upper[1] = 'A';
  std::string bad_digest = chunks_json(4);
  bad_digest[2] = 'Z';
  struct Case {
    const char* what;
    std::string tree;
    const char* path;  // in the finding's message
  };
  const Case cases[] = {
      {"not an object", "[]", "$.source.sha256_tree is not an object"},
      {"other scheme", tree_json("\"ckptkit-sha256-tree/v2\"", chunk, root, chunks_json(4)), "$.source.sha256_tree.scheme"},
      {"scheme missing", "{\"chunk_size\":65536,\"root\":" + root + ",\"chunks\":" + chunks_json(4) + "}",
       "$.source.sha256_tree.scheme is missing"},
      {"chunk size 0", tree_json(scheme, "0", root, chunks_json(4)), "$.source.sha256_tree.chunk_size is 0"},
      {"chunk size not a power of two", tree_json(scheme, "100000", root, chunks_json(4)), "$.source.sha256_tree.chunk_size is 100000"},
      {"chunk size below the bound", tree_json(scheme, "4096", root, chunks_json(4)), "$.source.sha256_tree.chunk_size is 4096"},
      {"chunk size above the bound", tree_json(scheme, "2147483648", root, chunks_json(4)), "$.source.sha256_tree.chunk_size"},
      {"chunk size absurd", tree_json(scheme, "18446744073709551615", root, chunks_json(4)), "$.source.sha256_tree.chunk_size"},
      {"chunk size negative", tree_json(scheme, "-65536", root, chunks_json(4)), "$.source.sha256_tree.chunk_size"},
      {"chunk size float", tree_json(scheme, "65536.0", root, chunks_json(4)), "$.source.sha256_tree.chunk_size"},
      {"one chunk too few", tree_json(scheme, chunk, root, chunks_json(3)), "$.source.sha256_tree.chunks has 3 digests"},
      {"one chunk too many", tree_json(scheme, chunk, root, chunks_json(5)), "$.source.sha256_tree.chunks has 5 digests"},
      {"no chunks", tree_json(scheme, chunk, root, "[]"), "$.source.sha256_tree.chunks has 0 digests"},
      {"chunks not an array", tree_json(scheme, chunk, root, "{}"), "$.source.sha256_tree.chunks is not an array"},
      {"malformed chunk digest", tree_json(scheme, chunk, root, bad_digest), "$.source.sha256_tree.chunks[0]"},
      {"chunk digest not a string", tree_json(scheme, chunk, root, "[1,2,3,4]"), "$.source.sha256_tree.chunks[0]"},
      {"upper-case root", tree_json(scheme, chunk, upper, chunks_json(4)), "$.source.sha256_tree.root is not 64"},
      {"short root", tree_json(scheme, chunk, "\"abc\"", chunks_json(4)), "$.source.sha256_tree.root is not 64"},
      {"root of other chunks", tree_json(scheme, chunk, "\"" + root_of(kChunk, kSize + 1, 4) + "\"", chunks_json(4)),
       "$.source.sha256_tree.root is not the root of the listed chunks"},
      {"root missing", "{\"scheme\":" + scheme + ",\"chunk_size\":65536,\"chunks\":" + chunks_json(4) + "}",
       "$.source.sha256_tree.root is missing"},
  };
  for (const auto& c : cases) {
    PackManifest m;
    Findings f;
    EXPECT_FALSE(parse_pack_manifest(manifest(c.tree), "manifest.json", m, f)) << c.what;
    EXPECT_FALSE(m.source_tree.has_value()) << c.what;
    ASSERT_TRUE(f.has_code("PACK_MANIFEST_FIELD")) << c.what << "\n" << all(f);
    EXPECT_NE(all(f).find(c.path), std::string::npos) << c.what << "\n" << all(f);
  }
}

// A claimed count of 2^40 chunks (the largest source with the smallest chunks) is refused by
// count, before anything is kept for it.
TEST(PackManifestTree, HugeClaimedCountIsRefusedByCount) {
  std::string text = manifest(good_tree());
  const std::string size = "\"size\":" + std::to_string(kSize);
  text.replace(text.find(size), size.size(), "\"size\":72057594037927935");
  PackManifest m;
  Findings f;
  EXPECT_FALSE(parse_pack_manifest(text, "manifest.json", m, f));
  EXPECT_NE(all(f).find("has 4 digests, but 72057594037927935 source bytes in chunks of 65536 make 1099511627776"),
            std::string::npos)
      << all(f);
}

// Names come back as the bytes the writer's json_string_literal escaped (a GGUF file or
// tensor name may hold a backslash-x sequence or a byte that is not UTF-8).
TEST(PackManifestNames, EscapedNamesReadBackAsTheirBytes) {
  const std::string odd = "experts\\x41-\xff.bin";
  std::string text = manifest("");
  const std::string plain = "\"name\":\"experts.bin\"";
  text.replace(text.find(plain), plain.size(), "\"name\":" + json_string_literal(odd));
  PackManifest m;
  Findings f;
  ASSERT_TRUE(parse_pack_manifest(text, "manifest.json", m, f)) << all(f);
  EXPECT_EQ(m.experts_name, odd);
}

}  // namespace
}  // namespace ckpt

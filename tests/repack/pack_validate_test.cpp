// validate_expert_pack: a fresh pack passes (with the reference and deep too); a flipped
// byte is named by blob and part; truncation and hostile manifests are rejected with a
// PACK_* finding, never a crash. The source's SHA-256 tree: a pack with one validates, a
// changed reference byte is named by its chunk, a manifest without one (an old pack)
// still checks the reference by its SHA-256, bad tree members are refused.
#include "repack/pack_validate.h"

#include <filesystem>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "formats/json.h"
#include "io/sha256_tree.h"
#include "repack/expert_pack.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = test::fixture("ggml/qwen3next-tiny.gguf");

std::string all_findings(const Findings& f) {
  std::string s;
  for (const auto& x : f.items()) s += x.code + " [" + x.tensor + "] " + x.message + "\n";
  return s;
}

// One fresh pack per suite; each test damages its own copy.
class PackValidate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test::TempDir();
    // Both identities (--source-sha256), so that each can be damaged, or removed to give
    // a manifest as written before the tree; ATreeAloneNamesTheSource makes the default.
    RepackOptions both;
    both.source_sha256 = true;
    auto r = repack_experts(kFixture, tmp_->str("pack"), both);
    ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
    RepackOptions tree = both;
    tree.tree_chunk = kTreeChunk;
    r = repack_experts(kFixture, tmp_->str("tree-pack"), tree);
    ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
  }
  static void TearDownTestSuite() { delete tmp_; }
  static std::string fresh() { return tmp_->str("pack"); }
  // The fixture (7,895,936 B) in 8 tree chunks of 1 MiB.
  static constexpr uint64_t kTreeChunk = uint64_t{1} << 20;
  static std::string tree_pack() { return tmp_->str("tree-pack"); }
  // A writable copy of the pack (default: the one with the 64 MiB tree).
  std::string copy(const std::string& from = fresh()) {
    const std::string dir = scratch_.str("copy");
    test::copy_tree(from, dir);
    return dir;
  }
  static Findings validate(const std::string& dir, const std::string& reference = "", bool deep = false) {
    Findings f;
    validate_expert_pack(dir, reference, deep, f);
    return f;
  }
  std::string manifest_text(const std::string& dir) {
    auto b = test::read_file(dir + "/manifest.json");
    return std::string(b.begin(), b.end());
  }
  // Replaces the first occurrence of `from` in the manifest; fails the test if absent.
  void edit_manifest(const std::string& dir, const std::string& from, const std::string& to) {
    std::string text = manifest_text(dir);
    auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    test::write_text(dir + "/manifest.json", text);
  }
  // Removes $.source.sha256_tree: the manifest as repack wrote it before the tree.
  void strip_tree(const std::string& dir) {
    std::string text = manifest_text(dir);
    const auto at = text.find(",\"sha256_tree\":{");
    ASSERT_NE(at, std::string::npos);
    const auto end = text.find('}', at);
    text.erase(at, end + 1 - at);
    test::write_text(dir + "/manifest.json", text);
  }
  static test::TempDir* tmp_;
  test::TempDir scratch_;
};
test::TempDir* PackValidate::tmp_ = nullptr;

TEST_F(PackValidate, FreshPackPasses) {
  EXPECT_TRUE(is_expert_pack(fresh()));
  EXPECT_FALSE(is_expert_pack(kFixture));
  EXPECT_FALSE(is_expert_pack(test::fixture("oracle/dsv4-tiny")));
  auto plain = validate(fresh());
  EXPECT_FALSE(plain.has_errors()) << all_findings(plain);
  EXPECT_EQ(plain.items().size(), 0u) << all_findings(plain);
  auto with_ref = validate(fresh(), kFixture, true);
  EXPECT_FALSE(with_ref.has_errors()) << all_findings(with_ref);
}

TEST_F(PackValidate, ValidatePathRunsThePackValidator) {
  ValidateOptions o;
  o.reference = kFixture;
  o.deep = true;
  auto report = validate_path(fresh(), o);
  EXPECT_EQ(report.format, "expert-pack");
  EXPECT_FALSE(report.findings.has_errors()) << all_findings(report.findings);
}

TEST_F(PackValidate, FlippedByteNamesBlobAndPart) {
  const std::string dir = copy();
  auto bytes = test::read_file(dir + "/experts.bin");
  // Layer 0 blob stride 188,416 B: byte 200,000 is in expert 1's gate part (56,320 B).
  bytes[200000] ^= 0x01;
  test::write_file(dir + "/experts.bin", bytes);
  auto f = validate(dir);
  ASSERT_TRUE(f.has_code("PACK_PART_HASH")) << all_findings(f);
  EXPECT_EQ(f.count_code("PACK_PART_HASH"), 1u);
  const auto& hash = f.items().front();
  EXPECT_EQ(hash.tensor, "blk.0.ffn_gate_exps.weight");
  EXPECT_NE(hash.message.find("layer 0 expert 1"), std::string::npos) << hash.message;
  auto with_ref = validate(dir, kFixture);
  ASSERT_TRUE(with_ref.has_code("PACK_SOURCE_MISMATCH")) << all_findings(with_ref);
  for (const auto& x : with_ref.items()) {
    if (x.code != "PACK_SOURCE_MISMATCH") continue;
    EXPECT_EQ(x.offset, 200000u);
    EXPECT_NE(x.message.find("layer 0 expert 1"), std::string::npos) << x.message;
  }
}

TEST_F(PackValidate, ReferenceMustBeTheSource) {
  test::TempDir other;
  auto bytes = test::read_file(kFixture);
  bytes.back() ^= 0x01;  // padding of the last tensor: same header, other SHA-256
  test::write_file(other.str("other.gguf"), bytes);
  auto f = validate(fresh(), other.str("other.gguf"));
  EXPECT_TRUE(f.has_code("PACK_SOURCE_SHA256")) << all_findings(f);
}

TEST_F(PackValidate, TruncatedExpertsBinIsRejected) {
  for (uint64_t keep : {uint64_t{0}, uint64_t{100000}, uint64_t{188416}, uint64_t{5931008 - 4096}}) {
    const std::string dir = copy();
    fs::resize_file(dir + "/experts.bin", keep);
    auto f = validate(dir);
    EXPECT_TRUE(f.has_code("PACK_FILE_SIZE")) << keep;
    EXPECT_TRUE(f.has_code("PACK_BLOB_RANGE")) << keep << "\n" << all_findings(f);
    fs::remove_all(dir);
  }
}

TEST_F(PackValidate, DenseDamageIsRejected) {
  const std::string dir = copy();
  fs::resize_file(dir + "/dense.gguf", 1000);
  auto f = validate(dir);
  EXPECT_TRUE(f.has_code("PACK_DENSE_INVALID")) << all_findings(f);
  EXPECT_TRUE(f.has_code("PACK_FILE_SIZE"));
}

struct ManifestCase {
  const char* what;
  const char* from;
  const char* to;
  const char* code;
};

// Hostile or broken manifests: each names its fault, none crashes (ASan run covers this).
TEST_F(PackValidate, BrokenManifestsAreRejected) {
  const ManifestCase cases[] = {
      {"escaping experts name", "\"name\":\"experts.bin\"", "\"name\":\"../experts.bin\"", "PACK_NAME_ESCAPES"},
      {"absolute dense name", "\"name\":\"dense.gguf\"", "\"name\":\"/etc/passwd\"", "PACK_NAME_ESCAPES"},
      {"overlapping blob", "\"expert\":1,\"offset\":188416", "\"expert\":1,\"offset\":0", "PACK_BLOB_OVERLAP"},
      {"duplicate blob", "\"layer\":0,\"expert\":1,", "\"layer\":0,\"expert\":0,", "PACK_BLOB_DUPLICATE"},
      {"unaligned blob", "\"expert\":1,\"offset\":188416", "\"expert\":1,\"offset\":188417", "PACK_BLOB_UNALIGNED"},
      {"blob past the end", "\"expert\":1,\"offset\":188416", "\"expert\":1,\"offset\":5931008", "PACK_BLOB_RANGE"},
      {"part past the blob", "\"offset\":56320,\"size\":56320", "\"offset\":140048,\"size\":56320", "PACK_PART_RANGE"},
      {"overlapping parts", "\"offset\":56320,\"size\":56320", "\"offset\":1000,\"size\":56320", "PACK_PART_OVERLAP"},
      {"part size vs type", "\"type\":\"IQ3_S\",\"type_id\":21,\"ne\":[256,512],", "\"type\":\"Q8_0\",\"type_id\":8,\"ne\":[256,512],", "PACK_PART_SIZE"},
      {"huge offset", "\"expert\":1,\"offset\":188416", "\"expert\":1,\"offset\":18446744073709551615", "PACK_MANIFEST_FIELD"},
      {"negative size", "\"expert\":1,\"offset\":188416,\"size\":186368", "\"expert\":1,\"offset\":188416,\"size\":-1", "PACK_MANIFEST_FIELD"},
      {"float offset", "\"expert\":1,\"offset\":188416", "\"expert\":1,\"offset\":1.5", "PACK_MANIFEST_FIELD"},
      {"alignment not a power of two", "\"alignment\":4096", "\"alignment\":3000", "PACK_ALIGNMENT"},
      {"wrong schema", "ckptkit/expert-pack-manifest/v1", "ckptkit/other/v9", "PACK_MANIFEST_FIELD"},
      {"missing blobs", "\"blobs\":", "\"blobz\":", "PACK_MANIFEST_FIELD"},
      {"bad xxh3", "\"xxh3\":\"", "\"xxh3\":\"zz", "PACK_MANIFEST_FIELD"},
      {"empty tensor name", "\"tensor\":\"blk.0.ffn_gate_exps.weight\",\"role\":\"gate\",\"type\":\"IQ3_S\",\"type_id\":21,\"ne\":[256,512]",
       "\"tensor\":\"\",\"role\":\"gate\",\"type\":\"IQ3_S\",\"type_id\":21,\"ne\":[256,512]", "PACK_MANIFEST_FIELD"},
      {"not JSON", "{", "[", "PACK_MANIFEST_PARSE"},
  };
  for (const auto& c : cases) {
    const std::string dir = copy();
    edit_manifest(dir, c.from, c.to);
    auto f = validate(dir, kFixture, true);
    EXPECT_TRUE(f.has_code(c.code)) << c.what << "\n" << all_findings(f);
    EXPECT_TRUE(f.has_errors()) << c.what;
    fs::remove_all(dir);
  }
}

TEST_F(PackValidate, MissingManifestOrFiles) {
  const std::string dir = copy();
  fs::remove(dir + "/experts.bin");
  auto no_experts = validate(dir);
  EXPECT_TRUE(no_experts.has_code("PACK_FILE_MISSING")) << all_findings(no_experts);
  fs::remove(dir + "/manifest.json");
  auto no_manifest = validate(dir);
  EXPECT_TRUE(no_manifest.has_code("PACK_MANIFEST_MISSING"));
}

TEST_F(PackValidate, NonZeroPaddingIsAWarning) {
  const std::string dir = copy();
  auto bytes = test::read_file(dir + "/experts.bin");
  bytes[186368 + 10] = 0xAA;  // after layer 0 expert 0's 186,368 B, before the next blob
  test::write_file(dir + "/experts.bin", bytes);
  auto f = validate(dir);
  EXPECT_TRUE(f.has_code("PACK_PADDING_NONZERO")) << all_findings(f);
  EXPECT_FALSE(f.has_errors()) << all_findings(f);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

std::string one_shot_hex(const uint8_t* data, size_t n) {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_Digest(data, n, d.data(), &len, EVP_sha256(), nullptr);
  return sha256_hex(d);
}

// A clean --source-sha256 repack records both identities; its tree's chunks are the fixture's 1 MiB
// slices' SHA-256 (OpenSSL one-shot here) and the pack validates against the fixture.
TEST_F(PackValidate, TreePackValidatesFromACleanRepack) {
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(manifest_text(tree_pack()), error)) << error;
  auto src = doc.root()["source"];
  std::string_view sha, scheme;
  ASSERT_FALSE(src["sha256"].get_string().get(sha));
  auto bytes = test::read_file(kFixture);
  EXPECT_EQ(sha, one_shot_hex(bytes.data(), bytes.size()));  // kept for sha256sum users
  auto tree = src["sha256_tree"];
  ASSERT_FALSE(tree["scheme"].get_string().get(scheme));
  EXPECT_EQ(scheme, "ckptkit-sha256-tree/v1");
  uint64_t chunk = 0;
  ASSERT_FALSE(tree["chunk_size"].get_uint64().get(chunk));
  EXPECT_EQ(chunk, kTreeChunk);
  simdjson::dom::array chunks;
  ASSERT_FALSE(tree["chunks"].get_array().get(chunks));
  ASSERT_EQ(chunks.size(), 8u);
  size_t i = 0;
  for (auto c : chunks) {
    std::string_view hex;
    ASSERT_FALSE(c.get_string().get(hex));
    const size_t at = i++ * kTreeChunk;
    EXPECT_EQ(hex, one_shot_hex(bytes.data() + at, std::min<size_t>(kTreeChunk, bytes.size() - at))) << "chunk " << i - 1;
  }
  PackManifest m;
  Findings parsed;
  ASSERT_TRUE(read_pack_manifest(tree_pack(), m, parsed)) << all_findings(parsed);
  ASSERT_TRUE(m.source_tree.has_value());
  auto f = validate(tree_pack(), kFixture, true);
  EXPECT_EQ(f.items().size(), 0u) << all_findings(f);
  // The default pack's tree has one 64 MiB chunk.
  Findings parsed_default;
  PackManifest md;
  ASSERT_TRUE(read_pack_manifest(fresh(), md, parsed_default)) << all_findings(parsed_default);
  ASSERT_TRUE(md.source_tree.has_value());
  EXPECT_EQ(md.source_tree->chunk_size, kSha256TreeDefaultChunk);
  EXPECT_EQ(md.source_tree->chunks.size(), 1u);
}

// A one-byte change anywhere in the reference: PACK_SOURCE_SHA256 naming that chunk and
// its byte range, at the chunk's first byte; nothing compared after it.
TEST_F(PackValidate, ChangedReferenceByteIsNamedByChunk) {
  test::TempDir other;
  const auto bytes = test::read_file(kFixture);
  const uint64_t n = (bytes.size() + kTreeChunk - 1) / kTreeChunk;
  for (uint64_t c = 0; c < n; ++c) {
    auto changed = bytes;
    const uint64_t at = std::min<uint64_t>(bytes.size() - 1, c * kTreeChunk + (c * 130003) % kTreeChunk);
    changed[at] ^= 0x01;
    test::write_file(other.str("ref.gguf"), changed);
    auto f = validate(tree_pack(), other.str("ref.gguf"));
    ASSERT_EQ(f.count_code("PACK_SOURCE_SHA256"), 1u) << c << "\n" << all_findings(f);
    EXPECT_FALSE(f.has_code("PACK_SOURCE_MISMATCH")) << c;  // not the source: its parts are not compared
    for (const auto& x : f.items()) {
      if (x.code != "PACK_SOURCE_SHA256") continue;
      const uint64_t begin = c * kTreeChunk, end = std::min<uint64_t>(bytes.size(), begin + kTreeChunk);
      EXPECT_EQ(x.offset, begin) << x.message;
      const std::string range = "reference bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") (chunk " +
                                std::to_string(c) + " of " + std::to_string(n) + ", chunk size 1048576)";
      EXPECT_NE(x.message.find(range), std::string::npos) << x.message;
      EXPECT_NE(x.message.find("1 of " + std::to_string(n) + " chunks differ"), std::string::npos) << x.message;
    }
  }
}

TEST_F(PackValidate, ReferenceOfAnotherSizeIsNotTheSource) {
  test::TempDir other;
  auto bytes = test::read_file(kFixture);
  bytes.push_back(0);
  test::write_file(other.str("longer.gguf"), bytes);
  auto f = validate(tree_pack(), other.str("longer.gguf"));
  ASSERT_TRUE(f.has_code("PACK_SOURCE_SHA256")) << all_findings(f);
  EXPECT_NE(all_findings(f).find("reference is 7895937 bytes, the manifest's source has 7895936"), std::string::npos)
      << all_findings(f);
}

// A manifest without the tree (as written before it) validates, the reference checked by
// its SHA-256 in one stream; a changed reference is the whole-file message of before.
TEST_F(PackValidate, OldManifestWithoutTreeUsesTheSha256) {
  const std::string dir = copy(tree_pack());
  strip_tree(dir);
  PackManifest m;
  Findings parsed;
  ASSERT_TRUE(read_pack_manifest(dir, m, parsed)) << all_findings(parsed);
  EXPECT_FALSE(m.source_tree.has_value());
  auto f = validate(dir, kFixture, true);
  EXPECT_EQ(f.items().size(), 0u) << all_findings(f);
  test::TempDir other;
  auto bytes = test::read_file(kFixture);
  bytes[3 * kTreeChunk + 5] ^= 0x01;
  test::write_file(other.str("ref.gguf"), bytes);
  auto bad = validate(dir, other.str("ref.gguf"));
  ASSERT_EQ(bad.count_code("PACK_SOURCE_SHA256"), 1u) << all_findings(bad);
  EXPECT_NE(all_findings(bad).find("reference SHA-256 is "), std::string::npos) << all_findings(bad);
}

// Beside a tree, the manifest's whole-file source.sha256 is proven by --deep (one stream):
// a manifest edited there alone passes the tree check, and --deep names it.
TEST_F(PackValidate, DeepProvesTheWholeFileSha256BesideATree) {
  const std::string dir = copy(tree_pack());
  PackManifest m;
  Findings parsed;
  ASSERT_TRUE(read_pack_manifest(dir, m, parsed)) << all_findings(parsed);
  ASSERT_TRUE(m.source_tree.has_value());
  std::string wrong = m.source_sha256;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  edit_manifest(dir, "\"sha256\":\"" + m.source_sha256 + "\"", "\"sha256\":\"" + wrong + "\"");
  EXPECT_EQ(validate(dir, kFixture).items().size(), 0u);  // the tree alone: as documented
  auto deep = validate(dir, kFixture, true);
  ASSERT_EQ(deep.count_code("PACK_SOURCE_SHA256"), 1u) << all_findings(deep);
  EXPECT_NE(all_findings(deep).find("the manifest's source has " + wrong), std::string::npos) << all_findings(deep);
  EXPECT_EQ(validate(tree_pack(), kFixture, true).items().size(), 0u);
}

// The default (no --source-sha256): the manifest names its source by the tree alone (no
// whole-file digest, the one-stream hash that bounds a repack on a fast disk). It validates against
// its source with and without --deep, and a changed reference byte is still named by its
// chunk; a manifest with neither identity names no source and is refused.
TEST_F(PackValidate, ATreeAloneNamesTheSource) {
  RepackOptions o;
  o.tree_chunk = kTreeChunk;
  ASSERT_FALSE(o.source_sha256) << "the default";
  const auto r = repack_experts(kFixture, scratch_.str("tree-only"), o);
  ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
  EXPECT_EQ(r.source_sha256, "");
  EXPECT_FALSE(r.source_tree_root.empty());
  const std::string dir = scratch_.str("tree-only");
  EXPECT_EQ(manifest_text(dir).find("\"sha256\":"), std::string::npos) << "no whole-file digest written";
  PackManifest m;
  Findings parsed;
  ASSERT_TRUE(read_pack_manifest(dir, m, parsed)) << all_findings(parsed);
  EXPECT_EQ(m.source_sha256, "");
  ASSERT_TRUE(m.source_tree.has_value());
  EXPECT_EQ(validate(dir, kFixture).items().size(), 0u);
  EXPECT_EQ(validate(dir, kFixture, true).items().size(), 0u);
  test::TempDir other;
  auto bytes = test::read_file(kFixture);
  bytes[2 * kTreeChunk + 7] ^= 0x01;
  test::write_file(other.str("ref.gguf"), bytes);
  for (bool deep : {false, true}) {
    auto bad = validate(dir, other.str("ref.gguf"), deep);
    ASSERT_EQ(bad.count_code("PACK_SOURCE_SHA256"), 1u) << all_findings(bad);
    EXPECT_NE(all_findings(bad).find("(chunk 2 of 8"), std::string::npos) << all_findings(bad);
  }
  // The data files are those of a pack with both identities.
  EXPECT_EQ(test::read_file(dir + "/experts.bin"), test::read_file(tree_pack() + "/experts.bin"));
  EXPECT_EQ(test::read_file(dir + "/dense.gguf"), test::read_file(tree_pack() + "/dense.gguf"));
  strip_tree(dir);
  PackManifest none;
  Findings refused;
  EXPECT_FALSE(read_pack_manifest(dir, none, refused));
  EXPECT_NE(all_findings(refused).find("$.source.sha256 is missing"), std::string::npos) << all_findings(refused);
}

// Bad tree members in a pack's manifest: PACK_MANIFEST_FIELD naming the member, nothing
// else checked (as for every other member).
TEST_F(PackValidate, BadTreeMembersAreRefused) {
  const ManifestCase cases[] = {
      {"chunk size 0", "\"chunk_size\":1048576", "\"chunk_size\":0", "$.source.sha256_tree.chunk_size is 0"},
      {"chunk size absurd", "\"chunk_size\":1048576", "\"chunk_size\":72057594037927936", "$.source.sha256_tree.chunk_size"},
      {"chunk count vs source size", "\"chunk_size\":1048576", "\"chunk_size\":2097152",
       "$.source.sha256_tree.chunks has 8 digests, but 7895936 source bytes in chunks of 2097152 make 4"},
      {"malformed root", "\"root\":\"", "\"root\":\"x", "$.source.sha256_tree.root is not 64 lowercase hex digits"},
      {"malformed chunk", "\"chunks\":[\"", "\"chunks\":[\"X", "$.source.sha256_tree.chunks[0] is not 64 lowercase hex digits"},
      {"other scheme", "ckptkit-sha256-tree/v1", "ckptkit-sha256-tree/v0", "$.source.sha256_tree.scheme is 'ckptkit-sha256-tree/v0'"},
  };
  for (const auto& c : cases) {
    const std::string dir = copy(tree_pack());
    edit_manifest(dir, c.from, c.to);
    auto f = validate(dir, kFixture, true);
    ASSERT_TRUE(f.has_code("PACK_MANIFEST_FIELD")) << c.what << "\n" << all_findings(f);
    EXPECT_NE(all_findings(f).find(c.code), std::string::npos) << c.what << "\n" << all_findings(f);
    fs::remove_all(dir);
  }
  // A tree whose chunk list does not hash to its root (one digest swapped for another).
  const std::string dir = copy(tree_pack());
  PackManifest m;
  Findings parsed;
  ASSERT_TRUE(read_pack_manifest(dir, m, parsed));
  edit_manifest(dir, "\"" + sha256_hex(m.source_tree->chunks[0]) + "\"", "\"" + sha256_hex(m.source_tree->chunks[1]) + "\"");
  auto f = validate(dir, kFixture);
  EXPECT_NE(all_findings(f).find("$.source.sha256_tree.root is not the root of the listed chunks"), std::string::npos)
      << all_findings(f);
}

}  // namespace
}  // namespace ckpt

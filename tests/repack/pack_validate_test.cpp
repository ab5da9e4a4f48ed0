// validate_expert_pack: a fresh pack passes (with the reference and deep too); a flipped
// byte is named by blob and part; truncation and hostile manifests are rejected with a
// PACK_* finding, never a crash.
#include "repack/pack_validate.h"

#include <filesystem>

#include <gtest/gtest.h>

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
    auto r = repack_experts(kFixture, tmp_->str("pack"), RepackOptions{});
    ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
  }
  static void TearDownTestSuite() { delete tmp_; }
  static std::string fresh() { return tmp_->str("pack"); }
  // A writable copy of the pack.
  std::string copy() {
    const std::string dir = scratch_.str("copy");
    test::copy_tree(fresh(), dir);
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

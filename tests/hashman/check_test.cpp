// `ckpt hash --check` covers every file of the model directory, not only the shards: a
// changed, missing or extra config, index or tokenizer file fails the check (coreutils
// style lines and exit code 1), with or without --no-file-hashes, for checkpoints and packs.
#include "hashman/check.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

class HashCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    test::copy_tree(test::fixture("oracle/dsv3-tiny"), model_);
    test::write_text(model_ + "/tokenizer.json", "{\"version\":\"1.0\"}");
  }
  void make_manifest(const std::string& extra = "") {
    auto r = test::run_ckpt("hash -q " + extra + " -o " + q(manifest_) + " " + q(model_));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  test::RunResult check() { return test::run_ckpt("hash -q --check " + q(manifest_) + " " + q(model_)); }

  test::TempDir tmp_;
  const std::string model_ = tmp_.str("model"), manifest_ = tmp_.str("m.json");
};

TEST_F(HashCheck, AReplacedConfigAndADeletedIndexFailInsteadOfAllOk) {
  make_manifest();
  EXPECT_EQ(check().exit_code, 0);
  test::write_text(model_ + "/config.json", "{}");
  fs::remove(model_ + "/model.safetensors.index.json");
  auto r = check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("config.json: FAILED (size "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.safetensors.index.json: FAILED (open or read)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("ckpt hash: WARNING: 1 listed file could not be read"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("checksums OK"), std::string::npos) << r.err;
}

TEST_F(HashCheck, AChangedTokenizerOfTheSameSizeFails) {
  make_manifest();
  test::write_text(model_ + "/tokenizer.json", "{\"version\":\"2.0\"}");
  auto r = check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "tokenizer.json: FAILED\n");
}

TEST_F(HashCheck, AnExtraSideFileFails) {
  make_manifest();
  fs::create_directories(model_ + "/original");
  test::write_text(model_ + "/original/params.json", "{}");
  auto r = check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "original/params.json: FAILED (not in manifest)\n");
}

TEST_F(HashCheck, SideFilesAreHashedEvenWithoutFileHashes) {
  make_manifest("--no-file-hashes --algo both");
  const std::string text = test::read_text(manifest_);
  // A shard carries no file hash, only its header's (what no tensor hash covers).
  EXPECT_NE(text.find("{\"name\":\"model-00001-of-00002.safetensors\",\"size\":296288,\"header_bytes\":"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("{\"name\":\"model-00001-of-00002.safetensors\",\"size\":296288,\"xxh3\":"), std::string::npos)
      << text;
  EXPECT_NE(text.find("{\"name\":\"tokenizer.json\",\"size\":17,\"xxh3\":"), std::string::npos) << text;
  EXPECT_EQ(check().exit_code, 0);
  test::write_text(model_ + "/tokenizer.json", "{\"version\":\"2.0\"}");
  auto r = check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "tokenizer.json: FAILED\n");
}

TEST_F(HashCheck, HiddenEntriesAreNoPartOfTheModel) {
  make_manifest();
  fs::create_directories(model_ + "/.ckptkit");
  test::write_text(model_ + "/.ckptkit/lock", "1234");
  test::write_text(model_ + "/.gitattributes", "*.safetensors filter=lfs");
  EXPECT_EQ(check().exit_code, 0);
}

TEST_F(HashCheck, ASideFileLinkLeavingTheCheckpointIsRefusedNotHashed) {
  test::write_text(tmp_.str("secret"), "key");
  fs::remove(model_ + "/tokenizer.json");
  fs::create_symlink(tmp_.str("secret"), model_ + "/tokenizer.json");
  auto r = test::run_ckpt("hash -q " + q(model_));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("LINK_ESCAPE"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(HashCheckPack, AChangedPackManifestFails) {
  test::TempDir tmp;
  const std::string pack = tmp.str("pack");
  ASSERT_EQ(test::run_ckpt("repack-experts -q " + q(test::fixture("ggml/qwen3next-tiny.gguf")) + " " + q(pack)).exit_code,
            0);
  ASSERT_EQ(test::run_ckpt("hash -q -o " + q(tmp.str("m.json")) + " " + q(pack)).exit_code, 0);
  // Same length, same geometry: only a member no tensor hash covers changes.
  std::string manifest = test::read_text(pack + "/manifest.json");
  const size_t at = manifest.find("\"a_log\":\"fixed\"");
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, 15, "\"a_log\":\"fixeD\"");
  test::write_text(pack + "/manifest.json", manifest);
  auto r = test::run_ckpt("hash -q --check " + q(tmp.str("m.json")) + " " + q(pack));
  EXPECT_NE(r.out.find("manifest.json: FAILED\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.exit_code, 0);
}

TEST(HashManifestParse, AFileNoTensorLiesInMustCarryItsHashes) {
  const std::string head = R"({"schema":"ckptkit/hash-manifest/v1","format":"safetensors","algorithms":["xxh3"],)"
                           R"("dequant":false,"file_hashes":false,"model":{"tensor_count":1,"bytes":2,"xxh3":"0000000000000000"},)";
  const std::string tensors =
      R"("tensors":[{"name":"t","type":"BF16","shape":[1],"bytes":2,"file":"m.safetensors","xxh3":"1111111111111111"}]})";
  HashManifest m;
  Findings f;
  EXPECT_TRUE(parse_hash_manifest(head + R"("files":[{"name":"config.json","size":2,"xxh3":"2222222222222222"},)"
                                         R"({"name":"m.safetensors","size":90}],)" + tensors,
                                  "m.json", m, f))
      << test::describe(f);
  Findings g;
  EXPECT_FALSE(parse_hash_manifest(head + R"("files":[{"name":"config.json","size":2},)"
                                          R"({"name":"m.safetensors","size":90}],)" + tensors,
                                   "m.json", m, g));
  EXPECT_NE(test::describe(g).find("$.files[0].xxh3 is missing"), std::string::npos) << test::describe(g);
}

}  // namespace
}  // namespace ckpt

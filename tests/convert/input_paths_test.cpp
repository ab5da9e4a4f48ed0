// Paths and links on the input side (issue 14): one rule for every file read, shards and
// side files alike, with or without an index (formats/model_files.h); copies keep the
// source's permission bits; stray .safetensors and pickles are named, never read.
#include <filesystem>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using test::describe;
const auto q = test::shell_quote;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

ConvertReport convert(const std::string& in, const std::string& out) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  return convert_checkpoint(o);
}

void write_one_shard(const std::string& path) {
  test::write_file(path, test::make_safetensors("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", {7}));
}

TEST(Paths, ASideFileLinkedOutsideTheCheckpointIsNeverCopied) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  test::write_text(tmp.str("secret"), "password");
  ASSERT_EQ(chmod(tmp.str("secret").c_str(), 0600), 0);
  fs::create_symlink("../secret", fs::path(in) / "notes.txt");
  fs::create_symlink("../secret", fs::path(in) / "tokenizer.json");

  Checkpoint ck;
  Findings f;
  open_checkpoint(in, StReadOptions{}, ck, f);
  EXPECT_TRUE(f.has_code("LINK_ESCAPE")) << describe(f);

  const auto r = convert(in, tmp.str("out"));
  EXPECT_NE(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_TRUE(r.findings.has_code("LINK_ESCAPE")) << describe(r.findings);
  EXPECT_FALSE(fs::exists(tmp.str("out/notes.txt")));
  EXPECT_FALSE(fs::exists(tmp.str("out/tokenizer.json")));
}

TEST(Paths, ALoneShardLinkedOutsideIsRefusedWithoutAnIndex) {
  test::TempDir tmp;
  write_one_shard(tmp.str("elsewhere.safetensors"));
  fs::create_directories(tmp.str("in"));
  fs::create_symlink("../elsewhere.safetensors", tmp.path() / "in" / "model.safetensors");
  Checkpoint ck;
  Findings f;
  open_checkpoint(tmp.str("in"), StReadOptions{}, ck, f);
  EXPECT_TRUE(f.has_code("LINK_ESCAPE")) << describe(f);
  EXPECT_TRUE(f.has_errors());
  for (const auto& s : ck.shards) EXPECT_FALSE(s.header.has_value()) << s.name << " was read";
  auto v = test::run_ckpt("validate " + q(tmp.str("in")));
  EXPECT_NE(v.exit_code, 0) << v.out;
}

TEST(Paths, HubCacheSnapshotLinksStayAllowed) {
  test::TempDir tmp;
  fs::create_directories(tmp.path() / "blobs");
  fs::create_directories(tmp.path() / "snapshots" / "rev");
  write_one_shard(tmp.str("blobs/abc123"));
  test::write_text(tmp.str("blobs/def456"), "{\"model_type\":\"x\"}");
  fs::create_symlink("../../blobs/abc123", tmp.path() / "snapshots" / "rev" / "model.safetensors");
  fs::create_symlink("../../blobs/def456", tmp.path() / "snapshots" / "rev" / "config.json");
  Checkpoint ck;
  Findings f;
  open_checkpoint(tmp.str("snapshots/rev"), StReadOptions{}, ck, f);
  EXPECT_FALSE(f.has_errors()) << describe(f);
  ASSERT_EQ(ck.shards.size(), 1u);
  EXPECT_TRUE(ck.shards[0].header.has_value());
  EXPECT_TRUE(ck.config != nullptr);
}

TEST(Paths, CopiedSideFilesKeepTheirPermissionBits) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  test::write_text(in + "/notes.txt", "private notes");
  test::write_text(in + "/tokenizer.json", "{}");
  ASSERT_EQ(chmod((in + "/notes.txt").c_str(), 0600), 0);
  ASSERT_EQ(chmod((in + "/tokenizer.json").c_str(), 0640), 0);
  const auto r = convert(in, tmp.str("out"));
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(mode_of(tmp.str("out/notes.txt")), 0600u);
  EXPECT_EQ(mode_of(tmp.str("out/tokenizer.json")), 0640u);
}

TEST(Paths, NestedShardsAndPicklesAreNamedInWarnings) {
  test::TempDir tmp;
  write_one_shard(tmp.str("model.safetensors"));
  fs::create_directories(tmp.path() / "extra");
  write_one_shard(tmp.str("extra/more.safetensors"));
  test::write_text(tmp.str("pytorch_model.bin"), "not really a pickle");
  test::write_text(tmp.str("original.pth"), "not really a pickle");
  Checkpoint ck;
  Findings f;
  open_checkpoint(tmp.str(), StReadOptions{}, ck, f);
  EXPECT_FALSE(f.has_errors()) << describe(f);
  EXPECT_EQ(f.count_code("ST_NESTED_IGNORED"), 1u) << describe(f);
  EXPECT_EQ(f.count_code("PICKLE_PRESENT"), 2u) << describe(f);
  auto v = test::run_ckpt("validate " + q(tmp.str()));
  EXPECT_NE(v.out.find("extra/more.safetensors"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("pytorch_model.bin"), std::string::npos) << v.out;
}

}  // namespace
}  // namespace ckpt

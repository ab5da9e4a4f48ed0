// The files of a model directory (formats/model_files.h): every regular file, sorted, with
// hidden entries skipped; links that leave the directory, FIFOs and dangling links are
// errors and never opened; the Hub cache layout stays allowed.
#include "formats/model_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const std::vector<ModelFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.name);
  return out;
}

TEST(ModelFiles, EveryFileIsListedSortedWithHiddenEntriesSkipped) {
  test::TempDir tmp;
  const std::string dir = tmp.str("m");
  fs::create_directories(dir + "/original");
  fs::create_directories(dir + "/.ckptkit/records");
  fs::create_directories(dir + "/.cache/huggingface");
  test::write_text(dir + "/config.json", "{}");
  test::write_text(dir + "/tokenizer.json", "{}");
  test::write_text(dir + "/model.safetensors", "x");
  test::write_text(dir + "/original/params.json", "{}");
  test::write_text(dir + "/.gitattributes", "*");
  test::write_text(dir + "/.ckptkit/records/a.json", "{}");
  test::write_text(dir + "/.cache/huggingface/x.metadata", "t");
  std::vector<ModelFile> files;
  Findings f;
  ASSERT_TRUE(list_model_files(dir, files, f)) << test::describe(f);
  EXPECT_EQ(names(files),
            (std::vector<std::string>{"config.json", "model.safetensors", "original/params.json", "tokenizer.json"}));
  EXPECT_EQ(files[2].size, 2u);
  EXPECT_EQ(files[2].path, dir + "/original/params.json");
  EXPECT_TRUE(f.items().empty()) << test::describe(f);
}

TEST(ModelFiles, ALinkLeavingTheDirectoryIsAnErrorAndNotListed) {
  test::TempDir tmp;
  const std::string dir = tmp.str("m");
  fs::create_directories(dir);
  test::write_text(tmp.str("secret"), "key");
  test::write_text(dir + "/config.json", "{}");
  fs::create_symlink(tmp.str("secret"), dir + "/tokenizer.json");
  fs::create_symlink("config.json", dir + "/alias.json");  // inside: followed
  std::vector<ModelFile> files;
  Findings f;
  EXPECT_FALSE(list_model_files(dir, files, f));
  EXPECT_TRUE(f.has_code("LINK_ESCAPE")) << test::describe(f);
  EXPECT_EQ(names(files), (std::vector<std::string>{"alias.json", "config.json"}));
}

TEST(ModelFiles, AFifoIsAnErrorNotAHang) {
  test::TempDir tmp;
  const std::string dir = tmp.str("m");
  fs::create_directories(dir);
  ASSERT_EQ(mkfifo((dir + "/tokenizer.json").c_str(), 0600), 0);
  fs::create_symlink("nowhere", dir + "/dangling.json");
  std::vector<ModelFile> files;
  Findings f;
  EXPECT_FALSE(list_model_files(dir, files, f));
  EXPECT_TRUE(f.has_code("IO_NOT_REGULAR")) << test::describe(f);
  EXPECT_TRUE(f.has_code("IO_OPEN")) << test::describe(f);  // the dangling link
  EXPECT_TRUE(files.empty());
}

TEST(ModelFiles, HubCacheBlobLinksAreAllowed) {
  test::TempDir tmp;
  const std::string snap = tmp.str("models--x/snapshots/abc");
  fs::create_directories(snap);
  fs::create_directories(tmp.str("models--x/blobs"));
  test::write_text(tmp.str("models--x/blobs/0123"), "{}");
  fs::create_symlink("../../blobs/0123", snap + "/config.json");
  std::vector<ModelFile> files;
  Findings f;
  ASSERT_TRUE(list_model_files(snap, files, f)) << test::describe(f);
  EXPECT_EQ(names(files), std::vector<std::string>{"config.json"});
}

TEST(ModelFiles, ALinkToADirectoryIsNotFollowedAndSaysSo) {
  test::TempDir tmp;
  const std::string dir = tmp.str("m");
  fs::create_directories(dir + "/sub");
  test::write_text(dir + "/sub/a.txt", "a");
  fs::create_directory_symlink("sub", dir + "/loop");
  std::vector<ModelFile> files;
  Findings f;
  EXPECT_TRUE(list_model_files(dir, files, f));
  EXPECT_TRUE(f.has_code("LINK_DIR_NOT_FOLLOWED")) << test::describe(f);
  EXPECT_EQ(names(files), std::vector<std::string>{"sub/a.txt"});
}

TEST(ModelFiles, PlainRelativePathsStayInsideByThemselves) {
  for (const char* ok : {"config.json", "original/params.json", ".gitattributes", "a b/c d.txt"})
    EXPECT_TRUE(is_plain_relative_path(ok)) << ok;
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/", "a\\b", "a\nb", "a\x1b[2Jb",
                          "."})
    EXPECT_FALSE(is_plain_relative_path(bad)) << bad;
  EXPECT_FALSE(is_plain_relative_path(std::string(4097, 'a')));
}

}  // namespace
}  // namespace ckpt

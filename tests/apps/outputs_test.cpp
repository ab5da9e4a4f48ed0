// Issue 14 "Inputs are never written": every report and data output goes through one
// opening function (io/output_file.h) that refuses an output which is an input (same
// device and inode: the path itself, a hard link, a symlink) or lies inside an input
// directory: exit 2, the path named, the input unchanged.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;
namespace fs = std::filesystem;

constexpr const char* kShard1 = "model-00001-of-00007.safetensors";
constexpr const char* kShard5 = "model-00005-of-00007.safetensors";

struct Copy {
  test::TempDir tmp;
  std::string dir = tmp.str("ckpt");
  Copy() { test::copy_tree(test::fixture("oracle/dsv4-tiny"), dir); }
  std::string shard(const char* name = kShard1) const { return dir + "/" + name; }
};

void expect_refused(const test::RunResult& r, const std::string& path, const std::vector<uint8_t>& before,
                    const std::string& what) {
  EXPECT_EQ(r.exit_code, 2) << what << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << what << ": the error names the output\n" << r.err;
  EXPECT_NE(r.err.find("OUTPUT_IS_INPUT"), std::string::npos) << what << "\n" << r.err;
  EXPECT_EQ(test::read_file(path), before) << what << ": the input was written";
}

TEST(Outputs, AReportNamedAsAnInputIsRefused) {
  Copy c;
  const std::string shard = c.shard();
  const auto before = test::read_file(shard);
  const std::string other = test::fixture("oracle/dsv4-tiny.qw-bf16");
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"ckpt", "validate --json " + q(shard) + " " + q(c.dir)},
      {"ckpt", "inspect --json " + q(shard) + " " + q(c.dir)},
      {"ckpt", "hash -o " + q(shard) + " " + q(c.dir)},
      {"ckpt", "convert --json " + q(shard) + " " + q(c.dir) + " " + q(c.tmp.str("out"))},
      {"ckpt", "diff --json " + q(shard) + " " + q(c.dir) + " " + q(other)},
      {"ckpt", "diff --json " + q(shard) + " " + q(other) + " " + q(c.dir)},
      {"ckpt", "dump " + q(c.dir) + " embed.weight -o " + q(shard)},
      {"ckpt-gpu", "verify --backend emulate --json " + q(shard) + " " + q(c.dir)},
      {"ckpt-gpu", "verify --backend emulate --json " + q(shard) + " --reference " + q(c.dir) + " " + q(other)},
  };
  for (const auto& [tool, args] : runs) expect_refused(test::run_tool(tool, "", args), shard, before, tool + " " + args);
  EXPECT_FALSE(fs::exists(c.tmp.str("out"))) << "convert refused before creating OUT";
}

TEST(Outputs, ARepackReportNamedAsItsGgufIsRefused) {
  test::TempDir tmp;
  const std::string gguf = tmp.str("m.gguf");
  test::copy_tree(test::fixture("ggml/qwen3next-tiny.gguf"), gguf);
  const auto before = test::read_file(gguf);
  auto r = test::run_ckpt("repack-experts --json " + q(gguf) + " " + q(gguf) + " " + q(tmp.str("pack")));
  expect_refused(r, gguf, before, "repack-experts --json IN");
  r = test::run_ckpt("validate --json " + q(gguf) + " " + q(gguf));
  expect_refused(r, gguf, before, "validate --json IN.gguf");
}

TEST(Outputs, AReportInsideAnInputDirectoryIsRefused) {
  Copy c;
  const std::string inside = c.dir + "/report.json";
  auto r = test::run_ckpt("validate --json " + q(inside) + " " + q(c.dir));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("inside the input directory"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(inside));
  fs::create_directories(c.dir + "/sub");
  r = test::run_ckpt("hash -o " + q(c.dir + "/sub/manifest.json") + " " + q(c.dir));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(c.dir + "/sub/manifest.json"));
}

TEST(Outputs, AHardLinkOrSymlinkToAnInputIsRefused) {
  Copy c;
  const auto before = test::read_file(c.shard());
  const std::string hard = c.tmp.str("hard.json"), soft = c.tmp.str("soft.json");
  fs::create_hard_link(c.shard(), hard);
  fs::create_symlink(c.shard(), soft);
  for (const auto& out : {hard, soft}) {
    auto r = test::run_ckpt("validate --json " + q(out) + " " + q(c.dir));
    EXPECT_EQ(r.exit_code, 2) << out << "\n" << r.err;
    EXPECT_EQ(test::read_file(c.shard()), before);
  }
  // A symlinked directory leading into the input is inside it too.
  fs::create_directory_symlink(c.dir, c.tmp.str("alias"));
  auto r = test::run_ckpt("validate --json " + q(c.tmp.str("alias/new.json")) + " " + q(c.dir));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(c.dir + "/new.json"));
}

TEST(Outputs, StdoutRedirectedOntoAnInputIsRefused) {
  Copy c;
  // `> /dev/stdout`-style aliases and a stdout that is an input file: refused, not written.
  const auto before = test::read_file(c.shard());
  const std::string cmd = test::tool_binary("ckpt") + " validate --json - " + q(c.dir) + " 1<>" + q(c.shard()) +
                          " 2>" + q(c.tmp.str("err"));
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2) << test::read_text(c.tmp.str("err"));
  EXPECT_EQ(test::read_file(c.shard()), before);
  // The human report goes to stdout too: the same rule.
  for (const std::string& args : {"validate " + q(c.dir), "inspect " + q(c.dir), "diff " + q(c.dir) + " " + q(c.dir)}) {
    const std::string human = test::tool_binary("ckpt") + " " + args + " 1<>" + q(c.shard()) + " 2>/dev/null";
    EXPECT_EQ(WEXITSTATUS(std::system(human.c_str())), 2) << args;
    EXPECT_EQ(test::read_file(c.shard()), before) << args;
  }
}

TEST(Outputs, DumpRefusesAnotherShardOfTheCheckpoint) {
  Copy c;
  const std::string other = c.shard(kShard5);
  const auto before = test::read_file(other);
  // The directory as PATH: every file in it is an input.
  auto r = test::run_ckpt("dump " + q(c.dir) + " embed.weight -o " + q(other));
  expect_refused(r, other, before, "dump DIR -o another shard");
  // One shard as PATH beside the index: its siblings are the same checkpoint.
  r = test::run_ckpt("dump " + q(c.shard()) + " embed.weight -o " + q(other));
  expect_refused(r, other, before, "dump SHARD -o a sibling shard");
  // A new file inside the checkpoint directory is refused too, and nothing is left there.
  r = test::run_ckpt("dump " + q(c.dir) + " embed.weight -o " + q(c.dir + "/embed.f32"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(c.dir + "/embed.f32"));
}

TEST(Outputs, OutputsElsewhereAreWritten) {
  Copy c;
  const std::string report = c.tmp.str("report.json"), data = c.tmp.str("embed.f32");
  EXPECT_EQ(test::run_ckpt("validate --json " + q(report) + " " + q(c.dir)).exit_code, 0);
  EXPECT_TRUE(fs::exists(report));
  auto d = test::run_ckpt("dump " + q(c.dir) + " embed.weight -o " + q(data));
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_GT(fs::file_size(data), 0u);
  EXPECT_EQ(test::run_ckpt("validate --json /dev/null " + q(c.dir)).exit_code, 0);
}

}  // namespace
}  // namespace ckpt

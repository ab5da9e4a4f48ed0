// validate --partition / --merge: the merged report equals the single-process report
// (byte for byte, summary.seconds aside) with findings in several partitions, for GGUF
// too; inconsistent sets of parts are refused with a clear error.
#include "report/merge.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "report/validation_report.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

std::string without_seconds(std::string json) {
  auto at = json.find("\"seconds\":");
  if (at == std::string::npos) return json;
  auto end = json.find_first_of(",}", at);
  return json.replace(at, end - at, "\"seconds\":0");
}

std::string text_of(const std::string& path) {
  auto b = test::read_file(path);
  return std::string(b.begin(), b.end());
}

void poke(const std::string& path, uint64_t offset, uint8_t byte) {
  auto b = test::read_file(path);
  ASSERT_LT(offset, b.size());
  b[offset] = byte;
  test::write_file(path, b);
}

struct Parts {
  std::string args;  // " 'part-0.json' 'part-1.json' ..."
  std::vector<int> exit_codes;
};

Parts run_parts(const test::TempDir& tmp, const std::string& flags, const std::string& path, unsigned n,
                const std::string& tag) {
  Parts p;
  for (unsigned i = 0; i < n; ++i) {
    std::string json = tmp.str(tag + "-" + std::to_string(i) + ".json");
    auto r = test::run_ckpt("validate -q " + flags + " --partition " + std::to_string(i) + "/" + std::to_string(n) +
                            " --json " + q(json) + " " + q(path));
    p.exit_codes.push_back(r.exit_code);
    p.args += ' ';  // not `" " + q(json)`: GCC 12 -Wrestrict false positive at -O3 (bug 105329)
    p.args += q(json);
  }
  return p;
}

// Single process vs N partitions + merge: same JSON (seconds aside), same exit code,
// same human output (its timing line aside).
void expect_merge_equals_single(const test::TempDir& tmp, const std::string& flags, const std::string& path,
                                unsigned n, int want_exit) {
  SCOPED_TRACE(flags + " N=" + std::to_string(n));
  auto single = test::run_ckpt("validate -q " + flags + " --json " + q(tmp.str("single.json")) + " " + q(path));
  ASSERT_EQ(single.exit_code, want_exit) << single.out << single.err;
  Parts parts = run_parts(tmp, flags, path, n, "part" + std::to_string(n));
  auto merged = test::run_ckpt("validate -q --merge" + parts.args + " --json " + q(tmp.str("merged.json")));
  EXPECT_EQ(merged.exit_code, want_exit) << merged.err;
  EXPECT_EQ(merged.out, single.out);  // the verdict line
  EXPECT_EQ(without_seconds(text_of(tmp.str("merged.json"))), without_seconds(text_of(tmp.str("single.json"))));
}

TEST(ValidateMerge, FindingsInSeveralPartitionsMergeToTheSingleProcessReport) {
  test::TempDir tmp;
  std::string ck = tmp.str("ck");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), ck);
  {
    auto model = test::load_model_checked(ck);
    // FP8 NaN codes in two shards, a BF16 NaN in a third, and a structural error in a fourth.
    for (const char* name : {"layers.0.attn.wkv.weight", "mtp.0.attn.wkv.weight"}) {
      const ModelTensor* t = model->view.find(name);
      ASSERT_NE(t, nullptr) << name;
      poke(model->view.file_paths[t->file], t->offset + 77, 0x7F);
    }
    const ModelTensor* embed = model->view.find("embed.weight");
    ASSERT_NE(embed, nullptr);
    poke(model->view.file_paths[embed->file], embed->offset + 101, 0x7F);
    poke(model->view.file_paths[embed->file], embed->offset + 100, 0xC1);
  }
  auto shard3 = test::read_file(ck + "/model-00003-of-00007.safetensors");
  shard3.insert(shard3.end(), 8, 'X');
  test::write_file(ck + "/model-00003-of-00007.safetensors", shard3);
  auto check = test::run_ckpt("validate --deep --max-findings 0 " + q(ck));
  for (const char* code : {"FP8_NAN_CODE", "DATA_NAN", "ST_TRAILING_BYTES"})
    EXPECT_NE(check.out.find(code), std::string::npos) << code << "\n" << check.out;
  for (unsigned n : {2u, 3u, 7u}) expect_merge_equals_single(tmp, "--deep", ck, n, 1);
  expect_merge_equals_single(tmp, "--deep --sha256", ck, 3, 1);
}

TEST(ValidateMerge, CleanCheckpointAndSingleGgufFile) {
  test::TempDir tmp;
  expect_merge_equals_single(tmp, "--deep --sha256", test::fixture("oracle/dsv4-tiny"), 4, 0);
  // One file, two partitions: partition 1 reads nothing.
  expect_merge_equals_single(tmp, "--deep", test::fixture("ggml/qwen3next-tiny.gguf"), 2, 0);
  // Not a checkpoint at all: the error travels in partition 0's report.
  expect_merge_equals_single(tmp, "--deep", tmp.str("nonexistent"), 2, 3);
}

TEST(ValidateMerge, PartitionReportsSayWhatTheyRead) {
  test::TempDir tmp;
  Parts p = run_parts(tmp, "--deep", test::fixture("oracle/dsv4-tiny"), 3, "p");
  ValidationReport r;
  std::string error;
  ASSERT_TRUE(parse_validation_report(text_of(tmp.str("p-1.json")), r, error)) << error;
  EXPECT_EQ(r.partition.text(), "1/3");
  // Balanced by input file sizes (what a deep scan reads), not by the converter's output bytes.
  EXPECT_EQ(r.partition_files,
            (std::vector<std::string>{"model-00002-of-00007.safetensors", "model-00004-of-00007.safetensors"}));
  size_t hashed = 0;
  for (const auto& t : r.tensors) {
    bool mine = t.file == "model-00002-of-00007.safetensors" || t.file == "model-00004-of-00007.safetensors";
    EXPECT_EQ(!t.xxh3.empty(), mine) << t.name;
    hashed += !t.xxh3.empty();
  }
  EXPECT_GT(hashed, 0u);
  EXPECT_EQ(r.bytes_read, [&] {
    uint64_t n = 0;
    for (const auto& t : r.tensors) n += t.xxh3.empty() ? 0 : t.nbytes;
    return n;
  }());
}

TEST(ValidateMerge, RefusesInconsistentParts) {
  test::TempDir tmp;
  const std::string tiny = test::fixture("oracle/dsv4-tiny"), edge = test::fixture("oracle/dsv4-edge");
  run_parts(tmp, "--deep", tiny, 3, "a");
  run_parts(tmp, "--deep", tiny, 2, "b");
  run_parts(tmp, "--deep", edge, 3, "e");
  run_parts(tmp, "", tiny, 3, "s");  // structural only: other options
  ASSERT_EQ(test::run_ckpt("validate -q --deep --json " + q(tmp.str("whole.json")) + " " + q(tiny)).exit_code, 0);
  struct Case {
    std::vector<std::string> parts;
    const char* message;
    int exit_code;
  };
  std::vector<Case> cases = {
      {{"a-0", "a-1"}, "partitions 2 of 3 are missing", 2},
      {{"a-0", "a-1", "a-1"}, "partition 1/3 appears twice", 2},
      {{"a-0", "a-1", "b-1"}, "disagree on the partition count", 2},
      {{"a-0", "a-1", "e-2"}, "describe different checkpoints or options", 2},
      {{"a-0", "a-1", "s-2"}, "describe different checkpoints or options", 2},
      {{"whole"}, "not a partial one", 2},
      {{"a-0", "a-1", "missing-file"}, "cannot read", 3},
  };
  for (const auto& c : cases) {
    std::string args;
    for (const auto& p : c.parts) {  // two appends: GCC 12 -Wrestrict false positive (bug 105329)
      args += ' ';
      args += q(tmp.str(p + ".json"));
    }
    auto r = test::run_ckpt("validate --merge" + args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  // A part whose file list was tampered with (it claims a file another partition owns).
  std::string text = text_of(tmp.str("a-2.json"));
  auto at = text.find("\"partition\":");
  ASSERT_NE(at, std::string::npos);
  auto files = text.find("\"files\":[", at);
  text.insert(files + 9, "\"model-00001-of-00007.safetensors\",");
  test::write_text(tmp.str("forged.json"), text);
  auto r = test::run_ckpt("validate --merge " + q(tmp.str("a-0.json")) + " " + q(tmp.str("a-1.json")) + " " +
                          q(tmp.str("forged.json")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("did not read the files partition 2/3 owns"), std::string::npos) << r.err;
  // Not JSON at all.
  test::write_text(tmp.str("junk.json"), "{\"schema\":");
  EXPECT_EQ(test::run_ckpt("validate --merge " + q(tmp.str("junk.json"))).exit_code, 2);
}

}  // namespace
}  // namespace ckpt
